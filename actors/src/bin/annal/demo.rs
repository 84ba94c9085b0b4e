//! `annal demo`: the whole pipeline on a temporary store, on a fresh machine with no set-up.
//!
//! A simulated agent runtime captures a few thousand actions across sessions and applications
//! through the real hook; an approved bounded manifest lets a demo agent call `history_status`
//! and `history_query` through the real gate and audit; a call without a grant is denied; a
//! revoked actor is refused; `verify` passes; `delete` destroys the key and proves it gone. The
//! key lives in the kernel keyring (falling back, and saying so, to an in-memory store where
//! the kernel keyring cannot be used). Ends with a short report; exit status 0 only when every
//! check held.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use annal_actors::figures::quantile;
use annal_actors::gate::{PolicyChange, ToolAnswer};
use annal_actors::{Engine, EngineConfig};
use annal_engine::entropy::{Entropy, OsEntropy};
use annal_engine::journal::{Journal, JournalEvent};
use annal_engine::keys::{
    CredentialNaming, InMemoryProvider, KeyProvider, KeyStoreChoice, Namespace, open_provider,
};
use annal_engine::policy::manifest::{CONTRACT_EXAMPLE_MANIFEST, Manifest};
use annal_engine::policy::{ActorId, AuditOutcome, PolicyEvent, Principal, Refusal, Verdict};
use annal_engine::seal::{
    CheckpointReading, CheckpointStore, CredentialCheckpoints, SealKey, verify,
};
use annal_engine::storage::{Access, Storage, StoreLayout};
use annal_engine::store::{StoreReader, delete_store_files, open_store, plan_store_delete};
use annal_schema::{ActionOutcome, Application, BundleId, Capability, DisplayName, Effect, Route};
use serde_json::json;

/// Most captured events allowed to wait in the queue before a demo runtime thread yields (the
/// hook never waits; the simulated runtime paces itself so the demo shows no drops).
const DEMO_QUEUE_HIGH_WATER_EVENTS: usize = 256;

/// Simulated agent runtimes (threads) capturing at once.
const DEMO_RUNTIME_THREADS: usize = 4;

/// Sessions the simulated runtimes spread their actions over.
const DEMO_SESSIONS: usize = 8;

/// `history_query` calls timed for the latency figures.
const DEMO_TIMED_QUERIES: usize = 200;

/// Fewest actions `--actions` takes: enough that the checks (a page of the newest 50, each of
/// the [`DEMO_SESSIONS`] sessions holding actions) can hold.
const DEMO_ACTIONS_MIN: u64 = 100;

/// Most actions `--actions` takes (a demo, not a load test: `bench/` has those).
const DEMO_ACTIONS_MAX: u64 = 1_000_000;

/// `annal demo` arguments.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// How many actions the simulated runtime captures (100..=1000000).
    #[arg(
        long,
        default_value_t = 3_000,
        value_parser = clap::value_parser!(u64).range(DEMO_ACTIONS_MIN..=DEMO_ACTIONS_MAX)
    )]
    pub actions: u64,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Also write `annal report`'s HTML page of the demo's store (read through the gate as
    /// the owner, after the agents' calls and the revocation) to FILE.html, before the store
    /// is deleted.
    #[arg(long, value_name = "FILE.html")]
    pub report: Option<PathBuf>,
}

/// One check of the demo and whether it held.
struct Check {
    name: &'static str,
    held: bool,
}

/// What the demo measured and saw.
#[derive(Default)]
struct Figures {
    key_store: String,
    events_captured: u64,
    dropped_events: u64,
    capture_p50_ns: u64,
    capture_p99_ns: u64,
    durable_events_per_sec: u64,
    query_p50_us: u64,
    query_p99_us: u64,
    audit_allowed: u64,
    audit_denied: BTreeCount,
    audit_refused: BTreeCount,
    audit_completed: u64,
    access_events: u64,
}

type BTreeCount = std::collections::BTreeMap<String, u64>;

fn outcome() -> ActionOutcome {
    ActionOutcome::new(Effect::Confirmed, Route::Accessibility)
}

/// The demo's fixed application identities and capabilities (closed, checked values).
fn catalog() -> Result<(Vec<Application>, Vec<Capability>), String> {
    let apps = [
        ("org.mozilla.firefox", "Firefox"),
        ("org.gnome.TextEditor", "Text Editor"),
        ("org.gnome.Terminal", "Terminal"),
        ("org.libreoffice.LibreOffice", "LibreOffice"),
    ];
    let mut applications = Vec::new();
    for (bundle, name) in apps {
        let bundle = BundleId::new(bundle).map_err(|e| e.to_string())?;
        let name = DisplayName::new(name).map_err(|e| e.to_string())?;
        applications.extend(Application::new(Some(bundle), Some(name)));
    }
    let mut capabilities = Vec::new();
    for name in [
        "input.pointer.click",
        "input.keyboard.type",
        "window.focus",
        "screen.capture",
    ] {
        capabilities.push(Capability::new(name).map_err(|e| e.to_string())?);
    }
    Ok((applications, capabilities))
}

/// A fresh directory for the demo store.
fn demo_dir() -> Result<(PathBuf, String), String> {
    let mut random = [0u8; 6];
    OsEntropy.fill(&mut random).map_err(|e| e.to_string())?;
    let tag = annal_schema::ids::encode_lower_hex(&random);
    let dir = std::env::temp_dir().join(format!("annal-demo-{tag}"));
    // 0700 at creation, like every directory annal makes (the temp directory itself exists).
    std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o700)
        .create(&dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok((dir, tag))
}

/// The kernel keyring, else an in-memory store (and which one it is).
fn key_store() -> Result<(Arc<dyn KeyProvider>, String), String> {
    match open_provider(
        KeyStoreChoice::Keyutils,
        CredentialNaming::Annal,
        Box::new(OsEntropy),
    ) {
        Ok(provider) => Ok((
            Arc::from(provider),
            "kernel keyring (keyutils; its keys do not survive a reboot)".to_owned(),
        )),
        Err(error) => {
            let provider = InMemoryProvider::new(Box::new(OsEntropy)).map_err(|e| e.to_string())?;
            Ok((
                Arc::new(provider),
                format!("in-memory (the kernel keyring is not usable here: {error})"),
            ))
        }
    }
}

fn progress(len: u64, message: &'static str) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(len);
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("{msg:>10} [{bar:40}] {pos}/{len} ({elapsed})")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(message);
    bar
}

/// Captures `actions` actions from [`DEMO_RUNTIME_THREADS`] threads; returns each hook call's
/// duration in nanoseconds.
fn capture(engine: &Engine, actions: usize) -> Result<Vec<u64>, String> {
    let (applications, capabilities) = catalog()?;
    let bar = progress(actions as u64, "capture");
    let per_thread = actions.div_ceil(DEMO_RUNTIME_THREADS);
    let mut timings = Vec::with_capacity(actions * 2);
    std::thread::scope(|scope| {
        let mut workers = Vec::new();
        for thread in 0..DEMO_RUNTIME_THREADS {
            let (applications, capabilities, bar) = (&applications, &capabilities, &bar);
            let count = per_thread.min(actions.saturating_sub(thread * per_thread));
            workers.push(scope.spawn(move || {
                let hook = engine.capture();
                let mut timings = Vec::with_capacity(count * 2);
                let sessions: Vec<_> = (0..DEMO_SESSIONS / DEMO_RUNTIME_THREADS)
                    .map(|s| hook.session_started(&format!("demo run {thread}.{s}")))
                    .collect();
                for i in 0..count {
                    while engine.queued_events() > DEMO_QUEUE_HIGH_WATER_EVENTS {
                        std::thread::sleep(Duration::from_micros(200));
                    }
                    let capability = capabilities[i % capabilities.len()].clone();
                    let application = applications[(i / 3) % applications.len()].clone();
                    let session = &sessions[i % sessions.len()];
                    let started = Instant::now();
                    let token = hook.action_started(capability, Some(application), Some(session));
                    timings.push(started.elapsed().as_nanos() as u64);
                    let completed = Instant::now();
                    hook.action_completed(token, outcome());
                    timings.push(completed.elapsed().as_nanos() as u64);
                    bar.inc(1);
                }
                for session in sessions {
                    hook.session_ended(session);
                }
                timings
            }));
        }
        for worker in workers {
            if let Ok(part) = worker.join() {
                timings.extend(part);
            }
        }
    });
    bar.finish_and_clear();
    Ok(timings)
}

/// Writes `annal report`'s page of the demo's store to `out`, through the engine's owner path
/// (the same requests `annal report --no-daemon` sends).
fn write_report(engine: &Arc<Engine>, out: &std::path::Path) -> Result<String, String> {
    let runtime = crate::runtime().map_err(|e| e.message)?;
    runtime
        .block_on(async {
            let mut link = crate::link::Link::in_process(Arc::clone(engine), "demo".to_owned());
            let wrote = crate::report::write_over(&mut link, out).await;
            link.close().await;
            wrote
        })
        .map_err(|e| e.message)
}

/// Runs the demo.
pub fn run(args: &DemoArgs) -> ExitCode {
    match demo(args) {
        Ok((checks, figures)) => report(args, &checks, &figures),
        Err(message) => {
            eprintln!("annal demo: {message}");
            ExitCode::from(1)
        }
    }
}

fn demo(args: &DemoArgs) -> Result<(Vec<Check>, Figures), String> {
    let mut checks = Vec::new();
    let mut figures = Figures::default();
    let (dir, tag) = demo_dir()?;
    let namespace = Namespace::new(&format!("demo-{tag}")).map_err(|e| e.to_string())?;
    let (provider, store_name) = key_store()?;
    figures.key_store = store_name;
    let layout = StoreLayout::in_namespace_dir(&dir.join("history"));
    let config = EngineConfig::new(layout.clone(), namespace.clone());
    let engine =
        Arc::new(Engine::start(config, Arc::clone(&provider)).map_err(|e| format!("start: {e}"))?);
    engine.enable().map_err(|e| format!("enable: {e}"))?;

    // 1. The simulated runtime captures through the real hook.
    let started = Instant::now();
    let mut timings = capture(&engine, usize::try_from(args.actions).unwrap_or(usize::MAX))?;
    let status = engine.flush().map_err(|e| format!("flush: {e}"))?;
    let elapsed = started.elapsed();
    timings.sort_unstable();
    figures.capture_p50_ns = quantile(&timings, 0.50);
    figures.capture_p99_ns = quantile(&timings, 0.99);
    figures.dropped_events = status.dropped_events;
    let sessions_events = 2 * DEMO_SESSIONS as u64;
    figures.events_captured = 2 * args.actions + sessions_events;
    figures.durable_events_per_sec =
        (figures.events_captured as f64 / elapsed.as_secs_f64().max(1e-9)) as u64;
    checks.push(Check {
        name: "every captured event is durable (none dropped)",
        held: status.dropped_events == 0,
    });

    // 2. A demo agent under an approved bounded manifest.
    let agent = ActorId::new("demo-agent").map_err(|e| e.to_string())?;
    let principal = Principal::Agent(agent.clone());
    let stranger = Principal::Agent(ActorId::new("stranger").map_err(|e| e.to_string())?);
    checks.push(Check {
        name: "before approval, no tool is listed to the agent",
        held: engine.tools_for(&principal).is_empty(),
    });
    let manifest = Manifest::parse(CONTRACT_EXAMPLE_MANIFEST).map_err(|e| e.to_string())?;
    engine
        .change_policy(PolicyChange::ApproveManifest {
            actor: agent.clone(),
            manifest,
            reapprove: false,
        })
        .map_err(|e| format!("approve: {e}"))?;
    checks.push(Check {
        name: "the approved manifest lists history_status and history_query",
        held: engine.tools_for(&principal).len() == 2,
    });
    let status = engine.call_tool(&principal, "history_status", &json!({}));
    checks.push(Check {
        name: "history_status answers the agent",
        held: matches!(status, Ok(ToolAnswer::Status(ref s)) if s.enabled),
    });
    let bar = progress(DEMO_TIMED_QUERIES as u64, "query");
    let mut latencies = Vec::with_capacity(DEMO_TIMED_QUERIES);
    let mut newest_ok = true;
    for _ in 0..DEMO_TIMED_QUERIES {
        let started = Instant::now();
        let answer = engine.call_tool(&principal, "history_query", &json!({"limit": 50}));
        latencies.push(started.elapsed().as_micros() as u64);
        newest_ok &= matches!(answer, Ok(ToolAnswer::Query { ref response, .. }) if response.events.len() == 50);
        bar.inc(1);
    }
    bar.finish_and_clear();
    latencies.sort_unstable();
    figures.query_p50_us = quantile(&latencies, 0.50);
    figures.query_p99_us = quantile(&latencies, 0.99);
    checks.push(Check {
        name: "history_query returns the newest 50 events",
        held: newest_ok,
    });
    let session = engine.call_tool(
        &principal,
        "history_query",
        &json!({"session_id": "demo run 0.0", "limit": 10}),
    );
    checks.push(Check {
        name: "a raw session label filters through the keyed session id",
        held: matches!(session, Ok(ToolAnswer::Query { ref response, .. })
            if response.events.len() == 10
                && response.events.iter().all(|e| e.data.session_id == response.events[0].data.session_id)),
    });
    let first = engine.call_tool(&principal, "history_query", &json!({"limit": 20}));
    let cursor = match &first {
        Ok(ToolAnswer::Query { cursor, .. }) => cursor.clone(),
        _ => None,
    };
    let paged = cursor.as_ref().map(|cursor| {
        let next = engine.call_tool(
            &principal,
            "history_query",
            &json!({"limit": 20, "cursor": cursor}),
        );
        let replay = engine.call_tool(
            &principal,
            "history_query",
            &json!({"limit": 20, "cursor": cursor}),
        );
        (next.is_ok(), replay.err().map(Refusal::code))
    });
    checks.push(Check {
        name: "paging: the cursor reads the next page once; a replay is refused",
        held: paged == Some((true, Some("cursor_replayed"))),
    });

    // 3. Denials.
    let denied = engine.call_tool(&stranger, "history_query", &json!({}));
    checks.push(Check {
        name: "an agent without a grant is denied (not_granted) and sees no tools",
        held: denied.err().map(Refusal::code) == Some("not_granted")
            && engine.tools_for(&stranger).is_empty(),
    });
    engine
        .change_policy(PolicyChange::Revoke {
            actor: agent.clone(),
        })
        .map_err(|e| format!("revoke: {e}"))?;
    let revoked = engine.call_tool(&principal, "history_query", &json!({}));
    checks.push(Check {
        name: "the revoked agent is refused on its very next call (revoked)",
        held: revoked.err().map(Refusal::code) == Some("revoked")
            && engine.tools_for(&principal).is_empty(),
    });
    engine.flush().map_err(|e| format!("flush: {e}"))?;
    if let Some(out) = &args.report {
        let wrote = write_report(&engine, out);
        if let Ok(text) = &wrote {
            eprint!("annal demo: {text}");
        }
        checks.push(Check {
            name: "the owner's report of the store was written (annal report)",
            held: wrote.is_ok(),
        });
    }
    let engine = Arc::try_unwrap(engine).map_err(|_| "the engine is still shared".to_owned())?;
    let shutdown = engine.shutdown();
    checks.push(Check {
        name: "shutdown drained within its deadline",
        held: shutdown.drained,
    });

    // 4. Verify, and read the audit journal back.
    let scope = annal_engine::store::key_scope(&layout).map_err(|e| format!("store: {e}"))?;
    let custody = annal_engine::keys::open_store_key(
        provider.as_ref(),
        &namespace,
        &scope,
        annal_engine::keys::OpenMode::Read,
    )
    .map_err(|e| format!("key: {e}"))?;
    let storage: Arc<dyn Storage> =
        Arc::new(open_store(&layout, Access::Read).map_err(|e| e.to_string())?);
    let verified = verify(
        &storage,
        &custody.history_keys(),
        &SealKey::from_custody(&custody),
        CheckpointReading::Read(
            CredentialCheckpoints::new(provider.as_ref(), &namespace, scope.id.as_ref())
                .load()
                .map_err(|e| format!("checkpoint: {e}"))?,
        ),
    )
    .map_err(|e| format!("verify: {e}"))?;
    checks.push(Check {
        name: "verify: every chunk and seal is clean",
        held: verified.is_clean(),
    });
    let journal = StoreReader::<Journal>::new(Arc::clone(&storage))
        .read(&custody.journal_keys())
        .map_err(|e| format!("journal: {e}"))?;
    let mut labels_absent = true;
    for record in journal.records() {
        let text = String::from_utf8_lossy(&record.event.to_json_vec()).into_owned();
        labels_absent &= !text.contains("demo run");
        if let JournalEvent::Policy(event) = &record.event.event {
            match event {
                PolicyEvent::AuditStarted { verdict, .. } => match verdict {
                    Verdict::Allowed => figures.audit_allowed += 1,
                    Verdict::Denied(reason) => {
                        *figures
                            .audit_denied
                            .entry(reason.code().to_owned())
                            .or_default() += 1;
                    }
                },
                PolicyEvent::AuditFinished { outcome, .. } => match outcome {
                    AuditOutcome::Completed => figures.audit_completed += 1,
                    AuditOutcome::Refused(refusal) => {
                        *figures
                            .audit_refused
                            .entry(refusal.code().to_owned())
                            .or_default() += 1;
                    }
                },
                _ => {}
            }
        }
    }
    let history = StoreReader::<annal_engine::store::History>::new(Arc::clone(&storage))
        .read(&custody.history_keys())
        .map_err(|e| format!("history: {e}"))?;
    figures.access_events = history
        .records()
        .filter(|r| matches!(r.event.data.payload, annal_schema::Payload::Access { .. }))
        .count() as u64;
    checks.push(Check {
        name: "the audit journal holds a record for every call and no session label",
        held: labels_absent && figures.audit_allowed > 0 && !figures.audit_denied.is_empty(),
    });
    drop(storage);

    // 5. Delete: destroy the key, prove it gone, remove the files.
    let deleted = (|| -> Result<bool, String> {
        let storage = open_store(&layout, Access::Write).map_err(|e| e.to_string())?;
        let plan = plan_store_delete(storage, &namespace).map_err(|e| e.to_string())?;
        let proof = annal_engine::keys::destroy_store_keys(
            provider.as_ref(),
            &namespace,
            &plan.key_scope(),
        )
        .map_err(|e| e.to_string())?;
        delete_store_files(plan, &proof).map_err(|e| e.to_string())?;
        let key_gone = provider.load(&namespace, custody.reference()).is_err();
        Ok(key_gone && !layout.history_root().exists())
    })();
    checks.push(Check {
        name: "delete destroyed the key (verified absent) and removed the store",
        held: deleted == Ok(true),
    });
    let _ = std::fs::remove_dir_all(&dir);
    Ok((checks, figures))
}

fn report(args: &DemoArgs, checks: &[Check], figures: &Figures) -> ExitCode {
    let all_held = checks.iter().all(|c| c.held);
    let mut out = std::io::stdout().lock();
    let written = if args.json {
        let value = json!({
            "passed": all_held,
            "key_store": figures.key_store,
            "events_captured": figures.events_captured,
            "dropped_events": figures.dropped_events,
            "capture_p50_ns": figures.capture_p50_ns,
            "capture_p99_ns": figures.capture_p99_ns,
            "durable_events_per_sec": figures.durable_events_per_sec,
            "query_newest50_p50_us": figures.query_p50_us,
            "query_newest50_p99_us": figures.query_p99_us,
            "audit": {
                "allowed": figures.audit_allowed,
                "denied": figures.audit_denied,
                "completed": figures.audit_completed,
                "refused": figures.audit_refused,
            },
            "access_events": figures.access_events,
            "checks": checks.iter().map(|c| json!({"check": c.name, "held": c.held})).collect::<Vec<_>>(),
        });
        writeln!(out, "{value}")
    } else {
        let mut text = String::new();
        text.push_str("annal demo: the whole pipeline on a temporary store\n\n");
        text.push_str(&format!("  key store            {}\n", figures.key_store));
        text.push_str(&format!(
            "  events captured      {} ({} dropped)\n",
            figures.events_captured, figures.dropped_events
        ));
        text.push_str(&format!(
            "  capture hook         p50 {} ns, p99 {} ns per call\n",
            figures.capture_p50_ns, figures.capture_p99_ns
        ));
        text.push_str(&format!(
            "  durable throughput   {} events/s (capture to flushed, {} runtime threads)\n",
            figures.durable_events_per_sec, DEMO_RUNTIME_THREADS
        ));
        text.push_str(&format!(
            "  history_query        newest 50: p50 {} us, p99 {} us (through the gate and audit)\n",
            figures.query_p50_us, figures.query_p99_us
        ));
        let denied: Vec<String> = figures
            .audit_denied
            .iter()
            .map(|(code, n)| format!("{n} {code}"))
            .collect();
        let refused: Vec<String> = figures
            .audit_refused
            .iter()
            .map(|(code, n)| format!("{n} {code}"))
            .collect();
        text.push_str(&format!(
            "  audit journal        {} allowed, denied: {}; outcomes: {} completed, refused: {}\n",
            figures.audit_allowed,
            denied.join(", "),
            figures.audit_completed,
            refused.join(", ")
        ));
        text.push_str(&format!(
            "  access events        {} in the history stream (one per non-empty read)\n\n",
            figures.access_events
        ));
        for check in checks {
            text.push_str(&format!(
                "  [{}] {}\n",
                if check.held { "ok" } else { "FAILED" },
                check.name
            ));
        }
        text.push_str(if all_held {
            "\nevery check held.\n"
        } else {
            "\nsome checks FAILED.\n"
        });
        write!(out, "{text}")
    };
    if written.is_err() {
        return ExitCode::from(2);
    }
    if all_held {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
