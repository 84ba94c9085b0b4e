//! The client checks its daemon before it sends anything (issue 27, finding 2), and `annal mcp`
//! starts under a host's bare launch environment (issue 29).
//!
//! A fake daemon listens at the socket path annal predicts for a store, where a hostile process
//! would put one: in a directory others may write to, in a directory another user owns, or
//! served by a process of another uid. `annal status`, `annal revoke` and `annal mcp` must each
//! refuse with an error naming the path and the fix, and the fake must receive zero bytes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use support::{ANSWER_TIMEOUT_SECS, Mcp, Sandbox, as_uid};

/// The uid the other-user cases run as (`nobody` on most systems).
const OTHER_UID: u32 = 65_534;

/// How long the fake daemon waits for more bytes on a connection before it closes it, in
/// milliseconds (an old client waits for a reply that never comes; this ends its wait).
const FAKE_READ_WINDOW_MS: u64 = 1_000;

/// The socket path annal derives for `store`: what any process of any user can compute.
fn predicted_socket(run: &Path, store: &Path) -> PathBuf {
    let hash = blake3::hash(store.as_os_str().as_encoded_bytes()).to_hex();
    run.join("annal").join(format!("{}.sock", &hash[..16]))
}

/// A process at a socket path that records what it is sent and answers nothing.
struct FakeDaemon {
    connections: Arc<AtomicUsize>,
    bytes: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl FakeDaemon {
    fn serve(listener: UnixListener) -> Self {
        listener.set_nonblocking(true).unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        let bytes = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (connections, bytes, stop) = (
                Arc::clone(&connections),
                Arc::clone(&bytes),
                Arc::clone(&stop),
            );
            std::thread::spawn(move || {
                while !stop.load(Ordering::Acquire) {
                    let Ok((mut stream, _)) = listener.accept() else {
                        std::thread::sleep(Duration::from_millis(10));
                        continue;
                    };
                    connections.fetch_add(1, Ordering::AcqRel);
                    stream.set_nonblocking(false).unwrap();
                    stream
                        .set_read_timeout(Some(Duration::from_millis(FAKE_READ_WINDOW_MS)))
                        .unwrap();
                    let mut buffer = [0u8; 64 * 1024];
                    while let Ok(n) = stream.read(&mut buffer) {
                        if n == 0 {
                            break;
                        }
                        bytes.fetch_add(n, Ordering::AcqRel);
                    }
                }
            })
        };
        Self {
            connections,
            bytes,
            stop,
            thread,
        }
    }

    /// Bytes received so far.
    fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Acquire)
    }

    /// Stops it: (connections accepted, bytes received).
    fn finish(self) -> (usize, usize) {
        self.stop.store(true, Ordering::Release);
        self.thread.join().unwrap();
        (
            self.connections.load(Ordering::Acquire),
            self.bytes.load(Ordering::Acquire),
        )
    }
}

/// A bounded-mode manifest for both tools.
fn manifest(sandbox: &Sandbox) -> String {
    let path = sandbox.path("manifest.yaml");
    std::fs::write(
        &path,
        "version: 3\nexpires_after: 1h\nidle_timeout: 10m\nresources:\n  computer_history:\n    \
         operations:\n      - status\n      - query\nallow:\n  tools:\n    - history_status\n    \
         - history_query\n",
    )
    .unwrap();
    path.to_str().unwrap().to_owned()
}

/// Runs `command` with `input` on stdin (then closed) and waits for it to exit.
fn run_with_input(mut command: Command, input: &str) -> std::process::Output {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    // The server may exit before it reads everything (a refused manifest): a closed pipe is fine.
    let _ = stdin.write_all(input.as_bytes());
    drop(stdin);
    let deadline = Instant::now() + Duration::from_secs(ANSWER_TIMEOUT_SECS);
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "annal did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// The MCP session a host would open: initialize, list, call.
fn mcp_session() -> String {
    [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "annal-e2e", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}),
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
            "params": {"name": "history_query", "arguments": {"limit": 5}}}),
    ]
    .iter()
    .map(|m| format!("{m}\n"))
    .collect()
}

/// Drives `annal status`, `annal revoke` and `annal mcp` (with and without a manifest) at a
/// fake daemon of `sandbox`'s predicted socket, and asserts that none of them sent it a byte
/// and that each owner command failed with a message holding `expected`.
fn nothing_reaches(sandbox: &Sandbox, fake: FakeDaemon, expected: &str) {
    for args in [&["status", "--json"][..], &["revoke", "agent-x"]] {
        let output = sandbox.run(args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(
            fake.bytes(),
            0,
            "{args:?} sent the fake daemon bytes: {stderr}"
        );
        assert_eq!(output.status.code(), Some(3), "{args:?}: {stderr}");
        assert!(output.stdout.is_empty(), "{args:?} printed a result");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert!(!stderr.contains("revoked every grant"), "{stderr}");
    }
    let manifest = manifest(sandbox);
    let refused = run_with_input(
        sandbox.annal(&["mcp", "--actor", "agent-x", "--manifest", &manifest]),
        &mcp_session(),
    );
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(
        fake.bytes(),
        0,
        "mcp --manifest sent the fake daemon bytes: {stderr}"
    );
    assert_eq!(refused.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains(expected), "{stderr}");
    let served = run_with_input(
        sandbox.annal(&["mcp", "--actor", "agent-x"]),
        &mcp_session(),
    );
    let stdout = String::from_utf8_lossy(&served.stdout);
    assert_eq!(fake.bytes(), 0, "mcp sent the fake daemon bytes: {stdout}");
    let replies: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let reply = |id: u64| replies.iter().find(|r| r["id"] == id).cloned().unwrap();
    assert_eq!(
        reply(1)["result"]["serverInfo"]["name"],
        "annal",
        "{stdout}"
    );
    assert_eq!(
        reply(2)["result"]["tools"],
        json!([]),
        "fail closed: {stdout}"
    );
    assert_eq!(reply(3)["result"]["isError"], true, "{stdout}");
    assert_eq!(
        reply(3)["result"]["structuredContent"]["code"],
        "history_storage_unavailable",
        "{stdout}"
    );
    let (_connections, bytes) = fake.finish();
    assert_eq!(bytes, 0, "the fake daemon received {bytes} bytes");
}

#[test]
fn a_socket_in_a_directory_others_may_write_to_receives_nothing() {
    let sandbox = Sandbox::new();
    let store = sandbox.path("state").join("annal").join(&sandbox.namespace);
    let socket = predicted_socket(&sandbox.path("run"), &store);
    let dir = socket.parent().unwrap();
    std::fs::create_dir(dir).unwrap();
    // A sticky world-writable directory, as a shared /tmp-like XDG_RUNTIME_DIR would be.
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let fake = FakeDaemon::serve(UnixListener::bind(&socket).unwrap());
    nothing_reaches(&sandbox, fake, &format!("chmod 700 {}", dir.display()));
    // annal never loosened, tightened or took over the directory behind its owner.
    let mode = std::fs::metadata(dir).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o1777);
}

/// The Python example client (`examples/python/annal_client.py`) applies the same checks
/// before it sends: run against a fake daemon in a directory others may write to, and (as root)
/// against a socket served by another uid, it exits with the path and the fix, and the fake
/// receives nothing.
#[test]
fn the_python_example_client_sends_nothing_to_an_untrusted_socket() {
    if Command::new("python3").arg("--version").output().is_err() {
        println!("python example: SKIPPED: no python3 on PATH");
        return;
    }
    let example = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/python/annal_client.py"
    );
    let run = |socket: &Path, fake: FakeDaemon, expected: &str| {
        let output = Command::new("python3")
            .arg(example)
            .arg(socket)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{stderr}");
        assert!(stderr.contains(expected), "{stderr}");
        let (_connections, bytes) = fake.finish();
        assert_eq!(bytes, 0, "the fake daemon received {bytes} bytes: {stderr}");
    };
    let scratch = tempfile::tempdir().unwrap();
    let open_dir = scratch.path().join("open");
    std::fs::create_dir(&open_dir).unwrap();
    std::fs::set_permissions(&open_dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let socket = open_dir.join("fake.sock");
    let fake = FakeDaemon::serve(UnixListener::bind(&socket).unwrap());
    run(&socket, fake, &format!("chmod 700 {}", open_dir.display()));

    if rustix::process::geteuid().as_raw() != 0 {
        println!("python example, other uid: SKIPPED: not root here");
        return;
    }
    let private = scratch.path().join("private");
    std::fs::create_dir(&private).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    let shared = tempfile::tempdir().unwrap();
    std::fs::set_permissions(shared.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let bound = shared.path().join("fake.sock");
    let listener = {
        let bound = bound.clone();
        as_uid(OTHER_UID, move || UnixListener::bind(&bound).unwrap())
    };
    let socket = private.join("fake.sock");
    std::fs::rename(&bound, &socket).unwrap();
    let fake = FakeDaemon::serve(listener);
    run(&socket, fake, &format!("served by uid {OTHER_UID}"));
}

#[test]
fn a_socket_of_another_uid_receives_nothing() {
    if rustix::process::geteuid().as_raw() != 0 {
        report("SKIPPED: not root here, so no process of another uid can be made");
        return;
    }
    let sandbox = Sandbox::new();
    let store = sandbox.path("state").join("annal").join(&sandbox.namespace);
    let socket = predicted_socket(&sandbox.path("run"), &store);
    let dir = socket.parent().unwrap().to_path_buf();
    // 1. A private directory of this user's (0700), the socket served by another uid: the
    //    peer's SO_PEERCRED uid gives it away. The other uid binds and listens in a scratch
    //    directory it may write to; the socket is then moved into place (a socket keeps its
    //    listener's credentials wherever its name goes).
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let scratch = tempfile::tempdir().unwrap();
    std::fs::set_permissions(scratch.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let bound = scratch.path().join("fake.sock");
    let listener = {
        let bound = bound.clone();
        as_uid(OTHER_UID, move || UnixListener::bind(&bound).unwrap())
    };
    std::fs::rename(&bound, &socket).unwrap();
    let fake = FakeDaemon::serve(listener);
    nothing_reaches(&sandbox, fake, &format!("served by uid {OTHER_UID}"));

    // 2. The socket directory itself is another user's (planted in a shared runtime
    //    directory before annal made its own).
    let _ = std::fs::remove_file(&socket);
    std::os::unix::fs::chown(&dir, Some(OTHER_UID), Some(OTHER_UID)).unwrap();
    let fake = FakeDaemon::serve(UnixListener::bind(&socket).unwrap());
    nothing_reaches(&sandbox, fake, &format!("belongs to uid {OTHER_UID}"));
    report("RAN: a socket of uid 65534, and a socket directory of uid 65534, received nothing");
}

/// Says how the other-uid case went: on stdout, and (for `.ci/test`, which reports it) in
/// `$ANNAL_CI_REPORT_DIR/client-peer-uid` when that is set.
fn report(line: &str) {
    println!("client-peer-uid: {line}");
    if let Some(dir) = std::env::var_os("ANNAL_CI_REPORT_DIR") {
        std::fs::write(Path::new(&dir).join("client-peer-uid"), line).unwrap();
    }
}

/// The six variables the official MCP Python SDK passes to a stdio server by default.
fn mcp_host_env(command: &mut Command, home: &Path) {
    command
        .env_clear()
        .env("HOME", home)
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("USER", "annal-e2e")
        .env("LOGNAME", "annal-e2e")
        .env("SHELL", "/bin/sh")
        .env("TERM", "dumb");
}

/// `annal --namespace N <args>` with only HOME set, as the owner's shell might have.
fn owner(sandbox: &Sandbox, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_annal"));
    command
        .env_clear()
        .env("HOME", sandbox.path("home"))
        .args(["--namespace", &sandbox.namespace])
        .args(args)
        .stdin(Stdio::null());
    command
}

fn owner_ok(sandbox: &Sandbox, args: &[&str]) -> String {
    let output = owner(sandbox, args).output().unwrap();
    assert!(
        output.status.success(),
        "annal {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// Stops the HOME-only store's daemon and destroys its key when the test ends.
struct OwnerStore<'a>(&'a Sandbox);

impl Drop for OwnerStore<'_> {
    fn drop(&mut self) {
        let _ = owner(self.0, &["delete", "--yes"]).output();
    }
}

/// Issue 29: the server an MCP host starts with its bare environment (no XDG_RUNTIME_DIR)
/// reaches the daemon and store the owner enabled from a shell that had only HOME.
#[test]
fn annal_mcp_serves_under_an_mcp_hosts_bare_environment() {
    let sandbox = Sandbox::new();
    let _store = OwnerStore(&sandbox);
    owner_ok(&sandbox, &["enable"]);
    owner_ok(&sandbox, &["grant", "agent-m", "status"]);
    // Both resolve the same socket: the owner's shell and the host's environment.
    let from_shell = owner_ok(&sandbox, &["socket"]);
    let mut host = Command::new(env!("CARGO_BIN_EXE_annal"));
    mcp_host_env(&mut host, &sandbox.path("home"));
    let from_host = host
        .args(["--namespace", &sandbox.namespace, "socket"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8(from_host.stdout).unwrap(), from_shell);
    let socket = PathBuf::from(from_shell.trim());
    assert!(socket.exists(), "{}", socket.display());

    let mut command = Command::new(env!("CARGO_BIN_EXE_annal"));
    mcp_host_env(&mut command, &sandbox.path("home"));
    command.args([
        "--namespace",
        &sandbox.namespace,
        "mcp",
        "--actor",
        "agent-m",
    ]);
    let mut agent = Mcp::start_command(command);
    assert_eq!(agent.tool_names(), ["history_status"]);
    assert_eq!(agent.answered("history_status", json!({}))["enabled"], true);

    // The daemon stops; the bridge's next call starts one, and the owner's shell reaches that
    // same daemon (a second one could not take the store's lock): its grant shows at once.
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&owner_ok(&sandbox, &["stop", "--json"]))
            .unwrap()["stopped"],
        true
    );
    assert_eq!(agent.answered("history_status", json!({}))["enabled"], true);
    owner_ok(&sandbox, &["grant", "agent-m", "query"]);
    let mut names = agent.tool_names();
    names.sort_unstable();
    assert_eq!(names, ["history_query", "history_status"]);
}

/// Runs `f` with a `DaemonClient` connected to the sandbox's daemon, on a runtime of its own.
fn with_client<F: std::future::Future<Output = ()>>(
    sandbox: &Sandbox,
    f: impl FnOnce(annal_actors::daemon::DaemonClient) -> F,
) {
    let socket = sandbox.socket();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let client = annal_actors::daemon::DaemonClient::connect(&socket)
            .await
            .unwrap();
        f(client).await;
    });
}

/// Every client of the socket: a request too large for one frame is refused at once, nothing
/// is written, and the same connection answers the next request (it waited forever before).
#[test]
fn the_client_refuses_an_oversized_request_at_once_and_stays_usable() {
    use annal_actors::daemon::{ClientError, MAX_FRAME_BYTES, Request};
    let sandbox = Sandbox::new();
    sandbox.ok(&["enable"]);
    with_client(&sandbox, |mut client| async move {
        let mut arguments = serde_json::Map::new();
        arguments.insert("session_id".into(), json!("x".repeat(MAX_FRAME_BYTES)));
        let oversized = tokio::time::timeout(
            Duration::from_secs(ANSWER_TIMEOUT_SECS),
            client.request(&Request::query(arguments)),
        )
        .await
        .expect("an oversized request was waited on");
        assert!(
            matches!(oversized, Err(ClientError::RequestTooLarge { bytes }) if bytes > MAX_FRAME_BYTES),
            "{oversized:?}"
        );
        let status = client.request(&Request::Status {}).await.unwrap();
        assert_eq!(status["status"]["enabled"], true);
    });
}

/// A client may write its next request before it reads the reply to the last one (`annal
/// report` asks for its next page that way): the replies come back in the order the requests
/// were written, each read as the type its request answers. A typed read of a reply that is
/// not that type is `BadReply`, never a wrong value.
#[test]
fn pipelined_requests_are_answered_in_order_and_read_typed() {
    use annal_actors::daemon::{ClientError, Request, ToolReply};
    #[derive(Debug, serde::Deserialize)]
    struct Page {
        events: Vec<annal_schema::Event>,
    }
    let sandbox = Sandbox::new();
    sandbox.ok(&["enable"]);
    sandbox.ok(&["flush"]);
    with_client(&sandbox, |mut client| async move {
        let query = |limit: u64| {
            let mut arguments = serde_json::Map::new();
            arguments.insert("limit".into(), json!(limit));
            Request::query(arguments)
        };
        client.send(&query(1)).await.unwrap();
        client.send(&Request::Hello {}).await.unwrap();
        client.send(&query(0)).await.unwrap();
        let page = client.receive_as::<ToolReply<Page>>().await.unwrap();
        let ToolReply::Answer(page) = page else {
            panic!("the first page was refused: {page:?}");
        };
        assert_eq!(page.events.len(), 1, "{page:?}");
        let hello = client.receive_as::<serde_json::Value>().await.unwrap();
        assert!(hello["protocol"].is_u64(), "{hello}");
        let refused = client.receive_as::<ToolReply<Page>>().await.unwrap();
        assert!(
            matches!(&refused, ToolReply::Refusal(r) if r.code() == "invalid_history_query"),
            "{refused:?}"
        );
        // A status is not a page: read as one, it is a bad reply.
        client.send(&Request::Status {}).await.unwrap();
        let wrong = client.receive_as::<ToolReply<Page>>().await;
        assert!(matches!(wrong, Err(ClientError::BadReply)), "{wrong:?}");
    });
}

/// Every wait on the daemon has a deadline, and the bridge exits once stdin closes even with
/// a call in flight: against a daemon of this user that accepts and never answers (a stuck
/// daemon), `tools/list` answers (fail closed: no tools) once `REPLY_DEADLINE_MS` passed, and
/// a bridge whose stdin closes during a stuck call exits. Before, both waited forever.
#[test]
fn a_daemon_that_never_answers_costs_one_deadline_and_the_bridge_still_exits() {
    use annal_actors::daemon::client::REPLY_DEADLINE_MS;
    /// Longest the bridge may take to exit once stdin closed with a call stuck: rmcp's drain
    /// (5 s; a daemon link is then let go at once), plus a margin for a loaded CI.
    const EXIT_DEADLINE_MS: u64 = 5_000 + 15_000;
    let sandbox = Sandbox::new();
    let store = sandbox.path("state").join("annal").join(&sandbox.namespace);
    let socket = predicted_socket(&sandbox.path("run"), &store);
    std::fs::create_dir(socket.parent().unwrap()).unwrap();
    std::fs::set_permissions(
        socket.parent().unwrap(),
        std::fs::Permissions::from_mode(0o700),
    )
    .unwrap();
    let listener = UnixListener::bind(&socket).unwrap();
    listener.set_nonblocking(true).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let silent = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut held = Vec::new();
            while !stop.load(Ordering::Acquire) {
                match listener.accept() {
                    Ok((stream, _)) => held.push(stream),
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        })
    };
    let mut agent = Mcp::start(&sandbox, "agent-s", &[]);
    let started = Instant::now();
    assert!(agent.tools().is_empty(), "fail closed");
    assert!(
        started.elapsed() >= Duration::from_millis(REPLY_DEADLINE_MS),
        "answered before the deadline: it cannot have waited for the daemon"
    );
    // A call is stuck on the silent daemon when stdin closes.
    agent.send_call("history_status", json!({}));
    let status = agent.close_input(Duration::from_millis(EXIT_DEADLINE_MS));
    assert!(
        status.is_some(),
        "annal mcp still ran {EXIT_DEADLINE_MS} ms after its stdin closed"
    );
    stop.store(true, Ordering::Release);
    silent.join().unwrap();
}
