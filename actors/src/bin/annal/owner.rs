//! The owner's commands, each a thin layer over one daemon request (or, with `--no-daemon`,
//! the same request answered in this process): `enable`, `disable`, `pause`, `resume`, `flush`,
//! `status`, `retention`, `quota`, `grant`, `revoke`, `agents`, `owner-access`, `stop`,
//! `socket`, `delete`. The reads (`list`, `show`, `query`, `search`) are in `reads.rs`.
//!
//! `--json` prints the daemon's result object unchanged; the text form says what happened.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use annal_actors::daemon::Request;
use annal_engine::keys::{KEYUTILS_DURABILITY_WARNING, destroy_store_keys};
use annal_engine::policy::manifest::parse_duration_secs;
use annal_engine::storage::Access;
use annal_engine::store::{delete_store_files, open_store, plan_store_delete};
use serde_json::{Value, json};

use crate::link::Link;
use crate::location::Location;
use crate::{CliError, report_error};

/// Longest `stop` and `delete` wait for a daemon to exit after asking it to, in milliseconds
/// (its bounded drain plus margin).
const DAEMON_STOP_WAIT_MS: u64 = annal_actors::config::SHUTDOWN_DEADLINE_MS + 2_000;

/// `--json` for a command whose output a program may read.
#[derive(Debug, clap::Args)]
pub struct OutputArgs {
    /// Print the result as one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `annal retention`.
#[derive(Debug, clap::Args)]
pub struct RetentionArgs {
    /// Days of history queries see (1..=3650).
    #[arg(value_parser = clap::value_parser!(u32).range(
        i64::from(annal_engine::journal::RETENTION_MIN_DAYS)
            ..=i64::from(annal_engine::journal::RETENTION_MAX_DAYS)
    ))]
    pub days: u32,
    #[command(flatten)]
    pub out: OutputArgs,
}

/// Arguments of `annal quota`.
#[derive(Debug, clap::Args)]
pub struct QuotaArgs {
    /// The quota: bytes, or a number with a unit, like 100MiB, 1.5GiB or 500MB (1MiB..=1TiB).
    #[arg(value_parser = parse_quota_bytes)]
    pub size: u64,
    /// At the quota, evict the oldest sealed chunks instead of stopping capture.
    #[arg(long)]
    pub evict_oldest: bool,
    #[command(flatten)]
    pub out: OutputArgs,
}

/// `123`, `100MiB`, `1.5GiB`, `500 MB` as bytes (the `bytesize` crate reads them: binary
/// units with `iB`, decimal ones without), within the quota's bounds.
fn parse_quota_bytes(text: &str) -> Result<u64, String> {
    use annal_engine::journal::{QUOTA_MAX_BYTES, QUOTA_MIN_BYTES};
    let bytes = text
        .trim()
        .parse::<bytesize::ByteSize>()
        .map(|size| size.as_u64())
        .map_err(|_| {
            "not a size: bytes, or a number with a unit (KiB, MiB, GiB, TiB, or KB, MB, GB, TB)"
                .to_owned()
        })?;
    if (QUOTA_MIN_BYTES..=QUOTA_MAX_BYTES).contains(&bytes) {
        Ok(bytes)
    } else {
        Err(format!(
            "the quota must be 1MiB..=1TiB ({QUOTA_MIN_BYTES}..={QUOTA_MAX_BYTES} bytes)"
        ))
    }
}

/// `bytes` for a person: `0 B`, `12.3 KiB`, `100.0 MiB` (exact figures are in `--json`).
pub(crate) fn human_bytes(bytes: u64) -> String {
    bytesize::ByteSize::b(bytes).display().iec().to_string()
}

/// Arguments of `annal grant`.
#[derive(Debug, clap::Args)]
pub struct GrantArgs {
    /// The agent's id (what its `annal mcp --actor` names).
    pub actor: String,
    /// `status` (history_status) or `query` (history_query).
    pub operation: String,
    /// Absolute lifetime, for example 30m, 1h, 7d (default 1h; at most 30d).
    #[arg(long, value_name = "DURATION")]
    pub expires_after: Option<String>,
    /// Idle timeout, for example 10m (default 10m).
    #[arg(long, value_name = "DURATION")]
    pub idle_timeout: Option<String>,
    #[command(flatten)]
    pub out: OutputArgs,
}

/// Arguments of `annal revoke`.
#[derive(Debug, clap::Args)]
pub struct RevokeArgs {
    /// The agent's id.
    pub actor: String,
    #[command(flatten)]
    pub out: OutputArgs,
}

/// The agents switch.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum AgentsSwitch {
    /// Every agent's next call is refused (`agents_disabled`) and none is listed tools.
    Disable,
    /// Agents are decided by their grants again.
    Enable,
}

/// Arguments of `annal agents`.
#[derive(Debug, clap::Args)]
pub struct AgentsArgs {
    /// disable or enable.
    pub switch: AgentsSwitch,
    #[command(flatten)]
    pub out: OutputArgs,
}

/// The owner's access-event setting.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum OwnerAccessSwitch {
    /// The owner's reads append the contract's `access` event (the default).
    On,
    /// They append none (each is still in the audit journal: `annal audit`).
    Off,
}

/// Arguments of `annal owner-access`.
#[derive(Debug, clap::Args)]
pub struct OwnerAccessArgs {
    /// on or off.
    pub switch: OwnerAccessSwitch,
    #[command(flatten)]
    pub out: OutputArgs,
}

/// Arguments of `annal delete`.
#[derive(Debug, clap::Args)]
pub struct DeleteArgs {
    /// Do not ask for confirmation.
    #[arg(long)]
    pub yes: bool,
    #[command(flatten)]
    pub out: OutputArgs,
}

/// The control commands.
#[derive(Debug, Clone, Copy)]
pub enum Control {
    /// `enable`.
    Enable,
    /// `disable`.
    Disable,
    /// `pause`.
    Pause,
    /// `resume`.
    Resume,
    /// `flush`.
    Flush,
    /// `status`.
    Status,
}

/// Sends one request to the store and returns its result.
pub(crate) fn one(
    location: &Location,
    no_daemon: bool,
    request: Request,
) -> Result<Value, CliError> {
    let runtime = crate::runtime()?;
    runtime.block_on(async {
        let mut link = Link::open(location, no_daemon).await?;
        let result = link.request(request).await;
        link.close().await;
        result
    })
}

/// What a policy change before the first `enable` says (the gate's journal does not exist yet).
const NOT_ENABLED: &str = "history is not enabled: run `annal enable`";

/// Sends one policy change that widens what agents may do (`grant`, `agents enable`). One that
/// fails because history was never enabled (the policy journal cannot be written yet, and a
/// widening that is not durable is withdrawn) says so, as bad usage. (A narrowing, `revoke` or
/// `agents disable`, is kept by the engine even then, so it is not reported this way.)
fn widen(location: &Location, no_daemon: bool, request: Request) -> Result<Value, CliError> {
    let runtime = crate::runtime()?;
    runtime.block_on(async {
        let mut link = Link::open(location, no_daemon).await?;
        let mut result = link.request(request).await;
        if result
            .as_ref()
            .is_err_and(|e| e.exit == crate::EXIT_UNAVAILABLE)
            && let Ok(status) = link.request(Request::Status {}).await
            && status["status"]["enabled"] == false
        {
            result = Err(CliError::usage(NOT_ENABLED));
        }
        link.close().await;
        result
    })
}

/// Prints `value` (with `--json`) or `text`, and succeeds.
pub fn print(out: &OutputArgs, value: &Value, text: impl FnOnce() -> String) -> ExitCode {
    let text = if out.json {
        format!("{value}\n")
    } else {
        text()
    };
    match crate::write_out(&text) {
        Ok(()) => ExitCode::SUCCESS,
        Err(code) => code,
    }
}

pub(crate) fn finish(result: Result<ExitCode, CliError>) -> ExitCode {
    result.unwrap_or_else(|error| report_error(&error))
}

/// What `enable` says first.
const ENABLED_HEADLINE: &str = "history enabled.";

/// A status result as text: what happened, what is recorded, where the key is.
fn status_text(location: &Location, headline: &str, value: &Value) -> String {
    let status = &value["status"];
    let flag = |name: &str| status[name].as_bool().unwrap_or(false);
    let state = if !flag("admitted") {
        "not admitted: this runtime does not allow history"
    } else if !flag("enabled") {
        "disabled: nothing is being recorded"
    } else if flag("paused") {
        "enabled, paused: nothing is being recorded until `annal resume`"
    } else {
        "enabled: agent actions are being recorded"
    };
    let mut text = String::new();
    if !headline.is_empty() {
        text.push_str(headline);
        text.push('\n');
    }
    text.push_str(&format!("history: {state}\n"));
    text.push_str(&format!("store: {}\n", location.dir.display()));
    let key_store = value["key_store"].as_str().unwrap_or("unknown");
    text.push_str(&format!("key: in the {key_store} credential store\n"));
    // The kernel keyring's caveat is said when the key is made (`enable`) and by `doctor`, not
    // on every status.
    if headline == ENABLED_HEADLINE
        && key_store == annal_engine::keys::KeyStoreKind::Keyutils.as_str()
    {
        text.push_str(&format!("note: {KEYUTILS_DURABILITY_WARNING}\n"));
    }
    let bytes = |v: &Value| human_bytes(v.as_u64().unwrap_or(0));
    let counted = match value["usage"]["quota_counted_bytes"].as_u64() {
        Some(counted) => format!(" (with annal's journal: {})", human_bytes(counted)),
        None => String::new(),
    };
    text.push_str(&format!(
        "used: {} of {}{counted}; retention {} days; dropped events: {}\n",
        bytes(&status["bytes_used"]),
        bytes(&status["quota_bytes"]),
        status["retention_days"],
        status["dropped_events"]
    ));
    if value["owner_access_events"] == false {
        text.push_str(
            "your reads: audited, without the contract's access event (`annal owner-access on`)\n",
        );
    }
    let health = status["health"].as_str().unwrap_or("unknown");
    text.push_str(&format!("health: {health}{}\n", next_step(health)));
    text
}

/// The next step that fits a health category, for a person reading `status`.
fn next_step(health: &str) -> &'static str {
    use annal_schema::HealthCategory as H;
    let Some(category) = H::ALL.into_iter().find(|h| h.as_str() == health) else {
        return "";
    };
    match category {
        H::Ready => "",
        H::Disabled => " (run `annal enable` to start recording)",
        H::Paused => " (run `annal resume` to record again)",
        H::NotAdmitted => " (the runtime that embeds annal does not admit history)",
        H::KeyUnavailable | H::KeyLocked | H::KeyCorrupt | H::KeyDestroyFailed => {
            " (`annal doctor` checks the credential stores)"
        }
        H::QuotaReached => {
            " (raise it with `annal quota SIZE`, or `annal quota SIZE --evict-oldest`)"
        }
        H::EventsDropped => " (capture dropped events under load: each is counted above)",
        H::StorageUnavailable | H::StorageCorrupt => " (`annal verify` checks the files)",
        _ => " (`annal doctor` checks the credential stores; `annal verify` the files)",
    }
}

/// `enable`, `disable`, `pause`, `resume`, `flush`, `status`.
pub fn control(
    location: &Location,
    no_daemon: bool,
    control: Control,
    out: &OutputArgs,
) -> ExitCode {
    let (request, headline) = match control {
        Control::Enable => (Request::Enable {}, ENABLED_HEADLINE),
        Control::Disable => (
            Request::Disable {},
            "history disabled; what was recorded stays.",
        ),
        Control::Pause => (Request::Pause {}, "capture paused."),
        Control::Resume => (Request::Resume {}, "capture resumed."),
        Control::Flush => (Request::Flush {}, "everything captured so far is durable."),
        Control::Status => (Request::Status {}, ""),
    };
    finish(
        one(location, no_daemon, request)
            .map(|value| print(out, &value, || status_text(location, headline, &value))),
    )
}

/// A duration flag in whole seconds, as people write it (the `humantime` crate reads it: `30m`,
/// `90min`, `2h 30m`, `1day`, `2weeks`); the manifest's own form (`1h`, `10m`, `7d`) is a part
/// of that. Fractions of a second are refused, as the policy counts whole seconds.
pub(crate) fn duration(flag: &str, text: Option<&String>) -> Result<Option<u64>, CliError> {
    text.map(|text| {
        humantime::parse_duration(text.trim())
            .ok()
            .filter(|d| d.subsec_nanos() == 0)
            .map(|d| d.as_secs())
            .or_else(|| parse_duration_secs(text))
            .ok_or_else(|| {
                CliError::usage(format!(
                    "{flag}: not a duration in whole seconds (for example 30m, 90min, 2h 30m, 7d)"
                ))
            })
    })
    .transpose()
}

/// `retention DAYS`.
pub fn retention(location: &Location, no_daemon: bool, args: &RetentionArgs) -> ExitCode {
    let request = Request::SetRetention { days: args.days };
    let headline = format!(
        "retention set to {} days: older events leave every answer now.",
        args.days
    );
    finish(one(location, no_daemon, request).map(|value| {
        print(&args.out, &value, || {
            status_text(location, &headline, &value)
        })
    }))
}

/// `quota SIZE [--evict-oldest]`.
pub fn quota(location: &Location, no_daemon: bool, args: &QuotaArgs) -> ExitCode {
    use annal_engine::journal::OnQuota;
    let on_quota = if args.evict_oldest {
        OnQuota::EvictOldest
    } else {
        OnQuota::StopCapture
    };
    let request = Request::SetQuota {
        bytes: args.size,
        on_quota,
    };
    let at_quota = if args.evict_oldest {
        "the oldest sealed chunks are evicted"
    } else {
        "capture stops"
    };
    let headline = format!(
        "quota set to {}; at it, {at_quota}.",
        human_bytes(args.size)
    );
    finish(one(location, no_daemon, request).map(|value| {
        print(&args.out, &value, || {
            status_text(location, &headline, &value)
        })
    }))
}

/// `grant ACTOR OPERATION`.
pub fn grant(location: &Location, no_daemon: bool, args: &GrantArgs) -> ExitCode {
    let request = (|| {
        Ok::<_, CliError>(Request::Grant {
            actor: args.actor.clone(),
            operation: args.operation.clone(),
            expires_after_secs: duration("--expires-after", args.expires_after.as_ref())?,
            idle_timeout_secs: duration("--idle-timeout", args.idle_timeout.as_ref())?,
        })
    })();
    finish(
        request
            .and_then(|request| widen(location, no_daemon, request))
            .map(|value| {
                print(&args.out, &value, || {
                    format!(
                        "granted {} to {} until {} (it lapses if unused until {}); its next call \
                         may use it.\n",
                        args.operation,
                        args.actor,
                        crate::views::time(value["expires_at_ms"].as_u64()),
                        crate::views::time(value["idle_deadline_ms"].as_u64()),
                    )
                })
            }),
    )
}

/// `revoke ACTOR`.
pub fn revoke(location: &Location, no_daemon: bool, args: &RevokeArgs) -> ExitCode {
    let request = Request::Revoke {
        actor: args.actor.clone(),
    };
    finish(one(location, no_daemon, request).map(|value| {
        print(&args.out, &value, || {
            format!(
                "revoked every grant of {}; its next call is refused.\n",
                args.actor
            )
        })
    }))
}

/// `agents disable|enable`.
pub fn agents(location: &Location, no_daemon: bool, args: &AgentsArgs) -> ExitCode {
    let enabled = matches!(args.switch, AgentsSwitch::Enable);
    switch(
        location,
        no_daemon,
        Request::SwitchAgents { enabled },
        enabled,
        &args.out,
        [
            "agents disabled: every agent's next call is refused.\n",
            "agents enabled: each is decided by its grants again.\n",
        ],
    )
}

/// A switch the owner turns on or off (`enabled`): turning it on records or allows more, so
/// one that cannot be made durable is withdrawn (`widen`); `said` is what the terminal is told,
/// off then on.
fn switch(
    location: &Location,
    no_daemon: bool,
    request: Request,
    enabled: bool,
    out: &OutputArgs,
    said: [&str; 2],
) -> ExitCode {
    let sent = if enabled {
        widen(location, no_daemon, request)
    } else {
        one(location, no_daemon, request)
    };
    finish(sent.map(|value| print(out, &value, || said[usize::from(enabled)].to_owned())))
}

/// `owner-access on|off`: whether the owner's own reads append the contract's `access` event.
/// Switching it on records more, so (as `agents enable`) one that cannot be made durable is
/// withdrawn; before the first `enable` it says so.
pub fn owner_access(location: &Location, no_daemon: bool, args: &OwnerAccessArgs) -> ExitCode {
    let enabled = matches!(args.switch, OwnerAccessSwitch::On);
    switch(
        location,
        no_daemon,
        Request::SetOwnerAccess { enabled },
        enabled,
        &args.out,
        [
            "your reads append no access event to the history; each is still audited \
             (`annal audit`). Agents' reads always append theirs.\n",
            "your reads append the contract's access event again.\n",
        ],
    )
}

/// Asks a running daemon to stop and waits until its socket is gone. `Ok(false)`: none ran.
pub fn stop_daemon(location: &Location) -> Result<bool, CliError> {
    let runtime = crate::runtime()?;
    runtime.block_on(async {
        let Some(mut client) = Link::running(location).await? else {
            return Ok(false);
        };
        client
            .request(&Request::Stop {})
            .await
            .map_err(|e| CliError::unavailable(format!("the daemon did not stop: {e}")))?;
        let deadline = Instant::now() + Duration::from_millis(DAEMON_STOP_WAIT_MS);
        while Link::running(location).await?.is_some() {
            if Instant::now() >= deadline {
                return Err(CliError::unavailable("the daemon did not exit in time"));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // The socket is gone before the engine has drained; the writer lock tells when it has,
        // and the daemon's own lock, let go last, when the process is done with the store (a
        // command right after `stop` would otherwise start a daemon that finds it still held).
        let layout = location.layout();
        let socket = location.socket()?;
        while (layout.history_root().exists() && open_store(&layout, Access::Write).is_err())
            || crate::link::daemon_lock_held(socket)
        {
            if Instant::now() >= deadline {
                return Err(CliError::unavailable(
                    "the daemon did not release the store in time",
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(true)
    })
}

/// `stop`.
pub fn stop(location: &Location, out: &OutputArgs) -> ExitCode {
    finish(stop_daemon(location).map(|stopped| {
        let value = json!({"stopped": stopped});
        print(out, &value, || {
            if stopped {
                "the daemon stopped; everything captured is durable.\n".to_owned()
            } else {
                "no daemon serves this store.\n".to_owned()
            }
        })
    }))
}

/// `socket`: the daemon's socket path, as every front-end resolves it (nothing is started or
/// connected).
pub fn socket(location: &Location, out: &OutputArgs) -> ExitCode {
    finish(location.socket().map(|socket| {
        let value = json!({"socket": socket.display().to_string()});
        print(out, &value, || format!("{}\n", socket.display()))
    }))
}

/// Asks the person to type the namespace, when there is a terminal to ask on.
fn confirmed(location: &Location) -> Result<(), CliError> {
    if !std::io::stdin().is_terminal() {
        return Err(CliError::usage(
            "delete destroys the key and every event; pass --yes to confirm",
        ));
    }
    eprintln!(
        "This destroys the key of namespace {} and deletes {}. History there becomes \
         unrecoverable.",
        location.namespace.as_str(),
        location.dir.display()
    );
    let answer: String = dialoguer::Input::new()
        .with_prompt("Type the namespace to confirm")
        .allow_empty(true)
        .interact_text()
        .map_err(|e| CliError::usage(format!("no confirmation: {e}")))?;
    if answer.trim() == location.namespace.as_str() {
        Ok(())
    } else {
        Err(CliError::usage("not confirmed; nothing was deleted"))
    }
}

/// `delete`: stops the daemon, destroys the namespace's keys (verified absent), then removes
/// the store's files. The key goes first: a crash in between leaves only unreadable files.
pub fn delete(location: &Location, args: &DeleteArgs) -> ExitCode {
    let result = (|| {
        if !args.yes {
            confirmed(location)?;
        }
        stop_daemon(location)?;
        let provider = location.key_provider()?;
        let layout = location.layout();
        let plan = if layout.history_root().exists() {
            let storage = open_store(&layout, Access::Write)
                .map_err(|e| CliError::unavailable(format!("cannot open the store: {e}")))?;
            Some(
                plan_store_delete(storage, &location.namespace)
                    .map_err(|e| CliError::found(format!("cannot plan the delete: {e}")))?,
            )
        } else {
            None
        };
        // Only this store's keys and checkpoint: another store of the namespace keeps its own.
        let scope = plan.as_ref().map(|p| p.key_scope()).unwrap_or_default();
        let proof = destroy_store_keys(provider.as_ref(), &location.namespace, &scope)
            .map_err(|e| CliError::unavailable(format!("the key could not be destroyed: {e}")))?;
        let destroyed = proof.destroyed().len();
        if let Some(plan) = plan {
            delete_store_files(plan, &proof)
                .map_err(|e| CliError::found(format!("the key is gone, but: {e}")))?;
        }
        let _ = std::fs::remove_dir_all(&location.dir);
        Ok(json!({"deleted": true, "keys_destroyed": destroyed}))
    })();
    finish(result.map(|value| {
        print(&args.out, &value, || {
            format!(
                "deleted: {} key(s) destroyed and verified absent; {} removed.\n",
                value["keys_destroyed"],
                location.dir.display()
            )
        })
    }))
}
