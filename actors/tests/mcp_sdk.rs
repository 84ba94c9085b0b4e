//! `annal mcp` as the official MCP Python SDK sees it (issue 29, items 6 and 7): the SDK's
//! `stdio_client` starts the server with its default environment (`env=None`) and its
//! `ClientSession` lists and calls the tools (`support/sdk_client.py`, which prints what the SDK
//! parsed; every judgement is made here).
//!
//! - The tools carry their `outputSchema` (the SDK validates each successful result against
//!   it, and rejects one with a field the schema does not name), their closed input schema and
//!   their annotations; a revocation made by `annal revoke` in another process reaches the
//!   session as `notifications/tools/list_changed`, and the next call is refused `revoked`.
//! - After `annal --namespace N enable` in a shell that has only `HOME` and
//!   `XDG_RUNTIME_DIR=/run/user/UID`, the SDK's launch of `annal --namespace N mcp --actor A
//!   --manifest M` serves both tools on that store. This needs `/run/user/UID` as a login
//!   session makes it (the user's, 0700; `.ci/test` creates it when missing): without it the
//!   test prints SKIPPED, except under CI (`ANNAL_REQUIRE_HOST_PYTHON=1`), where it fails.
//!
//! The Python comes from `ANNAL_HOST_PYTHON`, as for `host.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{Raw, Sandbox, python, required};

/// The SDK client.
const SDK_CLIENT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/sdk_client.py");

/// The `PATH` the client runs with (what a desktop session gives a host, no more).
const HOST_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Longest the SDK client may run, in seconds (its own deadline is 150 s).
const CLIENT_DEADLINE_SECS: u64 = 180;

/// Where a login session puts a user's runtime directory, before the uid.
const LOGIN_RUNTIME_DIR_PARENT: &str = "/run/user";

/// Actions captured before the client reads.
const CAPTURED_ACTIONS: usize = 4;

/// The capability every captured action names.
const CAPABILITY: &str = "window.focus";

/// The SDK client, started with only `HOME` and `PATH` (so the SDK's default environment for
/// the server holds no more), for the server `command args`.
fn sdk_client(python: &Path, home: &Path, command: &str, args: &[String]) -> Command {
    let mut client = Command::new(python);
    client
        .env_clear()
        .env("HOME", home)
        .env("PATH", HOST_PATH)
        .arg(SDK_CLIENT)
        .arg(format!("--command={command}"))
        .args(args.iter().map(|arg| format!("--arg={arg}")))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    client
}

/// Waits for `child` (at most [`CLIENT_DEADLINE_SECS`]), asserts it exited 0, and returns its
/// report.
fn report(mut child: Child) -> Value {
    let deadline = Instant::now() + Duration::from_secs(CLIENT_DEADLINE_SECS);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the SDK client ran longer than {CLIENT_DEADLINE_SECS} s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stdout}\n{stderr}");
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}\n{stderr}"))
}

/// Captures [`CAPTURED_ACTIONS`] actions through the daemon at `socket` and flushes.
fn capture(socket: &Path) {
    let mut raw = Raw::connect(socket);
    for _ in 0..CAPTURED_ACTIONS {
        raw.action(json!({"capability": CAPABILITY}));
    }
    assert!(raw.ask(json!({"op": "flush"}))["ok"].is_object());
}

/// How many completed actions of [`CAPABILITY`] a query result holds.
fn captured_events(result: &Value) -> usize {
    result["events"]
        .as_array()
        .unwrap_or_else(|| panic!("no events: {result}"))
        .iter()
        .filter(|event| {
            event["data"]["capability"] == CAPABILITY
                && event["data"]["payload"]["kind"] == "action_completed"
        })
        .count()
}

/// Asserts what the SDK parsed of the two tools: the exact schemas annal serves and the
/// annotations.
fn assert_tools(report: &Value) {
    let tools = report["tools"].as_object().unwrap();
    let mut names: Vec<&str> = tools.keys().map(String::as_str).collect();
    names.sort_unstable();
    assert_eq!(names, ["history_query", "history_status"], "{report}");
    let status = &tools["history_status"];
    let query = &tools["history_query"];
    assert_eq!(
        status["output_schema"],
        annal_schema::tools::history_status_output_schema()
    );
    assert_eq!(
        query["output_schema"],
        annal_engine::policy::query_output_schema()
    );
    assert_eq!(
        status["input_schema"],
        annal_schema::tools::history_status_input_schema()
    );
    assert_eq!(
        query["input_schema"],
        annal_engine::policy::query_input_schema()
    );
    for (name, tool) in tools {
        let hints = &tool["annotations"];
        assert_eq!(hints["readOnlyHint"], true, "{name}: {tool}");
        assert_eq!(hints["openWorldHint"], false, "{name}: {tool}");
        assert_eq!(
            hints["idempotentHint"] == true,
            name == "history_status",
            "{name}: {tool}"
        );
        assert_eq!(
            tool["input_schema"]["additionalProperties"], false,
            "{name}: {tool}"
        );
    }
}

/// The server entry `annal mcp-config` prints for `actor`: (command, args).
fn server_entry(sandbox: &Sandbox, actor: &str) -> (String, Vec<String>) {
    let block: Value =
        serde_json::from_str(&sandbox.ok(&["mcp-config", "--actor", actor, "--client", "claude"]))
            .unwrap();
    let entry = &block["mcpServers"]["annal-history"];
    let args = entry["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_owned())
        .collect();
    (entry["command"].as_str().unwrap().to_owned(), args)
}

/// Issue 29's acceptance: the SDK sees `outputSchema`, annotations, and a
/// `tools/list_changed` notification after a revoke made from another process; the call after
/// it is refused `revoked`. The SDK validates real results against the `outputSchema`.
#[test]
fn the_sdk_sees_schemas_annotations_and_a_revocation_from_another_process() {
    let Some(python) =
        python("the_sdk_sees_schemas_annotations_and_a_revocation_from_another_process")
    else {
        return;
    };
    let sandbox = Sandbox::new();
    sandbox.ok(&["enable"]);
    sandbox.ok(&["grant", "agent-a", "status"]);
    sandbox.ok(&["grant", "agent-a", "query"]);
    capture(&sandbox.socket());
    let (command, args) = server_entry(&sandbox, "agent-a");
    let ready = sandbox.path("sdk.ready");
    let mut child = sdk_client(&python, &sandbox.path("home"), &command, &args)
        .arg(format!("--ready={}", ready.display()))
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(CLIENT_DEADLINE_SECS);
    while !ready.exists() {
        if child.try_wait().unwrap().is_some() {
            let output = child.wait_with_output().unwrap();
            panic!(
                "the SDK client ended before it listed the tools: {}\n{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        assert!(Instant::now() < deadline, "the SDK client never listed");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The owner's shell: another process than the server the SDK started.
    sandbox.ok(&["revoke", "agent-a"]);
    let report = report(child);

    assert_eq!(report["server_env"], "default", "{report}");
    assert_eq!(report["list_changed_capability"], true, "{report}");
    assert_tools(&report);
    // Both results passed the SDK's own outputSchema validation (call_tool raises otherwise),
    // and the validation is real: one more field fails it.
    assert_eq!(report["status"]["is_error"], false, "{report}");
    assert_eq!(
        report["status"]["structured_content"]["enabled"], true,
        "{report}"
    );
    assert_eq!(report["query"]["is_error"], false, "{report}");
    assert_eq!(
        captured_events(&report["query"]["structured_content"]),
        CAPTURED_ACTIONS,
        "{report}"
    );
    assert_eq!(report["forged_result_rejected"], true, "{report}");
    // The revocation, announced and then enforced.
    assert_eq!(
        report["notifications"],
        json!(["notifications/tools/list_changed"]),
        "{report}"
    );
    assert_eq!(report["tools_after"], json!([]), "{report}");
    assert_eq!(report["status_after"]["is_error"], true, "{report}");
    assert_eq!(
        report["status_after"]["structured_content"]["code"], "revoked",
        "{report}"
    );
}

/// The login runtime directory `/run/user/UID` when it is as a login session makes it (this
/// user's, a directory, 0700); otherwise why not.
fn login_runtime_dir() -> Result<PathBuf, String> {
    let uid = rustix::process::geteuid().as_raw();
    let dir = Path::new(LOGIN_RUNTIME_DIR_PARENT).join(uid.to_string());
    let meta = std::fs::metadata(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o777 != 0o700 {
        return Err(format!(
            "{} is not this user's private directory (uid {}, mode {:o}; want uid {uid}, 0700)",
            dir.display(),
            meta.uid(),
            meta.mode() & 0o7777
        ));
    }
    Ok(dir)
}

/// A store enabled from a shell with only `HOME` and `XDG_RUNTIME_DIR`: its daemon is stopped,
/// its key destroyed and its socket directory's files removed when the test ends, even on
/// failure.
struct BareStore {
    home: PathBuf,
    runtime: PathBuf,
    namespace: String,
    /// The daemon's socket, once known.
    socket: Option<PathBuf>,
}

impl BareStore {
    /// `annal --namespace N <args>` in that shell: only HOME and XDG_RUNTIME_DIR.
    fn annal(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_annal"));
        command
            .env_clear()
            .env("HOME", &self.home)
            .env("XDG_RUNTIME_DIR", &self.runtime)
            .args(["--namespace", &self.namespace])
            .args(args)
            .stdin(Stdio::null());
        command
    }

    fn ok(&self, args: &[&str]) -> String {
        let output = self.annal(args).output().unwrap();
        assert!(
            output.status.success(),
            "annal {args:?}: {}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap()
    }
}

impl Drop for BareStore {
    fn drop(&mut self) {
        let _ = self.annal(&["stop"]).output();
        let _ = self.annal(&["delete", "--yes"]).output();
        if let Some(socket) = &self.socket {
            for extension in ["sock", "lock", "log"] {
                let _ = std::fs::remove_file(socket.with_extension(extension));
            }
        }
    }
}

/// Issue 29's acceptance, as stated: launched by the official MCP Python SDK with its default
/// environment (`env=None`), after `annal --namespace N enable` in a shell that has only `HOME`
/// and `XDG_RUNTIME_DIR=/run/user/UID`, `annal --namespace N mcp --actor A --manifest M` serves
/// both tools on that store (what was captured into it is what history_query returns).
#[test]
fn the_sdk_default_environment_serves_the_store_a_bare_shell_enabled() {
    const TEST: &str = "the_sdk_default_environment_serves_the_store_a_bare_shell_enabled";
    let Some(python) = python(TEST) else {
        return;
    };
    let runtime = match login_runtime_dir() {
        Ok(dir) => dir,
        Err(why) => {
            assert!(
                !required(),
                "{TEST}: {why}; .ci/test creates it as a login session would (owned by the \
                 user, 0700)"
            );
            eprintln!("{TEST}: SKIPPED: {why}");
            return;
        }
    };
    // A temporary HOME and a unique namespace (the sandbox's; its own XDG directories are not
    // used here).
    let sandbox = Sandbox::new();
    let mut store = BareStore {
        home: sandbox.path("home"),
        runtime: runtime.clone(),
        namespace: sandbox.namespace.clone(),
        socket: None,
    };
    store.ok(&["enable"]);
    let socket = PathBuf::from(store.ok(&["socket"]).trim());
    store.socket = Some(socket.clone());
    assert!(
        socket.starts_with(runtime.join("annal")),
        "{}",
        socket.display()
    );
    assert!(
        UnixStream::connect(&socket).is_ok(),
        "enable left no daemon"
    );
    capture(&socket);
    let manifest = sandbox.path("agent-m.yaml");
    let manifest_arg = manifest.to_str().unwrap();
    store.ok(&[
        "mcp-config",
        "--actor",
        "agent-m",
        "--write-manifest",
        manifest_arg,
    ]);

    let args: Vec<String> = [
        "--namespace",
        &store.namespace,
        "mcp",
        "--actor",
        "agent-m",
        "--manifest",
        manifest_arg,
    ]
    .iter()
    .map(|arg| (*arg).to_owned())
    .collect();
    let child = sdk_client(&python, &store.home, env!("CARGO_BIN_EXE_annal"), &args)
        .spawn()
        .unwrap();
    let report = report(child);
    assert_eq!(report["server_env"], "default", "{report}");
    assert_tools(&report);
    assert_eq!(report["status"]["is_error"], false, "{report}");
    assert_eq!(
        report["status"]["structured_content"]["enabled"], true,
        "{report}"
    );
    assert_eq!(report["query"]["is_error"], false, "{report}");
    assert_eq!(
        captured_events(&report["query"]["structured_content"]),
        CAPTURED_ACTIONS,
        "{report}"
    );
    // The SDK's server read through the gate of that same store: its audit has the calls.
    let audit: Value =
        serde_json::from_str(&store.ok(&["audit", "--actor", "agent-m", "--json"])).unwrap();
    let operations: Vec<&str> = audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["operation"].as_str().unwrap())
        .collect();
    assert_eq!(operations, ["status", "query"], "{audit}");
}
