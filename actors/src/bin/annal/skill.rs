//! `annal skill show`, `annal skill instruction` and `annal skill install DIR [--force]`: the
//! bundled agent skill (`skills/annal-history/SKILL.md`) and system-instruction text
//! (`skills/system-instruction.txt`), both embedded at build time, that tell a model when and
//! how to consult history (seed 000, "Consultation behavior").
//!
//! - `show` prints the skill as it is; `instruction` prints the system-instruction paragraph,
//!   for a host that puts its guidance in the system prompt instead of loading skills.
//! - `install DIR` writes `DIR/annal-history/SKILL.md`, the Agent Skills layout a host loads from
//!   its skills folder. Directories it creates are 0700 and the file 0600, like every file annal
//!   creates. An existing `SKILL.md` with the same bytes is left as it is; one with other bytes
//!   is refused ([`InstallError::Differs`], exit 2) unless `--force`. The file is written beside
//!   its place and renamed into it, so a host never loads half a skill.
//!
//! The skill, the system instruction and the MCP tool descriptions (`mcp.rs`) state the same
//! consultation rules: `CONSULTATION_RULES` lists the phrases each must contain, and a test
//! checks all three, so none can be edited to say something the others do not.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::json;

use crate::CliError;
use crate::owner::{OutputArgs, finish, print};

/// The skill, as shipped in `skills/annal-history/SKILL.md`.
pub const SKILL_TEXT: &str = include_str!("../../../../skills/annal-history/SKILL.md");

/// The system-instruction text, as shipped in `skills/system-instruction.txt`.
pub const SYSTEM_INSTRUCTION_TEXT: &str = include_str!("../../../../skills/system-instruction.txt");

/// The skill's folder name (the `name` in its front matter).
pub const SKILL_DIR_NAME: &str = "annal-history";

/// The skill's file name in the Agent Skills layout.
pub const SKILL_FILE_NAME: &str = "SKILL.md";

/// The consultation rules the skill and the tool descriptions both state, as phrases each must
/// contain (compared in lower case, with runs of white space and Markdown's backquotes ignored):
/// (what the rule is, the phrase). Only the tests read it.
#[cfg(test)]
pub const CONSULTATION_RULES: &[(&str, &str)] = &[
    (
        "when to consult",
        "resuming interrupted work, recalling what was already done, explaining a prior run, \
         or finding where a workflow stopped",
    ),
    ("status first", "before history_query"),
    (
        "which status to keep",
        "keep what it says: disabled, paused, unhealthy or dropped events",
    ),
    (
        "evidence, not a transcript",
        "metadata evidence, not a transcript",
    ),
    (
        "what is never kept",
        "no screenshots, typed text, window titles, urls or tool arguments are kept",
    ),
    (
        "omitted stays unknown",
        "anything omitted stays unknown: do not guess it",
    ),
    (
        "a lead, verified",
        "use a returned application or capability as a lead and verify the current state \
         through the least intrusive source",
    ),
    ("results enter the context", "enters your context"),
    ("surface a denial", "surface a denial"),
    ("continue without history", "continue without history"),
];

/// Arguments of `annal skill`.
#[derive(Debug, clap::Args)]
pub struct SkillArgs {
    /// What to do with the skill.
    #[command(subcommand)]
    pub action: SkillAction,
}

/// `annal skill show | install`.
#[derive(Debug, clap::Subcommand)]
pub enum SkillAction {
    /// Print the bundled skill (SKILL.md).
    Show,
    /// Print the system-instruction text (the skill's rules in one paragraph).
    Instruction,
    /// Write the skill into a host's skills folder: DIR/annal-history/SKILL.md.
    Install(InstallArgs),
}

/// Arguments of `annal skill install`.
#[derive(Debug, clap::Args)]
pub struct InstallArgs {
    /// The host's skills folder (created 0700 when missing).
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// Replace an existing SKILL.md that differs from the bundled one.
    #[arg(long)]
    pub force: bool,
    #[command(flatten)]
    pub out: OutputArgs,
}

pub use crate::private_file::{InstallError, Installed};

/// Writes the skill into `skills_dir` (module doc): the file's path and what was done.
pub fn install(skills_dir: &Path, force: bool) -> Result<(PathBuf, Installed), InstallError> {
    crate::private_file::directory(skills_dir)?;
    crate::private_file::install(
        &skills_dir.join(SKILL_DIR_NAME),
        SKILL_FILE_NAME,
        SKILL_TEXT.as_bytes(),
        force,
        "annal skill show",
    )
}

/// Runs `annal skill`.
pub fn run(args: &SkillArgs) -> ExitCode {
    match &args.action {
        SkillAction::Show => match crate::write_out(SKILL_TEXT) {
            Ok(()) => ExitCode::SUCCESS,
            Err(code) => code,
        },
        SkillAction::Instruction => match crate::write_out(SYSTEM_INSTRUCTION_TEXT) {
            Ok(()) => ExitCode::SUCCESS,
            Err(code) => code,
        },
        SkillAction::Install(install_args) => finish(
            install(&install_args.dir, install_args.force)
                .map_err(CliError::from)
                .map(|(path, installed)| {
                    let changed = installed == Installed::Written;
                    let value = json!({"path": path.display().to_string(), "changed": changed});
                    print(&install_args.out, &value, || {
                        if changed {
                            format!("installed the annal-history skill: {}\n", path.display())
                        } else {
                            format!(
                                "the annal-history skill is already installed: {}\n",
                                path.display()
                            )
                        }
                    })
                }),
        ),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::os::unix::fs::PermissionsExt;

    use super::*;
    use crate::EXIT_USAGE;
    use crate::mcp::{QUERY_DESCRIPTION, SERVER_INSTRUCTIONS, STATUS_DESCRIPTION};

    /// Lower case, backquotes gone, every run of white space one space.
    fn normalized(text: &str) -> String {
        text.to_lowercase()
            .replace('`', "")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The rules of [`CONSULTATION_RULES`] whose phrase `text` lacks.
    fn missing_rules(text: &str) -> Vec<&'static str> {
        let text = normalized(text);
        CONSULTATION_RULES
            .iter()
            .filter(|(_, phrase)| !text.contains(&normalized(phrase)))
            .map(|(rule, _)| *rule)
            .collect()
    }

    #[test]
    fn the_skill_and_the_tool_descriptions_state_the_same_rules() {
        assert_eq!(missing_rules(SKILL_TEXT), Vec::<&str>::new(), "the skill");
        assert_eq!(
            missing_rules(SYSTEM_INSTRUCTION_TEXT),
            Vec::<&str>::new(),
            "the system instruction"
        );
        let tools = format!("{STATUS_DESCRIPTION} {QUERY_DESCRIPTION} {SERVER_INSTRUCTIONS}");
        assert_eq!(missing_rules(&tools), Vec::<&str>::new(), "the tools");
    }

    #[test]
    fn a_text_that_drops_or_rewords_a_rule_is_caught() {
        // The skill with its denial rule reworded, and the query description without its
        // verification rule: each check names exactly the rule that went.
        let reworded = SKILL_TEXT.replace("surface a denial", "mention a refusal");
        assert_eq!(missing_rules(&reworded), ["surface a denial"]);
        let dropped = QUERY_DESCRIPTION.replace(
            "Use a returned application or capability as a lead and verify the current state \
             through the least intrusive source.",
            "",
        );
        let tools = format!("{STATUS_DESCRIPTION} {dropped} {SERVER_INSTRUCTIONS}");
        assert_eq!(missing_rules(&tools), ["a lead, verified"]);
    }

    #[test]
    fn the_skill_names_only_real_tools_codes_and_health_categories() {
        // Every `history_*`, `key_*`, `storage_*` word the skill uses is a tool, an error code
        // or a health category annal has: the skill cannot tell a model to look for a flag or
        // a code that does not exist.
        let mut known: Vec<String> = vec!["history_status".into(), "history_query".into()];
        known.extend(
            annal_schema::HealthCategory::ALL
                .iter()
                .map(|c| c.as_str().to_owned()),
        );
        known.extend(
            annal_schema::ErrorCode::ALL
                .iter()
                .map(|c| c.as_str().to_owned()),
        );
        let words = SKILL_TEXT
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
            .filter(|w| {
                ["history_", "key_", "storage_"]
                    .iter()
                    .any(|p| w.starts_with(p))
            });
        let mut seen = 0;
        for word in words {
            // "history_*" in the prose stands for the family of failure codes.
            if word == "history_" {
                continue;
            }
            seen += 1;
            assert!(known.iter().any(|k| k == word), "unknown name {word}");
        }
        assert!(
            seen >= 8,
            "the skill names the tools and categories: {seen}"
        );
        for category in [
            "disabled",
            "paused",
            "events_dropped",
            "key_locked",
            "storage_unavailable",
            "quota_reached",
            "writer_stopped",
        ] {
            assert!(SKILL_TEXT.contains(category), "{category}");
        }
    }

    #[test]
    fn the_skill_has_the_agent_skills_front_matter() {
        let rest = SKILL_TEXT
            .strip_prefix("---\n")
            .expect("front matter first");
        let (front, body) = rest.split_once("\n---\n").expect("front matter closed");
        let fields: Vec<(&str, &str)> = front
            .lines()
            .map(|line| line.split_once(": ").expect("name: value"))
            .collect();
        assert_eq!(
            fields.iter().map(|(k, _)| *k).collect::<Vec<_>>(),
            ["name", "description"]
        );
        assert_eq!(fields[0].1, SKILL_DIR_NAME);
        // The Agent Skills limits: a description of at most 1,024 characters, a name of
        // lower-case letters, digits and hyphens of at most 64.
        assert!(fields[1].1.len() <= 1_024 && !fields[1].1.is_empty());
        assert!(SKILL_DIR_NAME.len() <= 64);
        assert!(body.trim_start().starts_with("# "));
    }

    #[test]
    fn install_writes_a_private_folder_and_refuses_to_overwrite_a_different_file() {
        let root = tempfile::tempdir().unwrap();
        let skills = root.path().join("host").join("skills");
        let (path, done) = install(&skills, false).unwrap();
        assert_eq!(done, Installed::Written);
        assert_eq!(path, skills.join("annal-history").join("SKILL.md"));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), SKILL_TEXT);
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(&skills.join("annal-history")), 0o700);
        assert_eq!(mode(&skills), 0o700);
        // Again: nothing to do.
        assert_eq!(install(&skills, false).unwrap().1, Installed::Unchanged);
        // A host's own edit is not overwritten without --force, and is named.
        std::fs::write(&path, "edited by the owner").unwrap();
        let error = install(&skills, false).unwrap_err();
        assert!(matches!(&error, InstallError::Differs { path: p, .. } if *p == path));
        let message = CliError::from(error);
        assert_eq!(message.exit, EXIT_USAGE);
        assert!(message.message.contains(&path.display().to_string()));
        assert!(message.message.contains("--force"));
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "edited by the owner"
        );
        assert_eq!(install(&skills, true).unwrap().1, Installed::Written);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), SKILL_TEXT);
        // Nothing but the skill in its folder (no staging file left).
        let names: Vec<_> = std::fs::read_dir(skills.join("annal-history"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["SKILL.md"]);
        // A file where the skills folder should be.
        let file = root.path().join("a-file");
        std::fs::write(&file, "").unwrap();
        assert!(matches!(
            install(&file, true),
            Err(InstallError::NotADirectory { .. })
        ));
    }
}
