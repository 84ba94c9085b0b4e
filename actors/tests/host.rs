//! The host integration kit end to end: the scripted host (`examples/host/annal_host.py`, the
//! official MCP Python SDK) against a real daemon, one test per branch of seed 000's
//! consultation behaviour, plus `annal mcp-config` and `annal skill`.
//!
//! Each branch test checks what the host decided (the context its model stub prints), that
//! this context holds none of the planted values (a URL, a file path, a window title and a
//! session label offered to capture), and what the audit journal holds afterwards: one entry
//! per gated call, each with its pre-execution verdict and its completion outcome, and an
//! `access` event only after a read that returned events.
//!
//! The host's Python comes from `ANNAL_HOST_PYTHON` (a Python with the pinned `mcp` installed;
//! `.ci/test` makes one in a venv). Without it these tests print SKIPPED and pass, except under
//! CI (`ANNAL_REQUIRE_HOST_PYTHON=1` or `ANNAL_REQUIRE_REAL_KEY_STORES=1`), where they fail.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{ANSWER_TIMEOUT_SECS, REQUIRE_ENVS, Raw, Sandbox, env_is_one, flood, python};

/// The scripted host.
const HOST_SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../examples/host/annal_host.py"
);

/// The bundled skill, as the repository holds it.
const SKILL_FILE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../skills/annal-history/SKILL.md"
);

/// The system-instruction text, as the repository holds it.
const INSTRUCTION_FILE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../skills/system-instruction.txt"
);

/// The `PATH` the host runs with (what a desktop session gives a client, no more).
const HOST_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Longest the scripted host may run, in seconds (a daemon start may take 20 s on its own).
const HOST_DEADLINE_SECS: u64 = 180;

/// Events the host asks for.
const HOST_LIMIT_EVENTS: &str = "10";

/// A request that consults history.
const RESUME: &str = "resume the task where I left off";

/// Values offered to capture that must never reach a model's context.
const PLANTED_URL: &str = "https://planted.example/secret-token-4d1c";
const PLANTED_PATH: &str = "/home/planted/secret-notes-4d1c.txt";
const PLANTED_TITLE: &str = "Planted Secret Window 4d1c";
const PLANTED_LABEL: &str = "planted-session-label-4d1c";

/// The application every planted action names.
const APPLICATION: &str = "org.example.Editor";

/// `annal mcp-config --actor ACTOR --client claude [extra]`, written to a file: its path.
fn config(sandbox: &Sandbox, actor: &str, extra: &[&str]) -> PathBuf {
    let mut args = vec!["mcp-config", "--actor", actor, "--client", "claude"];
    args.extend_from_slice(extra);
    let block = sandbox.ok(&args);
    let path = sandbox.path(&format!("mcp-{actor}.json"));
    std::fs::write(&path, block).unwrap();
    path
}

/// The scripted host as a client starts it: only HOME and PATH.
fn host_command(python: &Path, sandbox: &Sandbox, config: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(python);
    command
        .env_clear()
        .env("HOME", sandbox.path("home"))
        .env("PATH", HOST_PATH)
        .arg(HOST_SCRIPT)
        .arg("--config")
        .arg(config)
        .args(["--limit", HOST_LIMIT_EVENTS])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// Waits for `child` (at most [`HOST_DEADLINE_SECS`]) and returns the context it printed,
/// asserting it exited 0 and holds no planted value.
fn finished(mut child: Child) -> Value {
    let deadline = Instant::now() + Duration::from_secs(HOST_DEADLINE_SECS);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the host ran longer than {HOST_DEADLINE_SECS} s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let output: Output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stdout}\n{stderr}");
    for planted in [
        PLANTED_URL,
        PLANTED_PATH,
        PLANTED_TITLE,
        PLANTED_LABEL,
        "4d1c",
    ] {
        assert!(
            !stdout.contains(planted),
            "{planted} reached the model's context: {stdout}"
        );
    }
    let context: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(context["request"], RESUME, "{context}");
    assert_eq!(context["history"]["consulted"], true, "{context}");
    context["history"].clone()
}

/// Runs the host on [`RESUME`] and returns its history context.
fn host(python: &Path, sandbox: &Sandbox, config: &Path, args: &[&str]) -> Value {
    let mut args = args.to_vec();
    args.push(RESUME);
    finished(
        host_command(python, sandbox, config, &args)
            .spawn()
            .unwrap(),
    )
}

/// The host on [`RESUME`], stopped after `step` until `between` has run.
fn host_held(
    python: &Path,
    sandbox: &Sandbox,
    config: &Path,
    step: &str,
    between: impl FnOnce(),
) -> Value {
    let hold = sandbox.path(&format!("hold-{step}"));
    let hold_arg = hold.to_str().unwrap().to_owned();
    let mut child = host_command(
        python,
        sandbox,
        config,
        &["--hold-after", step, "--hold-file", &hold_arg, RESUME],
    )
    .spawn()
    .unwrap();
    let ready = hold.with_file_name(format!("hold-{step}.ready"));
    let deadline = Instant::now() + Duration::from_secs(HOST_DEADLINE_SECS);
    while !ready.exists() {
        if child.try_wait().unwrap().is_some() {
            let output = child.wait_with_output().unwrap();
            panic!(
                "the host ended before {step}: {}",
                String::from_utf8_lossy(&output.stdout)
            );
        }
        assert!(Instant::now() < deadline, "the host never reached {step}");
        std::thread::sleep(Duration::from_millis(20));
    }
    between();
    std::fs::write(hold.with_file_name(format!("hold-{step}.go")), "").unwrap();
    finished(child)
}

/// Opens a session with the planted label and captures `actions` completed actions in it;
/// offers the planted URL, path and title as identity fields (each refused); flushes.
fn plant(sandbox: &Sandbox, actions: usize) {
    let mut raw = Raw::connect(&sandbox.socket());
    let started = raw.ask(json!({"op": "session_started", "session": PLANTED_LABEL}));
    assert!(started["ok"].is_object(), "{started}");
    for _ in 0..actions {
        raw.action(json!({
            "capability": "input.pointer.click",
            "application": {"bundle_id": APPLICATION},
            "session": PLANTED_LABEL
        }));
    }
    for application in [
        json!({"bundle_id": PLANTED_URL}),
        json!({"bundle_id": PLANTED_PATH}),
        json!({"bundle_id": APPLICATION, "display_name": format!("{PLANTED_TITLE} - Mail")}),
    ] {
        let refused = raw.ask(
            json!({"op": "action_started", "capability": "input.keyboard.type",
            "application": application, "session": PLANTED_LABEL}),
        );
        assert!(refused["error"].is_object(), "{refused}");
    }
    assert!(raw.ask(json!({"op": "flush"}))["ok"].is_object());
}

/// An enabled store whose daemon runs, with `actions` planted actions.
fn enabled(actions: usize) -> Sandbox {
    let sandbox = Sandbox::new();
    sandbox.ok(&["enable"]);
    plant(&sandbox, actions);
    sandbox
}

/// `annal grant ACTOR OPERATION` for each operation.
fn grant(sandbox: &Sandbox, actor: &str, operations: &[&str]) {
    for operation in operations {
        sandbox.ok(&["grant", actor, operation]);
    }
}

/// The audit journal's entries for `actor`: (operation, verdict, outcome, returned events).
fn audit(sandbox: &Sandbox, actor: &str) -> Vec<(String, String, String, u64)> {
    let answer = sandbox.json(&["audit", "--actor", actor]);
    answer["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let text = |field: &str| e[field].as_str().unwrap_or("null").to_owned();
            (
                text("operation"),
                text("verdict"),
                text("outcome"),
                e["returned_events"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

fn entry(operation: &str, verdict: &str, outcome: &str) -> (String, String, String, u64) {
    (operation.into(), verdict.into(), outcome.into(), 0)
}

/// Asserts the host went on without history for `reason`.
fn assert_without(history: &Value, reason: &str) {
    assert_eq!(history["decision"], "continue_without_history", "{history}");
    assert_eq!(history["reason"], reason, "{history}");
    assert!(history["evidence_card"].is_null(), "{history}");
    assert!(
        history["note"]
            .as_str()
            .unwrap()
            .contains("without history")
    );
}

/// Asserts an audit of one completed status call and one completed query that returned
/// events, and returns how many it returned.
fn assert_status_then_read(entries: &[(String, String, String, u64)]) -> u64 {
    assert_eq!(entries.len(), 2, "{entries:?}");
    assert_eq!(entries[0], entry("status", "allowed", "completed"));
    let (operation, verdict, outcome, returned) = &entries[1];
    assert_eq!(
        (operation.as_str(), verdict.as_str(), outcome.as_str()),
        ("query", "allowed", "completed")
    );
    assert!(*returned > 0, "{entries:?}");
    *returned
}

#[test]
fn tools_absent_the_host_goes_on_without_history() {
    let Some(python) = python("tools_absent_the_host_goes_on_without_history") else {
        return;
    };
    let sandbox = enabled(3);
    // An actor with no grant is listed no tools.
    let stranger = config(&sandbox, "stranger", &[]);
    let history = host(&python, &sandbox, &stranger, &[]);
    assert_without(&history, "history_absent");
    assert_eq!(history["path"], "tools");
    assert!(history["status"].is_null());
    // A configured server that does not exist: absent too, never an error.
    let missing = sandbox.path("missing.json");
    let block = json!({"mcpServers": {"annal-history": {"command": "/nonexistent/annal",
        "args": ["mcp", "--actor", "stranger"]}}});
    std::fs::write(&missing, block.to_string()).unwrap();
    assert_without(&host(&python, &sandbox, &missing, &[]), "history_absent");
    // No configuration at all.
    assert_without(
        &host(&python, &sandbox, &sandbox.path("none.json"), &[]),
        "history_absent",
    );
    // Listing is not a call: nothing was audited, nothing read.
    assert!(audit(&sandbox, "stranger").is_empty());
    assert_eq!(sandbox.access_events("agent_query"), 0);
}

#[test]
fn a_request_that_is_not_about_earlier_work_consults_nothing() {
    let Some(python) = python("a_request_that_is_not_about_earlier_work_consults_nothing") else {
        return;
    };
    let sandbox = enabled(2);
    grant(&sandbox, "host", &["status", "query"]);
    let config = config(&sandbox, "host", &[]);
    let output = host_command(&python, &sandbox, &config, &["write a haiku about rain"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0));
    let context: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(context["history"]["consulted"], false, "{context}");
    assert_eq!(context["history"]["reason"], "not_requested");
    assert!(audit(&sandbox, "host").is_empty());
}

#[test]
fn status_denied_is_surfaced_and_the_host_continues() {
    let Some(python) = python("status_denied_is_surfaced_and_the_host_continues") else {
        return;
    };
    let sandbox = enabled(3);
    // Query alone: the tool list is not empty, the status call is denied.
    grant(&sandbox, "host", &["query"]);
    let config = config(&sandbox, "host", &[]);
    let history = host(&python, &sandbox, &config, &[]);
    assert_without(&history, "status_denied");
    assert_eq!(history["code"], "not_granted");
    assert!(history["status"].is_null());
    // The denied status call is audited; no query followed it.
    assert_eq!(
        audit(&sandbox, "host"),
        [entry("status", "not_granted", "not_granted")]
    );
    assert_eq!(sandbox.access_events("agent_query"), 0);
    // The preflight says the same.
    let preflight = host(&python, &sandbox, &config, &["--preflight"]);
    assert_without(&preflight, "status_denied");
    assert_eq!(preflight["path"], "preflight");
}

#[test]
fn query_not_granted_keeps_the_status_and_reads_nothing() {
    let Some(python) = python("query_not_granted_keeps_the_status_and_reads_nothing") else {
        return;
    };
    let sandbox = enabled(3);
    grant(&sandbox, "host", &["status"]);
    let config = config(&sandbox, "host", &[]);
    for path in [&[][..], &["--preflight"]] {
        let history = host(&python, &sandbox, &config, path);
        assert_without(&history, "query_not_granted");
        assert_eq!(history["status"]["enabled"], true, "{history}");
        assert_eq!(history["status"]["health"], "ready");
    }
    assert_eq!(
        audit(&sandbox, "host"),
        [
            entry("status", "allowed", "completed"),
            entry("status", "allowed", "completed")
        ]
    );
    assert_eq!(sandbox.access_events("agent_query"), 0);
}

#[test]
fn disabled_history_is_kept_and_not_queried() {
    let Some(python) = python("disabled_history_is_kept_and_not_queried") else {
        return;
    };
    let sandbox = enabled(3);
    grant(&sandbox, "host", &["status", "query"]);
    sandbox.ok(&["disable"]);
    let config = config(&sandbox, "host", &[]);
    for path in [&[][..], &["--preflight"]] {
        let history = host(&python, &sandbox, &config, path);
        assert_without(&history, "disabled");
        assert_eq!(history["status"]["enabled"], false, "{history}");
    }
    assert_eq!(
        audit(&sandbox, "host"),
        [
            entry("status", "allowed", "completed"),
            entry("status", "allowed", "completed")
        ]
    );
    assert_eq!(sandbox.access_events("agent_query"), 0);
}

#[test]
fn paused_history_is_used_with_the_caveat_named() {
    let Some(python) = python("paused_history_is_used_with_the_caveat_named") else {
        return;
    };
    let sandbox = enabled(3);
    grant(&sandbox, "host", &["status", "query"]);
    sandbox.ok(&["pause"]);
    let config = config(&sandbox, "host", &[]);
    let history = host(&python, &sandbox, &config, &[]);
    assert_eq!(history["decision"], "use_with_caveats", "{history}");
    assert_eq!(history["caveats"], json!(["paused"]));
    assert_eq!(history["status"]["paused"], true);
    let card = history["evidence_card"].to_string();
    assert!(card.contains("capture is paused"), "{card}");
    assert!(card.contains("input.pointer.click"), "{card}");
    let returned = assert_status_then_read(&audit(&sandbox, "host"));
    assert_eq!(
        returned,
        u64::try_from(history["evidence_card"].as_array().unwrap().len()).unwrap() - 3,
        "the card shows each returned event (plus a header and two notes)"
    );
    assert_eq!(sandbox.access_events("agent_query"), 1);
    // The preflight reaches the same verdict.
    let preflight = host(&python, &sandbox, &config, &["--preflight"]);
    assert_eq!(preflight["decision"], "use_with_caveats");
    assert_eq!(preflight["caveats"], json!(["paused"]));
    assert_eq!(sandbox.access_events("agent_query"), 2);
}

/// Marks files immutable (`chattr +i`, which stops even root from writing them) and undoes it
/// when dropped, so the sandbox can be removed.
struct Immutable(Vec<PathBuf>);

impl Immutable {
    fn set(paths: Vec<PathBuf>) -> Option<Self> {
        let done = Command::new("chattr")
            .arg("+i")
            .args(&paths)
            .stdin(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        let guard = Self(paths);
        done.then_some(guard)
    }
}

impl Drop for Immutable {
    fn drop(&mut self) {
        let _ = Command::new("chattr")
            .arg("-i")
            .args(&self.0)
            .stdin(Stdio::null())
            .status();
    }
}

#[test]
fn unhealthy_storage_is_not_read_and_the_host_continues() {
    let Some(python) = python("unhealthy_storage_is_not_read_and_the_host_continues") else {
        return;
    };
    let sandbox = enabled(3);
    grant(&sandbox, "host", &["status", "query"]);
    // The chunk directory and its chunks become unwritable under the running daemon: the
    // next append fails and the store reports storage_unavailable.
    let chunks = sandbox
        .path("state")
        .join("annal")
        .join(&sandbox.namespace)
        .join("computer-history")
        .join("chunks");
    let mut paths = vec![chunks.clone()];
    paths.extend(support::walk(&chunks));
    let Some(_immutable) = Immutable::set(paths) else {
        assert!(
            !REQUIRE_ENVS.iter().any(|name| env_is_one(name)),
            "chattr +i is needed to make storage unavailable"
        );
        eprintln!("unhealthy_storage_is_not_read_and_the_host_continues: SKIPPED: no chattr +i");
        return;
    };
    let mut raw = Raw::connect(&sandbox.socket());
    raw.action(json!({"capability": "input.pointer.click"}));
    let _ = raw.ask(json!({"op": "flush"}));
    let deadline = Instant::now() + Duration::from_secs(ANSWER_TIMEOUT_SECS);
    while sandbox.json(&["status"])["status"]["health"] != "storage_unavailable" {
        assert!(
            Instant::now() < deadline,
            "the store never became unhealthy"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let config = config(&sandbox, "host", &[]);
    for path in [&[][..], &["--preflight"]] {
        let history = host(&python, &sandbox, &config, path);
        assert_without(&history, "history_unreadable");
        assert_eq!(
            history["status"]["health"], "storage_unavailable",
            "{history}"
        );
    }
    assert_eq!(
        audit(&sandbox, "host"),
        [
            entry("status", "allowed", "completed"),
            entry("status", "allowed", "completed")
        ]
    );
}

/// Unhealthy by its key: an enabled store whose key is gone from the kernel keyring (destroyed
/// behind annal's back while its daemon was stopped) cannot be read. Both paths go on without
/// history: preflight says `history_unreadable` (before, "disabled": the store reports itself
/// not enabled when its key cannot load), the tool path finds no tools (the gate, failing
/// closed, lists none). No planted value reaches the context.
#[test]
fn unhealthy_key_is_not_read_and_the_host_continues() {
    use annal_engine::keys::{CredentialNaming, KeyProvider, KeyutilsProvider, Namespace};
    let Some(python) = python("unhealthy_key_is_not_read_and_the_host_continues") else {
        return;
    };
    let sandbox = enabled(3);
    grant(&sandbox, "host", &["status", "query"]);
    let config = config(&sandbox, "host", &[]);
    sandbox.ok(&["stop"]);
    let provider: std::sync::Arc<dyn KeyProvider> = std::sync::Arc::new(
        KeyutilsProvider::open(
            CredentialNaming::Annal,
            Box::new(annal_engine::entropy::OsEntropy),
        )
        .unwrap(),
    );
    let namespace = Namespace::new(&sandbox.namespace).unwrap();
    let destroyed = annal_engine::keys::destroy_namespace(provider.as_ref(), &namespace).unwrap();
    assert!(!destroyed.destroyed().is_empty(), "{destroyed:?}");
    let status = sandbox.json(&["status"]);
    assert!(
        status["status"]["health"]
            .as_str()
            .is_some_and(|h| h.starts_with("key_")),
        "{status}"
    );
    let history = host(&python, &sandbox, &config, &["--preflight"]);
    assert_without(&history, "history_unreadable");
    let history = host(&python, &sandbox, &config, &[]);
    assert_eq!(history["decision"], "continue_without_history", "{history}");
    assert!(history["evidence_card"].is_null(), "{history}");
}

#[test]
fn dropped_events_are_kept_as_a_caveat() {
    /// Captures per connection (under the daemon's 4,096 open actions per connection).
    const FLOOD_CAPTURES: usize = 3_000;
    /// Connections flooding at once.
    const FLOOD_CONNECTIONS: usize = 4;
    /// Floods before the test gives up on seeing a drop.
    const FLOOD_ROUNDS_MAX: usize = 20;
    let Some(python) = python("dropped_events_are_kept_as_a_caveat") else {
        return;
    };
    let sandbox = enabled(2);
    grant(&sandbox, "host", &["status", "query"]);
    let socket = sandbox.socket();
    let mut rounds = 0;
    while sandbox.json(&["status"])["status"]["dropped_events"] == 0 {
        assert!(rounds < FLOOD_ROUNDS_MAX, "no capture was ever dropped");
        flood(&socket, FLOOD_CONNECTIONS, FLOOD_CAPTURES);
        rounds += 1;
    }
    sandbox.ok(&["flush"]);
    let config = config(&sandbox, "host", &[]);
    let history = host(&python, &sandbox, &config, &[]);
    assert_eq!(history["decision"], "use_with_caveats", "{history}");
    let caveats = history["caveats"].as_array().unwrap();
    assert!(caveats.contains(&json!("events_dropped")), "{history}");
    assert!(history["status"]["dropped_events"].as_u64().unwrap() > 0);
    let card = history["evidence_card"].to_string();
    assert!(card.contains("some actions were never recorded"), "{card}");
    assert_status_then_read(&audit(&sandbox, "host"));
    assert_eq!(sandbox.access_events("agent_query"), 1);
}

#[test]
fn an_empty_slice_leaves_no_access_record() {
    let Some(python) = python("an_empty_slice_leaves_no_access_record") else {
        return;
    };
    let sandbox = enabled(3);
    grant(&sandbox, "host", &["status", "query"]);
    let config = config(&sandbox, "host", &[]);
    // A session nothing was captured in.
    let history = host(
        &python,
        &sandbox,
        &config,
        &["--session", "a-session-with-nothing"],
    );
    assert_without(&history, "empty");
    assert_eq!(history["status"]["enabled"], true);
    assert_eq!(
        audit(&sandbox, "host"),
        [
            entry("status", "allowed", "completed"),
            entry("query", "allowed", "completed")
        ]
    );
    assert_eq!(sandbox.access_events("agent_query"), 0);
}

#[test]
fn a_daemon_killed_between_status_and_query_is_a_failure_the_host_survives() {
    let Some(python) =
        python("a_daemon_killed_between_status_and_query_is_a_failure_the_host_survives")
    else {
        return;
    };
    let sandbox = Sandbox::new();
    // This test's own daemon, so it can kill it.
    let mut daemon = sandbox
        .annal(&["serve"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    drop(sandbox.connect_when_up());
    sandbox.ok(&["enable"]);
    plant(&sandbox, 3);
    grant(&sandbox, "host", &["status", "query"]);
    let config = config(&sandbox, "host", &[]);
    let socket = sandbox.socket();
    let mut held_lock = None;
    let history = host_held(&python, &sandbox, &config, "status", || {
        daemon.kill().unwrap();
        daemon.wait().unwrap();
        // No daemon can take its place while this lock is held (the one a daemon holds for
        // its life, beside its socket): the host's query finds none.
        let lock = std::fs::File::open(socket.with_extension("lock")).unwrap();
        rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive).unwrap();
        held_lock = Some(lock);
    });
    drop(held_lock);
    assert_without(&history, "history_failed");
    assert_eq!(history["code"], "history_storage_unavailable", "{history}");
    // The status it read before is kept.
    assert_eq!(history["status"]["enabled"], true, "{history}");
    // The status call was audited before it ran; its completion may have died with the daemon
    // (it is written with the next group commit). The query never reached a gate.
    let entries = audit(&sandbox, "host");
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(
        (entries[0].0.as_str(), entries[0].1.as_str()),
        ("status", "allowed")
    );
    assert!(
        ["completed", "null"].contains(&entries[0].2.as_str()),
        "{entries:?}"
    );
    assert_eq!(sandbox.access_events("agent_query"), 0);
}

#[test]
fn an_expired_manifest_is_a_denial_the_host_surfaces() {
    /// The manifest's lifetime: long enough for the host to start and list its tools on a
    /// loaded machine.
    const MANIFEST_LIFETIME: &str = "12s";
    let Some(python) = python("an_expired_manifest_is_a_denial_the_host_surfaces") else {
        return;
    };
    let sandbox = enabled(3);
    let manifest = sandbox.path("short.yaml");
    std::fs::write(
        &manifest,
        format!(
            "version: 3\nexpires_after: {MANIFEST_LIFETIME}\nidle_timeout: {MANIFEST_LIFETIME}\n\
             resources:\n  computer_history:\n    operations: [status, query]\n\
             allow:\n  tools: [history_status, history_query]\n"
        ),
    )
    .unwrap();
    let config = config(
        &sandbox,
        "host",
        &["--manifest", manifest.to_str().unwrap()],
    );
    let history = host_held(&python, &sandbox, &config, "tools", || {
        // The tools were listed under the live manifest; wait until its grants lapse.
        let deadline = Instant::now() + Duration::from_secs(HOST_DEADLINE_SECS);
        loop {
            let grants = sandbox.json(&["grants"]);
            let live = grants["grants"]
                .as_array()
                .unwrap()
                .iter()
                .any(|g| g["actor"] == "host" && g["live"] == true);
            if !live {
                break;
            }
            assert!(Instant::now() < deadline, "the manifest never expired");
            std::thread::sleep(Duration::from_millis(200));
        }
    });
    assert_without(&history, "status_denied");
    assert_eq!(history["code"], "expired", "{history}");
    assert_eq!(
        audit(&sandbox, "host"),
        [entry("status", "expired", "expired")]
    );
    assert_eq!(sandbox.access_events("agent_query"), 0);
}

#[test]
fn a_normal_resume_gets_a_metadata_evidence_card() {
    let Some(python) = python("a_normal_resume_gets_a_metadata_evidence_card") else {
        return;
    };
    let sandbox = enabled(4);
    // The starter manifest mcp-config writes is the one the server approves.
    let manifest = sandbox.path("starter.yaml");
    let config = config(
        &sandbox,
        "host",
        &["--write-manifest", manifest.to_str().unwrap()],
    );
    let history = host(&python, &sandbox, &config, &[]);
    assert_eq!(history["decision"], "use", "{history}");
    assert_eq!(history["caveats"], json!([]));
    assert_eq!(history["gaps"], json!([]));
    assert_eq!(
        history["status"],
        json!({"admitted": true, "enabled": true, "paused": false, "health": "ready",
            "dropped_events": 0})
    );
    let card: Vec<&str> = history["evidence_card"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    assert!(card[0].contains("metadata only"), "{card:?}");
    let completed: Vec<&&str> = card
        .iter()
        .filter(|l| l.contains("action_completed"))
        .collect();
    assert_eq!(completed.len(), 4, "{card:?}");
    for line in completed {
        assert!(
            line.contains("input.pointer.click")
                && line.contains(&format!("app={APPLICATION}"))
                && line.contains("effect=confirmed"),
            "{line}"
        );
    }
    let returned = assert_status_then_read(&audit(&sandbox, "host"));
    assert_eq!(returned, u64::try_from(card.len()).unwrap() - 2);
    assert_eq!(sandbox.access_events("agent_query"), 1);
    let grants = sandbox.json(&["grants"]);
    assert!(
        grants["grants"]
            .as_array()
            .unwrap()
            .iter()
            .all(|g| g["source"] == "manifest"),
        "{grants}"
    );
    // The preflight path, with the same grants: the same verdict, two more audit entries, one
    // more access record.
    let preflight = host(&python, &sandbox, &config, &["--preflight"]);
    assert_eq!(preflight["decision"], "use", "{preflight}");
    assert_eq!(preflight["path"], "preflight");
    assert_eq!(audit(&sandbox, "host").len(), 4);
    assert_eq!(sandbox.access_events("agent_query"), 2);
}

#[test]
fn gaps_in_a_session_slice_are_named_on_the_card() {
    let Some(python) = python("gaps_in_a_session_slice_are_named_on_the_card") else {
        return;
    };
    let sandbox = enabled(0);
    // Two sessions whose actions alternate: one session's slice skips the other's sequences.
    let mut raw = Raw::connect(&sandbox.socket());
    for label in ["session-alpha", "session-beta"] {
        assert!(raw.ask(json!({"op": "session_started", "session": label}))["ok"].is_object());
    }
    for _ in 0..3 {
        for label in ["session-alpha", "session-beta"] {
            raw.action(json!({"capability": "input.pointer.click", "session": label}));
        }
    }
    assert!(raw.ask(json!({"op": "flush"}))["ok"].is_object());
    grant(&sandbox, "host", &["status", "query"]);
    let config = config(&sandbox, "host", &[]);
    for path in [&[][..], &["--preflight"]] {
        let mut args = path.to_vec();
        args.extend(["--session", "session-alpha"]);
        let history = host(&python, &sandbox, &config, &args);
        assert_eq!(history["decision"], "use_with_caveats", "{history}");
        assert_eq!(history["caveats"], json!(["gaps"]), "{history}");
        let gaps = history["gaps"].as_array().unwrap();
        assert!(!gaps.is_empty(), "{history}");
        let card = history["evidence_card"].to_string();
        for gap in gaps {
            let named = format!("gap: sequence {}-{} missing", gap[0], gap[1]);
            assert!(card.contains(&named), "{named}: {card}");
        }
        assert!(!card.contains("session-alpha") && !card.contains("session-beta"));
    }
    let entries = audit(&sandbox, "host");
    assert_eq!(entries.len(), 4, "{entries:?}");
    assert_status_then_read(&entries[..2]);
    assert_status_then_read(&entries[2..]);
    assert_eq!(sandbox.access_events("agent_query"), 2);
}

/// Issue 32's acceptance: the block `annal mcp-config --client claude` prints, written to a
/// config file, is what the SDK's stdio launcher starts (with its bare environment), and the
/// server lists the tools of a granted actor; the vscode block starts the same server.
#[test]
fn the_sdk_launcher_starts_the_server_from_the_printed_block() {
    let Some(python) = python("the_sdk_launcher_starts_the_server_from_the_printed_block") else {
        return;
    };
    let sandbox = enabled(1);
    grant(&sandbox, "agent-a", &["status", "query"]);
    const LIST: &str = r#"
import json, sys, anyio
from mcp import ClientSession, StdioServerParameters, stdio_client
async def main():
    with open(sys.argv[1]) as f:
        block = json.load(f)
    servers = block.get("mcpServers") or block["servers"]
    entry = servers["annal-history"]
    params = StdioServerParameters(command=entry["command"], args=entry["args"])
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            tools = await session.list_tools()
            print(json.dumps(sorted(t.name for t in tools.tools)))
anyio.run(main)
"#;
    for client in ["claude", "vscode"] {
        let block = sandbox.ok(&["mcp-config", "--actor", "agent-a", "--client", client]);
        let path = sandbox.path(&format!("{client}.json"));
        std::fs::write(&path, &block).unwrap();
        let output = Command::new(&python)
            .env_clear()
            .env("HOME", sandbox.path("home"))
            .env("PATH", HOST_PATH)
            .args(["-c", LIST])
            .arg(&path)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{client}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let names: Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(
            names,
            json!(["history_query", "history_status"]),
            "{client}"
        );
    }
    // An actor without a grant is listed nothing through the same launcher.
    let block = sandbox.ok(&["mcp-config", "--actor", "agent-b", "--client", "claude"]);
    let path = sandbox.path("b.json");
    std::fs::write(&path, &block).unwrap();
    let output = Command::new(&python)
        .env_clear()
        .env("HOME", sandbox.path("home"))
        .env("PATH", HOST_PATH)
        .args(["-c", LIST])
        .arg(&path)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(output.status.success());
    assert_eq!(
        serde_json::from_slice::<Value>(&output.stdout).unwrap(),
        json!([])
    );
}

#[test]
fn mcp_config_prints_each_clients_block_and_refuses_bad_input() {
    let sandbox = Sandbox::new();
    let exe = std::fs::canonicalize(env!("CARGO_BIN_EXE_annal")).unwrap();
    let parse = |args: &[&str]| -> Value { serde_json::from_str(&sandbox.ok(args)).unwrap() };
    let claude = parse(&["mcp-config", "--actor", "agent-a", "--client", "claude"]);
    let server = &claude["mcpServers"]["annal-history"];
    assert_eq!(
        std::fs::canonicalize(server["command"].as_str().unwrap()).unwrap(),
        exe
    );
    let args: Vec<&str> = server["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(args[..3], ["mcp", "--actor", "agent-a"]);
    assert!(
        args.windows(2)
            .any(|w| w == ["--namespace", &sandbox.namespace])
    );
    assert!(
        args.contains(&"--store") && args.contains(&"--socket"),
        "{args:?}"
    );
    assert_eq!(
        parse(&["mcp-config", "--actor", "agent-a"]),
        parse(&["mcp-config", "--actor", "agent-a", "--client", "cursor"])
    );
    let vscode = parse(&["mcp-config", "--actor", "agent-a", "--client", "vscode"]);
    assert_eq!(vscode["servers"]["annal-history"]["type"], "stdio");
    assert_eq!(vscode["servers"]["annal-history"]["args"], server["args"]);

    // --write-manifest: a new file, 0600, named in the block by its absolute path; never over
    // an existing one.
    let manifest = sandbox.path("m.yaml");
    let written = parse(&[
        "mcp-config",
        "--actor",
        "agent-a",
        "--write-manifest",
        manifest.to_str().unwrap(),
    ]);
    let args = written["mcpServers"]["annal-history"]["args"].clone();
    assert_eq!(args[3], "--manifest");
    assert_eq!(args[4], manifest.to_str().unwrap());
    let mode = std::fs::metadata(&manifest).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let text = std::fs::read_to_string(&manifest).unwrap();
    assert!(text.contains("version: 3"), "{text}");

    let refused = |args: &[&str], says: &str| {
        let output = sandbox.run(args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(output.stdout.is_empty(), "{args:?}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    };
    let path = manifest.to_str().unwrap();
    refused(
        &["mcp-config", "--actor", "agent-a", "--write-manifest", path],
        "the file exists",
    );
    assert_eq!(std::fs::read_to_string(&manifest).unwrap(), text);
    refused(&["mcp-config", "--actor", "not an actor"], "--actor");
    refused(
        &["mcp-config", "--actor", "agent-a", "--client", "emacs"],
        "emacs",
    );
    let bad = sandbox.path("bad.yaml");
    std::fs::write(&bad, "version: 2\nsecret_field: planted-4d1c\n").unwrap();
    refused(
        &[
            "mcp-config",
            "--actor",
            "agent-a",
            "--manifest",
            bad.to_str().unwrap(),
        ],
        "--manifest",
    );
    let output = sandbox.run(&[
        "mcp-config",
        "--actor",
        "a",
        "--manifest",
        bad.to_str().unwrap(),
    ]);
    assert!(!String::from_utf8_lossy(&output.stderr).contains("planted-4d1c"));
    refused(
        &[
            "mcp-config",
            "--actor",
            "agent-a",
            "--manifest",
            sandbox.path("absent.yaml").to_str().unwrap(),
        ],
        "absent.yaml",
    );
}

#[test]
fn the_skill_is_shown_as_shipped_and_installs_into_a_folder_a_host_loads() {
    let sandbox = Sandbox::new();
    let shipped = std::fs::read_to_string(SKILL_FILE).unwrap();
    assert_eq!(sandbox.ok(&["skill", "show"]), shipped);
    assert_eq!(
        sandbox.ok(&["skill", "instruction"]),
        std::fs::read_to_string(INSTRUCTION_FILE).unwrap()
    );
    let skills = sandbox.path("home").join(".agent").join("skills");
    let said = sandbox.ok(&["skill", "install", skills.to_str().unwrap()]);
    let file = skills.join("annal-history").join("SKILL.md");
    assert!(said.contains(file.to_str().unwrap()), "{said}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), shipped);
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&file), 0o600);
    assert_eq!(mode(file.parent().unwrap()), 0o700);
    // What a host loads: front matter whose name is the folder's.
    assert!(shipped.starts_with("---\nname: annal-history\ndescription: "));
    // An edited copy is kept unless --force, and the refusal names it and the fix.
    std::fs::write(&file, "the owner's edit").unwrap();
    let output = sandbox.run(&["skill", "install", skills.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(file.to_str().unwrap()) && stderr.contains("--force"),
        "{stderr}"
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "the owner's edit");
    let again = sandbox.json(&["skill", "install", skills.to_str().unwrap(), "--force"]);
    assert_eq!(again["changed"], true);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), shipped);
    let unchanged = sandbox.json(&["skill", "install", skills.to_str().unwrap()]);
    assert_eq!(unchanged["changed"], false);
}
