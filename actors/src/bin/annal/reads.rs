//! The owner's reads: `list`, `show`, `query` and `search`, each one daemon `query` request
//! through the policy gate as the owner (`local_cli`): audited, and appending the contract's
//! `access` event when it returns anything unless the owner switched that off
//! (`annal owner-access off`).
//!
//! `list`, `query` and `search` take the owner's filters ([`FilterArgs`]): `--since`/`--until`
//! (a duration back from now, or a time), `--app`, `--capability`, `--outcome` and `--session`;
//! `search TEXT` matches TEXT in the capability and application identity. They are the
//! owner's: the agent tools keep exactly the contract's arguments. The filters' rules are the
//! engine's (`annal_engine::query::filter`); bad values are refused here, naming the flag and
//! the fix (exit 2), before anything is sent.

use std::process::ExitCode;

use annal_actors::daemon::{Request, ToolReply};
use annal_engine::policy::Refusal;
use annal_engine::query::{InvalidOwnerFilter, OwnerFilter, OwnerFilterParts};
use annal_schema::tools::{QUERY_LIMIT_MAX_EVENTS, QUERY_LIMIT_MIN_EVENTS};
use annal_schema::{Effect, ErrorCode};
use serde_json::Value;

use crate::CliError;
use crate::location::Location;
use crate::owner::{OutputArgs, duration, finish, one, print};

/// Events `list` and `search` show without a count.
const LIST_DEFAULT_EVENTS: u8 = 20;

/// What `--since` and `--until` accept, for their error messages.
const WHEN_FORMS: &str = "a duration back from now (30m, 2h, 7d) or a time \
     (2026-12-04T10:00:00Z, or in the local zone 2026-12-04 10:00 or 2026-12-04)";

/// The owner's filters, shared by `list`, `query` and `search`.
#[derive(Debug, Default, clap::Args)]
pub struct FilterArgs {
    /// Only events at or after WHEN: a duration back from now (30m, 2h, 7d) or a time
    /// (RFC 3339 such as 2026-12-04T10:00:00Z, or local: 2026-12-04 10:00, 2026-12-04).
    #[arg(long, value_name = "WHEN")]
    pub since: Option<String>,
    /// Only events at or before WHEN (as --since).
    #[arg(long, value_name = "WHEN")]
    pub until: Option<String>,
    /// Only events of this application: its bundle id or display name, ignoring case.
    #[arg(long, value_name = "APP")]
    pub app: Option<String>,
    /// Only events of this capability (for example ui.click), ignoring case.
    #[arg(long, value_name = "CAPABILITY")]
    pub capability: Option<String>,
    /// Only completed actions with this outcome.
    #[arg(long, value_name = "OUTCOME", value_parser = outcome_values())]
    pub outcome: Option<String>,
    /// Only this session's events: its opaque id or its raw label.
    #[arg(long, alias = "session-id", value_name = "SESSION")]
    pub session: Option<String>,
}

/// The `--outcome` values: the contract's `effect` values (clap lists them in its error).
fn outcome_values() -> clap::builder::PossibleValuesParser {
    clap::builder::PossibleValuesParser::new(Effect::ALL.iter().map(|effect| effect.as_str()))
}

/// Arguments of `annal list`.
#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// How many of the newest matching events (1..=200).
    #[arg(
        default_value_t = LIST_DEFAULT_EVENTS,
        value_parser = clap::value_parser!(u8).range(
            i64::from(QUERY_LIMIT_MIN_EVENTS)..=i64::from(QUERY_LIMIT_MAX_EVENTS)
        )
    )]
    pub count: u8,
    #[command(flatten)]
    pub filter: FilterArgs,
    #[command(flatten)]
    pub out: OutputArgs,
}

/// Arguments of `annal search`.
#[derive(Debug, clap::Args)]
pub struct SearchArgs {
    /// What to look for in the capability, the application's bundle id or display name
    /// (ignoring case; 1..=160 characters).
    pub text: String,
    /// How many of the newest matching events (1..=200).
    #[arg(
        long,
        default_value_t = LIST_DEFAULT_EVENTS,
        value_parser = clap::value_parser!(u8).range(
            i64::from(QUERY_LIMIT_MIN_EVENTS)..=i64::from(QUERY_LIMIT_MAX_EVENTS)
        )
    )]
    pub limit: u8,
    #[command(flatten)]
    pub filter: FilterArgs,
    #[command(flatten)]
    pub out: OutputArgs,
}

/// Arguments of `annal show`.
#[derive(Debug, clap::Args)]
pub struct ShowArgs {
    /// The event's sequence number (`data.sequence`).
    pub sequence: u64,
    #[command(flatten)]
    pub out: OutputArgs,
}

/// Arguments of `annal query`: the `history_query` fields, and the owner's filters.
#[derive(Debug, clap::Args)]
pub struct QueryArgs {
    /// Newest events to keep (1..=200, default 50).
    #[arg(
        long,
        value_parser = clap::value_parser!(u64).range(
            u64::from(QUERY_LIMIT_MIN_EVENTS)..=u64::from(QUERY_LIMIT_MAX_EVENTS)
        )
    )]
    pub limit: Option<u64>,
    /// Lowest sequence number (inclusive).
    #[arg(long)]
    pub since_sequence: Option<u64>,
    /// Highest sequence number (inclusive).
    #[arg(long)]
    pub until_sequence: Option<u64>,
    #[command(flatten)]
    pub filter: FilterArgs,
    #[command(flatten)]
    pub out: OutputArgs,
}

/// `--since`/`--until` as ms since the epoch: a duration back from `now_ms`, an RFC 3339
/// time, or a local date and time (the system's zone; a date alone is its midnight).
fn when(flag: &str, text: &str, now_ms: u64) -> Result<u64, CliError> {
    let bad = |why: &str| CliError::usage(format!("{flag}: {why}: give {WHEN_FORMS}"));
    let text = text.trim();
    if let Ok(Some(secs)) = duration(flag, Some(&text.to_owned())) {
        return Ok(now_ms.saturating_sub(secs.saturating_mul(1_000)));
    }
    let zone = jiff::tz::TimeZone::system();
    let at = if let Ok(at) = text.parse::<jiff::Timestamp>() {
        at
    } else if let Ok(civil) = text.parse::<jiff::civil::DateTime>() {
        civil
            .to_zoned(zone)
            .map_err(|_| bad("that local time does not exist in this zone"))?
            .timestamp()
    } else if let Ok(date) = text.parse::<jiff::civil::Date>() {
        date.to_zoned(zone)
            .map_err(|_| bad("that date does not exist in this zone"))?
            .timestamp()
    } else {
        return Err(bad("not a duration or a time"));
    };
    u64::try_from(at.as_millisecond()).map_err(|_| bad("the time is before 1970"))
}

/// The owner's filter of `args` (and `text` for `search`), checked with the engine's rules
/// (`OwnerFilter::new`); each refusal names its flag and the fix.
fn owner_filter(
    args: &FilterArgs,
    text: Option<&str>,
    now_ms: u64,
) -> Result<OwnerFilterParts, CliError> {
    let since_ms = args
        .since
        .as_deref()
        .map(|t| when("--since", t, now_ms))
        .transpose()?;
    let until_ms = args
        .until
        .as_deref()
        .map(|t| when("--until", t, now_ms))
        .transpose()?;
    let outcome = args
        .outcome
        .as_deref()
        .map(|name| {
            Effect::ALL
                .iter()
                .copied()
                .find(|e| e.as_str() == name)
                .ok_or_else(|| CliError::usage(outcome_error()))
        })
        .transpose()?;
    let parts = OwnerFilterParts {
        since_ms,
        until_ms,
        application: args.app.clone(),
        capability: args.capability.clone(),
        outcome,
        text: text.map(str::to_owned),
    };
    let max = annal_engine::query::OWNER_FILTER_TEXT_MAX_LEN_CHARS;
    let fix = format!("give 1..={max} characters without control characters");
    OwnerFilter::new(parts.clone()).map_err(|error| {
        CliError::usage(match error {
            InvalidOwnerFilter::Reversed => {
                "--since is after --until: give the earlier time to --since".to_owned()
            }
            InvalidOwnerFilter::Application => format!("--app: {fix}"),
            InvalidOwnerFilter::Capability => format!("--capability: {fix}"),
            _ => format!("TEXT: {fix}"),
        })
    })?;
    Ok(parts)
}

/// The refusal of an unknown `--outcome`, listing the allowed values.
fn outcome_error() -> String {
    let names: Vec<&str> = Effect::ALL.iter().map(|e| e.as_str()).collect();
    format!("--outcome: give one of {}", names.join(", "))
}

/// The daemon's `query` request for `arguments` narrowed by the filter flags (the daemon
/// checks the values again with the same rules).
pub(crate) fn request(
    mut arguments: serde_json::Map<String, Value>,
    args: &FilterArgs,
    text: Option<&str>,
) -> Result<Request, CliError> {
    let now_ms = annal_engine::clock::Clock::now_ms(&annal_engine::clock::SystemClock);
    let parts = owner_filter(args, text, now_ms)?;
    if let Some(session) = &args.session {
        arguments.insert("session_id".into(), Value::from(session.clone()));
    }
    Ok(Request::Query {
        arguments,
        since_ms: parts.since_ms,
        until_ms: parts.until_ms,
        app: parts.application,
        capability: parts.capability,
        outcome: parts.outcome,
        text: parts.text,
    })
}

/// An answer's events, or its refusal as an error (exit 1).
pub(crate) fn events(value: &Value) -> Result<Vec<Value>, CliError> {
    match ToolReply::from_value(value.clone()) {
        Some(ToolReply::Answer(answer)) => answer["events"]
            .as_array()
            .cloned()
            .ok_or_else(|| CliError::unavailable("the daemon's answer holds no events")),
        Some(ToolReply::Refusal(refusal)) => Err(refused(refusal)),
        None => Err(CliError::unavailable(
            "the daemon's answer is neither an answer nor a refusal",
        )),
    }
}

/// The error of a refused owner read. The owner's own arguments out of bounds are bad input
/// (exit 2), as the help states the bounds; any other refusal is a refused read (exit 1).
pub(crate) fn refused(refusal: Refusal) -> CliError {
    match refusal {
        Refusal::Contract(ErrorCode::InvalidHistoryQuery | ErrorCode::InvalidHistoryQueryRange) => {
            CliError::usage(format!(
                "{}: {} (see `annal query --help` for the bounds)",
                refusal.code(),
                refusal.message()
            ))
        }
        refusal => CliError::found(format!("the read was refused: {}", refusal.code())),
    }
}

/// One event as a line: sequence, time, kind and the fields that say what happened.
fn event_line(event: &Value) -> String {
    let data = &event["data"];
    let payload = &data["payload"];
    let mut line = format!(
        "{:>8}  {}  {}",
        data["sequence"].as_u64().unwrap_or_default(),
        event["time"]
            .as_str()
            .map_or_else(|| "-".to_owned(), crate::views::local_rfc3339),
        payload["kind"].as_str().unwrap_or("-")
    );
    for field in ["operation", "phase", "category"] {
        if let Some(value) = payload[field].as_str() {
            line.push_str(&format!(" {value}"));
        }
    }
    if let Some(capability) = data["capability"].as_str() {
        line.push_str(&format!("  {capability}"));
    }
    if let Some(app) = data["application"]["display_name"]
        .as_str()
        .or(data["application"]["bundle_id"].as_str())
    {
        line.push_str(&format!("  [{app}]"));
    }
    for field in ["effect", "route"] {
        if let Some(value) = payload[field].as_str() {
            line.push_str(&format!(" {field}={value}"));
        }
    }
    if let Some(count) = payload["returned_events"].as_u64() {
        line.push_str(&format!(" returned_events={count}"));
    }
    line.push('\n');
    line
}

fn events_text(events: &[Value]) -> String {
    if events.is_empty() {
        return "no events match.\n".to_owned();
    }
    events.iter().map(event_line).collect()
}

/// The `history_query` arguments that are set.
pub(crate) fn query_arguments(fields: &[(&str, Option<Value>)]) -> serde_json::Map<String, Value> {
    fields
        .iter()
        .filter_map(|(name, value)| Some(((*name).to_owned(), value.clone()?)))
        .collect()
}

fn read(
    location: &Location,
    no_daemon: bool,
    request: Result<Request, CliError>,
    out: &OutputArgs,
) -> ExitCode {
    finish(
        request
            .and_then(|request| one(location, no_daemon, request))
            .and_then(|value| {
                let events = events(&value)?;
                Ok(print(out, &value["answer"], || events_text(&events)))
            }),
    )
}

/// `list [N]` with the owner's filters.
pub fn list(location: &Location, no_daemon: bool, args: &ListArgs) -> ExitCode {
    let arguments = query_arguments(&[("limit", Some(args.count.into()))]);
    read(
        location,
        no_daemon,
        request(arguments, &args.filter, None),
        &args.out,
    )
}

/// `search TEXT` with the owner's filters.
pub fn search(location: &Location, no_daemon: bool, args: &SearchArgs) -> ExitCode {
    let arguments = query_arguments(&[("limit", Some(args.limit.into()))]);
    read(
        location,
        no_daemon,
        request(arguments, &args.filter, Some(&args.text)),
        &args.out,
    )
}

/// `query`.
pub fn query(location: &Location, no_daemon: bool, args: &QueryArgs) -> ExitCode {
    let arguments = query_arguments(&[
        ("limit", args.limit.map(Value::from)),
        ("since_sequence", args.since_sequence.map(Value::from)),
        ("until_sequence", args.until_sequence.map(Value::from)),
    ]);
    read(
        location,
        no_daemon,
        request(arguments, &args.filter, None),
        &args.out,
    )
}

/// `show SEQ`.
pub fn show(location: &Location, no_daemon: bool, args: &ShowArgs) -> ExitCode {
    let arguments = query_arguments(&[
        ("limit", Some(1.into())),
        ("since_sequence", Some(args.sequence.into())),
        ("until_sequence", Some(args.sequence.into())),
    ]);
    finish(
        one(location, no_daemon, Request::query(arguments)).and_then(|value| {
            let event = events(&value)?.into_iter().next().ok_or_else(|| {
                CliError::found(format!(
                    "no event has sequence {} (retention may have removed it)",
                    args.sequence
                ))
            })?;
            Ok(print(&args.out, &event, || {
                serde_json::to_string_pretty(&event).unwrap_or_default() + "\n"
            }))
        }),
    )
}
