//! `annal report` (one self-contained HTML page) and `annal stats` (the same figures on a
//! terminal, or as JSON).
//!
//! Both are owner reads through the policy gate, as every `annal list` is: the events come
//! from daemon `query` requests (the owner's `history_query`, audited as `local_cli`, each
//! non-empty page appending the contract's `access` event unless `annal owner-access off`),
//! paged newest first by `until_sequence` in pages of [`QUERY_LIMIT_MAX_EVENTS`], at most
//! [`REPORT_EVENTS_MAX`] events; the owner's journal facts from the `status` (disk use, quota,
//! retention, health), `audit_summary` (who read, how much, when, denials) and `grants` (revoked
//! agents) requests. Nothing reads a chunk directly.
//!
//! - `model.rs`: the pure fold of events and facts into what is drawn (tested there).
//! - `pages.rs`: the paged owner reads (typed when the engine runs in this process).
//! - `html.rs`: the page (maud, inline SVG, a CSP that forbids every fetch).
//! - `stats.rs`: the terminal and JSON forms.

mod html;
mod model;
mod pages;
mod stats;

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use annal_actors::daemon::Request;
use annal_schema::tools::QUERY_LIMIT_MAX_EVENTS;
#[cfg(test)]
use serde_json::Value;

use crate::CliError;
use crate::link::Link;
use crate::location::Location;
use crate::owner::finish;
use crate::reads::FilterArgs;

/// Most events one report or stats run reads (about 200 MB of answers' JSON at the most);
/// beyond it the oldest are left out, and the report says so.
pub const REPORT_EVENTS_MAX: usize = 2_000_000;

/// Mode of the report file: the owner's alone (it holds metadata of their history).
const REPORT_FILE_MODE: u32 = 0o600;

/// Where the report goes without `--out`.
const REPORT_DEFAULT_FILE: &str = "annal-report.html";

/// The read's bounds, shared by `report` and `stats`.
#[derive(Debug, Default, clap::Args)]
pub struct ScopeArgs {
    /// Only events at or after WHEN: a duration back from now (30m, 2h, 7d) or a time
    /// (as `annal list --since`).
    #[arg(long, value_name = "WHEN")]
    pub since: Option<String>,
    /// Only events at or before WHEN (as --since).
    #[arg(long, value_name = "WHEN")]
    pub until: Option<String>,
    /// Only this session's events: its opaque id or its raw label (never written to the
    /// report: the page names sessions by their opaque ids).
    #[arg(long, value_name = "SESSION")]
    pub session: Option<String>,
    /// Read the store (--store, --namespace) with the namespace root key in FILE (64 hex
    /// characters, mode 0600), held in this process's memory: a store another implementation
    /// wrote. Implies --no-daemon; the reads still go through the gate.
    #[arg(long, value_name = "FILE")]
    pub key_file: Option<PathBuf>,
}

/// Arguments of `annal report`.
#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    #[command(flatten)]
    pub scope: ScopeArgs,
    /// The HTML file to write (mode 0600; replaced when it exists).
    #[arg(long, value_name = "FILE.html", default_value = REPORT_DEFAULT_FILE)]
    pub out: PathBuf,
    /// Open the file in the desktop's browser afterwards (`xdg-open`).
    #[arg(long)]
    pub open: bool,
}

/// Arguments of `annal stats`.
#[derive(Debug, clap::Args)]
pub struct StatsArgs {
    #[command(flatten)]
    pub scope: ScopeArgs,
    #[command(flatten)]
    pub out: crate::owner::OutputArgs,
}

/// What was read for one report.
struct Collected {
    summary: model::Summary,
    facts: html::Facts,
}

/// The owner's filter flags of `scope` (the rest unset).
fn filter(scope: &ScopeArgs) -> FilterArgs {
    FilterArgs {
        since: scope.since.clone(),
        until: scope.until.clone(),
        session: scope.session.clone(),
        ..FilterArgs::default()
    }
}

/// Reads the events (paged) and the journal facts over one link.
async fn collect(link: &mut Link, scope: &ScopeArgs) -> Result<Collected, CliError> {
    let now_ms = annal_engine::clock::Clock::now_ms(&annal_engine::clock::SystemClock);
    let base = crate::reads::request(
        crate::reads::query_arguments(&[("limit", Some(QUERY_LIMIT_MAX_EVENTS.into()))]),
        &filter(scope),
        None,
    )?;
    let status = link.request(Request::Status {}).await?;
    // A store annal never enabled (one the reference wrote) has no policy journal yet: no
    // audit trail and no grants, which the page says, rather than no report.
    let audit = link
        .request(Request::AuditSummary { since_ms: None })
        .await
        .ok();
    let grants = link.request(Request::Grants).await.ok();
    let journal_read = audit.is_some() && grants.is_some();
    let (audit, grants) = (audit.unwrap_or_default(), grants.unwrap_or_default());
    let (rows, truncated) = pages::read_all(link, &base).await?;
    let revoked: Vec<String> = grants["revoked"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let actors = audit["actors"].as_array().cloned().unwrap_or_default();
    let contract = &status["status"];
    let facts = html::Facts {
        generated_ms: now_ms,
        scope: scope_text(scope),
        readers: model::readers(&actors, &revoked),
        bytes_used: contract["bytes_used"].as_u64().unwrap_or(0),
        quota_bytes: contract["quota_bytes"].as_u64().unwrap_or(0),
        quota_counted_bytes: status["usage"]["quota_counted_bytes"].as_u64(),
        retention_days: contract["retention_days"]
            .as_u64()
            .and_then(|d| u32::try_from(d).ok())
            .unwrap_or(0),
        health: contract["health"].as_str().unwrap_or("unknown").to_owned(),
        dropped_events: contract["dropped_events"].as_u64().unwrap_or(0),
        truncated,
        journal_read,
    };
    Ok(Collected {
        summary: model::summarize(rows, scope.session.is_none()),
        facts,
    })
}

/// What the read covered, for the page's heading. Never the `--session` value (it may be a
/// raw label): the lanes name the session by its opaque id.
fn scope_text(scope: &ScopeArgs) -> String {
    let mut parts = Vec::new();
    if let Some(since) = &scope.since {
        parts.push(format!("since {since}"));
    }
    if let Some(until) = &scope.until {
        parts.push(format!("until {until}"));
    }
    if scope.session.is_some() {
        parts.push("one session".to_owned());
    }
    if parts.is_empty() {
        "the whole history".to_owned()
    } else {
        format!("the history {}", parts.join(", "))
    }
}

/// The sidecar's journal area (`annal_engine::storage::Area::Journal`), where annal keeps its
/// engine journal.
const SIDECAR_JOURNAL_DIR: &str = "journal";

/// Whether annal already keeps a journal for the store at `location` (any file in its
/// sidecar's journal area), looked at before an engine opens it.
fn annal_journal_exists(location: &Location) -> bool {
    location
        .layout()
        .sidecar()
        .map(|sidecar| sidecar.join(SIDECAR_JOURNAL_DIR))
        .and_then(|dir| std::fs::read_dir(dir).ok())
        .is_some_and(|mut entries| entries.next().is_some())
}

/// A store another implementation wrote and enabled (its `state.json` says so) that annal
/// never enabled is refused every read (`history_storage_unavailable`) until the owner enables
/// it through annal. With `--key-file` the owner names such a store on purpose, so its owner's
/// opt-in there is taken as the opt-in here: annal enables it (journaled, and the contract's
/// `control` event appended, as `annal enable` does) and says so. A store disabled there, or
/// one annal already has a policy journal for (enabled or disabled through annal), is left as
/// it is, and its read is refused as it would be.
async fn adopt_reference_enable(
    link: &mut Link,
    location: &Location,
    annal_journal_existed: bool,
) -> Result<(), CliError> {
    let status = link.request(Request::Status {}).await?;
    if status["status"]["enabled"] == true {
        return Ok(());
    }
    // Once annal kept a journal for the store (it enabled or disabled it), annal's own state
    // holds: a disable through annal is never widened by what state.json says.
    if annal_journal_existed {
        return Ok(());
    }
    let storage =
        annal_engine::store::open_store(&location.layout(), annal_engine::storage::Access::Read)
            .map_err(|e| CliError::unavailable(format!("--store: cannot open the store: {e}")))?;
    let mirror = annal_engine::store::read_state_mirror(&storage)
        .map_err(|e| CliError::unavailable(format!("--store: cannot read state.json: {e}")))?;
    if mirror.is_some_and(|m| m.enabled) {
        link.request(Request::Enable {}).await?;
        eprintln!(
            "annal: the store's state.json says its owner enabled it: annal enabled reading it \
             too (journaled, with the contract's control event)"
        );
    }
    Ok(())
}

/// Reads what a report needs through one link to the store.
fn read(location: &Location, no_daemon: bool, scope: &ScopeArgs) -> Result<Collected, CliError> {
    let runtime = crate::runtime()?;
    runtime.block_on(async {
        let mut link = match &scope.key_file {
            Some(key_file) => {
                let journal_existed = annal_journal_exists(location);
                let mut link = Link::with_key_file(location, key_file)?;
                if let Err(error) =
                    adopt_reference_enable(&mut link, location, journal_existed).await
                {
                    link.close().await;
                    return Err(error);
                }
                link
            }
            None => Link::open(location, no_daemon).await?,
        };
        let result = collect(&mut link, scope).await;
        link.close().await;
        result
    })
}

/// Writes `text` to `path` with mode 0600: to a new file beside it, then renamed over it.
fn write_private(path: &Path, text: &str) -> Result<(), CliError> {
    let name = path
        .file_name()
        .ok_or_else(|| CliError::usage("--out: give a file name (for example report.html)"))?;
    let mut temporary_name = std::ffi::OsString::from(".");
    temporary_name.push(name);
    temporary_name.push(format!(".{}.tmp", std::process::id()));
    let temporary = path.with_file_name(temporary_name);
    let fail =
        |e: std::io::Error| CliError::found(format!("--out: cannot write {}: {e}", path.display()));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(REPORT_FILE_MODE)
        .open(&temporary)
        .map_err(fail)?;
    let written = file
        .write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .and_then(|()| std::fs::rename(&temporary, path));
    if let Err(error) = written {
        let _ = std::fs::remove_file(&temporary);
        return Err(fail(error));
    }
    Ok(())
}

/// Refuses an `--out` that names a directory (exit 2, naming the flag).
fn check_out(out: &Path) -> Result<(), CliError> {
    if out.is_dir() {
        return Err(CliError::usage(
            "--out: that is a directory: give a file name (for example report.html)",
        ));
    }
    Ok(())
}

/// Reads the whole history over `link` and writes its report to `out` (0600); returns what
/// to say about it.
pub async fn write_over(link: &mut Link, out: &Path) -> Result<String, CliError> {
    check_out(out)?;
    let collected = collect(link, &ScopeArgs::default()).await?;
    written(&collected, out)
}

/// Writes `collected`'s page to `out` and says so.
fn written(collected: &Collected, out: &Path) -> Result<String, CliError> {
    let page = html::page(&collected.summary, &collected.facts);
    write_private(out, &page)?;
    Ok(format!(
        "wrote {} ({} events, {} sessions, mode 0600)\n",
        out.display(),
        collected.summary.totals.events,
        collected.summary.totals.sessions
    ))
}

/// `annal report`.
pub fn report(location: &Location, no_daemon: bool, args: &ReportArgs) -> ExitCode {
    finish((|| {
        check_out(&args.out)?;
        let collected = read(location, no_daemon, &args.scope)?;
        let mut text = written(&collected, &args.out)?;
        if args.open {
            match std::process::Command::new("xdg-open")
                .arg(&args.out)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
            {
                Ok(mut child) => {
                    std::thread::spawn(move || child.wait());
                }
                Err(e) => text.push_str(&format!("could not open it (xdg-open: {e})\n")),
            }
        }
        Ok(match crate::write_out(&text) {
            Ok(()) => ExitCode::SUCCESS,
            Err(code) => code,
        })
    })())
}

/// `annal stats`.
pub fn stats(location: &Location, no_daemon: bool, args: &StatsArgs) -> ExitCode {
    finish(read(location, no_daemon, &args.scope).map(|collected| {
        if args.out.json {
            let value = stats::json(&collected.summary, &collected.facts);
            match crate::write_out(&format!("{value}\n")) {
                Ok(()) => ExitCode::SUCCESS,
                Err(code) => code,
            }
        } else {
            stats::print(&collected.summary, &collected.facts)
        }
    }))
}

/// The report page for `events` and `facts` (for tests of the whole page).
#[cfg(test)]
fn page_of(events: &[Value], facts: &html::Facts) -> String {
    html::page(
        &model::summarize(
            events.iter().filter_map(model::Row::from_event).collect(),
            true,
        ),
        facts,
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_scope_never_repeats_the_session_value() {
        let scope = ScopeArgs {
            since: Some("2h".into()),
            until: None,
            session: Some("planted-label-x".into()),
            key_file: None,
        };
        let text = scope_text(&scope);
        assert!(!text.contains("planted-label-x"));
        assert_eq!(text, "the history since 2h, one session");
        let page = page_of(
            &[],
            &html::Facts {
                scope: text,
                ..html::Facts::default()
            },
        );
        assert!(!page.contains("planted-label-x"));
    }

    #[test]
    fn the_report_file_is_the_owners_alone_and_replaced_whole() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.html");
        std::fs::write(&path, "old").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        write_private(&path, "new").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
