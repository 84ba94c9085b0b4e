//! `annal service show | install | uninstall`: a systemd user unit that starts the store's
//! daemon (`annal serve`) at login, so capture drivers and agents find it without starting it
//! on demand.
//!
//! The unit is `annal-<namespace>.service` in `$XDG_CONFIG_HOME/systemd/user/` (else
//! `~/.config/systemd/user/`). Its `ExecStart` is this binary's absolute path with the store
//! options this shell resolves pinned (`--namespace`, `--store`, `--socket`, `--key-store` unless
//! `auto`), each argument quoted for systemd, so the daemon it starts is the one every other
//! front-end reaches. `install` writes it as every annal file is written (0600 from creation;
//! the same unit already there is left alone; a different one is the user's and is replaced
//! only with `--force`) and says how to enable it; nothing runs `systemctl` behind the user's
//! back. `uninstall` removes the unit only if annal wrote it (its first line).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use annal_engine::keys::KeyStoreChoice;
use serde_json::json;

use crate::location::{BaseDirs, Location};
use crate::owner::{OutputArgs, finish, print};
use crate::private_file::Installed;
use crate::{CliError, EXIT_UNAVAILABLE};

/// The unit's first line: how `uninstall` knows annal wrote it.
const UNIT_MARKER: &str =
    "# Written by `annal service install`; `annal service uninstall` removes it.";

/// Seconds systemd waits before it starts a daemon that failed again.
const RESTART_DELAY_SECS: u32 = 5;

/// Arguments of `annal service`.
#[derive(Debug, clap::Args)]
pub struct ServiceArgs {
    /// What to do.
    #[command(subcommand)]
    pub action: ServiceAction,
}

/// `annal service` actions.
#[derive(Debug, clap::Subcommand)]
pub enum ServiceAction {
    /// Print the unit `install` would write.
    Show,
    /// Write the unit into the systemd user directory.
    Install {
        /// Replace a unit of that name that differs from this one.
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        out: OutputArgs,
    },
    /// Remove the unit annal wrote (stop and disable it first with systemctl).
    Uninstall {
        #[command(flatten)]
        out: OutputArgs,
    },
}

/// The unit's file name for `location`'s namespace.
fn unit_name(location: &Location) -> String {
    format!("annal-{}.service", location.namespace.as_str())
}

/// The systemd user unit directory: `$XDG_CONFIG_HOME/systemd/user`, else
/// `$HOME/.config/systemd/user` (each only as an absolute path, [`BaseDirs::config_home`]).
fn unit_dir() -> Result<PathBuf, CliError> {
    BaseDirs::from_env()
        .config_home()
        .map(|config| config.join("systemd").join("user"))
        .ok_or_else(|| {
            CliError::usage("neither XDG_CONFIG_HOME nor HOME is an absolute path: set one")
        })
}

/// One argument as systemd's `ExecStart` reads it: double-quoted, with `\` and `"` escaped,
/// `%` (a specifier) doubled and `$` (a variable) doubled.
fn quoted(arg: &str) -> String {
    let mut out = String::with_capacity(arg.len() + 2);
    out.push('"');
    for c in arg.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '%' => out.push_str("%%"),
            '$' => out.push_str("$$"),
            other => out.push(other),
        }
    }
    out.push('"');
    out
}

/// The unit for `location`, starting `binary serve`.
pub fn unit(location: &Location, binary: &Path) -> Result<String, CliError> {
    let mut args = vec![binary.display().to_string()];
    args.extend([
        "--namespace".to_owned(),
        location.namespace.as_str().to_owned(),
        "--store".to_owned(),
        location.dir.display().to_string(),
    ]);
    if let Some(socket) = &location.socket {
        args.extend(["--socket".to_owned(), socket.display().to_string()]);
    }
    if location.key_store != KeyStoreChoice::Auto {
        args.extend([
            "--key-store".to_owned(),
            location.key_store.as_str().to_owned(),
        ]);
    }
    args.push("serve".to_owned());
    if args.iter().any(|a| a.chars().any(char::is_control)) {
        return Err(CliError::usage(
            "a path holds a control character, which a systemd unit cannot carry",
        ));
    }
    let exec: Vec<String> = args.iter().map(|a| quoted(a)).collect();
    Ok(format!(
        "{UNIT_MARKER}\n\
         [Unit]\n\
         Description=annal history daemon (namespace {namespace})\n\
         \n\
         [Service]\n\
         Type=simple\n\
         ExecStart={exec}\n\
         Restart=on-failure\n\
         RestartSec={RESTART_DELAY_SECS}\n\
         \n\
         [Install]\n\
         WantedBy=default.target\n",
        namespace = location.namespace.as_str(),
        exec = exec.join(" "),
    ))
}

fn this_binary() -> Result<PathBuf, CliError> {
    std::env::current_exe()
        .map_err(|e| CliError::unavailable(format!("this program's path cannot be read: {e}")))
}

/// Runs `annal service`.
pub fn run(location: &Location, args: &ServiceArgs) -> ExitCode {
    match &args.action {
        ServiceAction::Show => finish(this_binary().and_then(|binary| {
            let text = unit(location, &binary)?;
            crate::write_out(&text).map_or_else(Ok, |()| Ok(ExitCode::SUCCESS))
        })),
        ServiceAction::Install { force, out } => finish((|| {
            let text = unit(location, &this_binary()?)?;
            let name = unit_name(location);
            let (path, installed) = crate::private_file::install(
                &unit_dir()?,
                &name,
                text.as_bytes(),
                *force,
                "annal service show",
            )?;
            let changed = installed == Installed::Written;
            let value = json!({"path": path.display().to_string(), "changed": changed});
            Ok(print(out, &value, || {
                format!(
                    "{} {}\nto start it now and at every login: systemctl --user daemon-reload && \
                     systemctl --user enable --now {name}\n",
                    if changed { "wrote" } else { "already there:" },
                    path.display()
                )
            }))
        })()),
        ServiceAction::Uninstall { out } => finish((|| {
            let path = unit_dir()?.join(unit_name(location));
            let removed = match std::fs::read_to_string(&path) {
                Ok(text) if text.starts_with(UNIT_MARKER) => {
                    std::fs::remove_file(&path).map_err(|e| CliError {
                        exit: EXIT_UNAVAILABLE,
                        message: format!("{}: {e}", path.display()),
                    })?;
                    true
                }
                Ok(_) => {
                    return Err(CliError::usage(format!(
                        "{} was not written by annal: left as it is",
                        path.display()
                    )));
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
                Err(e) => {
                    return Err(CliError::unavailable(format!("{}: {e}", path.display())));
                }
            };
            let value = json!({"path": path.display().to_string(), "removed": removed});
            Ok(print(out, &value, || {
                if removed {
                    format!(
                        "removed {} (systemctl --user daemon-reload forgets it)\n",
                        path.display()
                    )
                } else {
                    format!("no unit at {}\n", path.display())
                }
            }))
        })()),
    }
}
