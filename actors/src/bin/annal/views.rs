//! The owner's views and a host's preflight from the command line:
//! - `annal grants`: each grant in force with its source, expiry, idle deadline, last use and
//!   whether it is live now, and the revoked actors;
//! - `annal audit [--actor A] [--since D] [--denied]`: who read the history, when, the verdict,
//!   the outcome and how many events each call returned (the audit journal; no content);
//! - `annal preflight --actor A [--limit N] [--session S]`: a host's deterministic consultation
//!   (the daemon's `preflight`): its verdict, and the newest slice when history is usable. It
//!   never fails the host: no store, a stopped daemon or a refusal is
//!   `continue_without_history` with a fixed reason and exit 0; only bad usage exits 2.
//!
//! Times print as UTC RFC 3339; `--json` prints the daemon's answer as it is (times in ms since
//! the epoch).

use std::process::ExitCode;

use annal_actors::daemon::protocol::Request;
use annal_actors::preflight::Preflight;
use serde_json::Value;

use crate::location::Location;
use crate::owner::{OutputArgs, duration, finish, one, print};
use crate::{CliError, EXIT_USAGE};

/// Arguments of `annal grants`.
#[derive(Debug, clap::Args)]
pub struct GrantsArgs {
    #[command(flatten)]
    pub out: OutputArgs,
}

/// Arguments of `annal audit`.
#[derive(Debug, clap::Args)]
pub struct AuditArgs {
    /// Only this agent's calls.
    #[arg(long, value_name = "ACTOR")]
    pub actor: Option<String>,
    /// Only calls of the last DURATION, for example 30m, 2h, 7d.
    #[arg(long, value_name = "DURATION")]
    pub since: Option<String>,
    /// Only calls the gate denied.
    #[arg(long)]
    pub denied: bool,
    #[command(flatten)]
    pub out: OutputArgs,
}

/// Arguments of `annal preflight`.
#[derive(Debug, clap::Args)]
pub struct PreflightArgs {
    /// The agent the host consults history for (its `annal mcp --actor`).
    #[arg(long, value_name = "ACTOR")]
    pub actor: String,
    /// How many of the newest events to read (1..=200).
    #[arg(long, default_value_t = annal_actors::daemon::protocol::PREFLIGHT_DEFAULT_LIMIT_EVENTS,
          value_parser = clap::value_parser!(u8).range(1..=200))]
    pub limit: u8,
    /// Only this session's events (the keyed session id events carry).
    #[arg(long, value_name = "SESSION_ID")]
    pub session: Option<String>,
    #[command(flatten)]
    pub out: OutputArgs,
}

/// An instant given in ms since the epoch, as [`local`] (`-` when it cannot be shown).
pub fn time(ms: Option<u64>) -> String {
    ms.and_then(|ms| i64::try_from(ms).ok())
        .and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
        .map_or_else(|| "-".to_owned(), local)
}

/// An RFC 3339 event time (`2026-12-04T15:04:05.123Z`, the contract's `time`) as [`local`];
/// the text as it is when it does not parse.
pub fn local_rfc3339(text: &str) -> String {
    text.parse::<jiff::Timestamp>()
        .map_or_else(|_| text.to_owned(), local)
}

/// `at` in the system's time zone (`TZ`, else `/etc/localtime`, else UTC), to the second, with
/// its offset: `2026-12-04 16:04:05 +01:00`. Only for a person: `--json` keeps the exact UTC
/// form.
pub fn local(at: jiff::Timestamp) -> String {
    at.to_zoned(jiff::tz::TimeZone::system())
        .strftime("%Y-%m-%d %H:%M:%S %:z")
        .to_string()
}

/// `grants`.
pub fn grants(location: &Location, no_daemon: bool, args: &GrantsArgs) -> ExitCode {
    finish(one(location, no_daemon, Request::Grants).map(|value| {
        print(&args.out, &value, || {
            let mut text = String::new();
            let listed = value["grants"].as_array().cloned().unwrap_or_default();
            if listed.is_empty() {
                text.push_str("no grants: no agent may read history (`annal grant` gives one).\n");
            }
            for grant in &listed {
                let live = if grant["live"].as_bool().unwrap_or(false) {
                    "live"
                } else {
                    "lapsed"
                };
                text.push_str(&format!(
                    "{} {} ({}, {live}): expires {}, lapses unused at {}, last used {}\n",
                    grant["actor"].as_str().unwrap_or("-"),
                    grant["operation"].as_str().unwrap_or("-"),
                    grant["source"].as_str().unwrap_or("-"),
                    time(grant["expires_at_ms"].as_u64()),
                    time(grant["idle_deadline_ms"].as_u64()),
                    time(grant["last_used_ms"].as_u64()),
                ));
            }
            for actor in value["revoked"].as_array().cloned().unwrap_or_default() {
                text.push_str(&format!(
                    "{} revoked (until granted or re-approved)\n",
                    actor.as_str().unwrap_or("-")
                ));
            }
            text
        })
    }))
}

/// `audit`.
pub fn audit(location: &Location, no_daemon: bool, args: &AuditArgs) -> ExitCode {
    let request = (|| {
        let since_ms = match duration("--since", args.since.as_ref())? {
            None => None,
            Some(secs) => {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_err(|_| CliError::unavailable("the system clock is before 1970"))?;
                let now_ms = u64::try_from(now.as_millis()).unwrap_or(u64::MAX);
                Some(now_ms.saturating_sub(secs.saturating_mul(1_000)))
            }
        };
        Ok::<_, CliError>(Request::Audit {
            actor: args.actor.clone(),
            since_ms,
            denied: args.denied,
        })
    })();
    finish(
        request
            .and_then(|request| one(location, no_daemon, request))
            .map(|value| {
                print(&args.out, &value, || {
                    let entries = value["entries"].as_array().cloned().unwrap_or_default();
                    if entries.is_empty() {
                        return "no calls recorded that match.\n".to_owned();
                    }
                    let omitted = match value["omitted"].as_u64() {
                        Some(n) if n > 0 => format!(
                            "({n} older entries not shown: narrow with --since or --actor)\n"
                        ),
                        _ => String::new(),
                    };
                    omitted
                        + &entries
                            .iter()
                            .map(|entry| {
                                format!(
                                    "{} {} {}: {}, {}, {} events\n",
                                    time(entry["at_ms"].as_u64()),
                                    entry["actor"].as_str().unwrap_or("-"),
                                    entry["operation"].as_str().unwrap_or("(unknown tool)"),
                                    entry["verdict"].as_str().unwrap_or("refused"),
                                    entry["outcome"].as_str().unwrap_or("unfinished"),
                                    entry["exported_events"]
                                        .as_u64()
                                        .or(entry["returned_events"].as_u64())
                                        .unwrap_or(0),
                                )
                            })
                            .collect::<String>()
                })
            }),
    )
}

/// `preflight`: never fails the host (module doc).
pub fn preflight(location: &Location, no_daemon: bool, args: &PreflightArgs) -> ExitCode {
    let request = Request::Preflight {
        actor: args.actor.clone(),
        limit: Some(args.limit),
        session_id: args.session.clone(),
    };
    let value = match one(location, no_daemon, request) {
        Ok(value) => value,
        // The caller's own mistake (an actor id that is not one) is still an error.
        Err(error) if error.exit == EXIT_USAGE => return finish(Err(error)),
        // No store, no daemon, a dead daemon: continue without history.
        Err(_) => Preflight::absent().to_json(),
    };
    print(&args.out, &value, || preflight_text(&value))
}

/// A preflight's verdict for a person.
fn preflight_text(value: &Value) -> String {
    let consultation = &value["consultation"];
    let events = value["events"].as_array().map_or(0, Vec::len);
    match consultation["verdict"].as_str() {
        Some("use") => format!("use history: {events} events, no caveat.\n"),
        Some("use_with_caveats") => {
            let caveats: Vec<&str> = consultation["caveats"]
                .as_array()
                .map(|c| c.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            format!(
                "use history with caveats ({}): {events} events.\n",
                caveats.join(", ")
            )
        }
        _ => format!(
            "continue without history: {}.\n",
            consultation["reason"].as_str().unwrap_or("history_absent")
        ),
    }
}
