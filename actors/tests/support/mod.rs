//! What the end-to-end tests share: a bare environment for `annal` subprocesses, an MCP client
//! over a real `annal mcp` child, and a raw daemon-socket client.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// Longest any single answer from a child may take before the test fails (no hang).
pub const ANSWER_TIMEOUT_SECS: u64 = 30;

/// The Python (with the `mcp` SDK of `examples/host/requirements.txt`) that runs the scripted
/// host and the SDK client.
pub const PYTHON_ENV: &str = "ANNAL_HOST_PYTHON";

/// Set to `1` by `.ci/test`: a missing host Python (or login runtime directory) fails instead
/// of skipping.
pub const REQUIRE_ENVS: [&str; 2] = ["ANNAL_REQUIRE_HOST_PYTHON", "ANNAL_REQUIRE_REAL_KEY_STORES"];

/// Whether the environment variable `name` is `1`.
pub fn env_is_one(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| v == "1")
}

/// Whether this run must fail rather than skip what it cannot do here (CI).
pub fn required() -> bool {
    REQUIRE_ENVS.iter().any(|name| env_is_one(name))
}

/// The host's Python, or `None` (the test prints SKIPPED) when there is none outside CI.
pub fn python(test: &str) -> Option<PathBuf> {
    let found = std::env::var_os(PYTHON_ENV)
        .map(PathBuf::from)
        .filter(|python| {
            Command::new(python)
                .args(["-c", "import mcp"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        });
    if found.is_none() {
        assert!(
            !required(),
            "{test}: {PYTHON_ENV} must name a Python with the MCP SDK (examples/host/\
             requirements.txt); .ci/test makes one"
        );
        eprintln!(
            "{test}: SKIPPED: set {PYTHON_ENV} to a Python with examples/host/requirements.txt"
        );
    }
    found
}

static NEXT_SANDBOX: AtomicUsize = AtomicUsize::new(0);

/// A temporary HOME, XDG_STATE_HOME and XDG_RUNTIME_DIR, and a namespace of its own (its key
/// is destroyed when the sandbox is dropped).
pub struct Sandbox {
    /// Holds every directory; removed on drop.
    pub root: tempfile::TempDir,
    /// The namespace (unique per sandbox: keys live in the user's kernel keyring).
    pub namespace: String,
}

impl Sandbox {
    pub fn new() -> Self {
        let root = tempfile::tempdir().unwrap();
        for dir in ["home", "state", "run"] {
            std::fs::create_dir(root.path().join(dir)).unwrap();
        }
        let mut random = [0u8; 4];
        getrandom_fill(&mut random);
        let namespace = format!(
            "e2e-{}-{}-{}",
            std::process::id(),
            NEXT_SANDBOX.fetch_add(1, Ordering::Relaxed),
            random
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        );
        Self { root, namespace }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.root.path().join(name)
    }

    /// `annal --namespace N <args>` in a bare environment: only HOME, XDG_STATE_HOME and
    /// XDG_RUNTIME_DIR (no PATH, no D-Bus).
    pub fn annal(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_annal"));
        command
            .env_clear()
            .env("HOME", self.path("home"))
            .env("XDG_STATE_HOME", self.path("state"))
            .env("XDG_RUNTIME_DIR", self.path("run"))
            .args(["--namespace", &self.namespace])
            .args(args)
            .stdin(Stdio::null());
        command
    }

    /// Runs `annal <args>` and returns its output.
    pub fn run(&self, args: &[&str]) -> Output {
        self.annal(args).output().unwrap()
    }

    /// Runs `annal <args>`, asserts success, and returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let output = self.run(args);
        assert!(
            output.status.success(),
            "annal {args:?}: {}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap()
    }

    /// Runs `annal <args> --json`, asserts success, and parses stdout.
    pub fn json(&self, args: &[&str]) -> Value {
        let mut args = args.to_vec();
        args.push("--json");
        serde_json::from_str(self.ok(&args).trim()).unwrap()
    }

    /// The daemon's socket (the only `.sock` in the runtime directory), once one was bound.
    pub fn bound_socket(&self) -> Option<PathBuf> {
        std::fs::read_dir(self.path("run").join("annal"))
            .ok()?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .find(|p| p.extension().is_some_and(|x| x == "sock"))
    }

    /// The daemon's socket; a daemon must have bound it.
    pub fn socket(&self) -> PathBuf {
        self.bound_socket().expect("no daemon socket")
    }

    /// Waits until a daemon answers on the socket (a killed one's socket file may linger until
    /// the next daemon replaces it), and connects.
    pub fn connect_when_up(&self) -> Raw {
        let deadline = Instant::now() + Duration::from_secs(ANSWER_TIMEOUT_SECS);
        loop {
            if let Some(socket) = self.bound_socket()
                && UnixStream::connect(&socket).is_ok()
            {
                return Raw::connect(&socket);
            }
            assert!(Instant::now() < deadline, "no daemon answered");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Every event the owner can read (newest 200), through `annal query --json`.
    pub fn events(&self) -> Vec<Value> {
        let answer = self.json(&["query", "--limit", "200"]);
        answer["events"].as_array().unwrap().clone()
    }

    /// How many `access` events with `operation` the store holds.
    pub fn access_events(&self, operation: &str) -> usize {
        self.events()
            .iter()
            .filter(|e| {
                e["data"]["payload"]["kind"] == "access"
                    && e["data"]["payload"]["operation"] == operation
            })
            .count()
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        // Stop the daemon and destroy the namespace's key (the kernel keyring outlives us).
        let _ = self.run(&["delete", "--yes"]);
    }
}

fn getrandom_fill(out: &mut [u8]) {
    let mut file = std::fs::File::open("/dev/urandom").unwrap();
    file.read_exact(out).unwrap();
}

/// A running `annal mcp` child, spoken to over stdio with JSON-RPC.
pub struct Mcp {
    child: Child,
    /// `None` once [`Mcp::close_input`] ended the server's stdin.
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    next_id: u64,
    /// The `initialize` answer.
    pub init: Value,
    /// Notifications that arrived while an answer was awaited, oldest first.
    notifications: Vec<Value>,
}

impl Mcp {
    /// Starts `annal mcp --actor ACTOR [extra]` and initializes it.
    pub fn start(sandbox: &Sandbox, actor: &str, extra: &[&str]) -> Self {
        let mut args = vec!["mcp", "--actor", actor];
        args.extend_from_slice(extra);
        Self::start_command(sandbox.annal(&args))
    }

    /// Starts `command` (an `annal ... mcp ...` command line) and initializes it.
    pub fn start_command(mut command: Command) -> Self {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut mcp = Self {
            child,
            stdin: Some(stdin),
            lines,
            next_id: 1,
            init: Value::Null,
            notifications: Vec::new(),
        };
        let init = mcp.rpc(
            "initialize",
            json!({
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "annal-e2e", "version": "1"}
            }),
        );
        assert_eq!(init["result"]["serverInfo"]["name"], "annal", "{init}");
        mcp.init = init;
        mcp.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        mcp
    }

    fn send(&mut self, message: &Value) {
        let stdin = self.stdin.as_mut().expect("stdin was closed");
        writeln!(stdin, "{message}").unwrap();
        stdin.flush().unwrap();
    }

    /// Closes the server's stdin and waits up to `deadline` for it to exit: its exit status,
    /// or `None` if it was still running then.
    pub fn close_input(&mut self, deadline: Duration) -> Option<std::process::ExitStatus> {
        drop(self.stdin.take());
        let until = Instant::now() + deadline;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            if Instant::now() >= until {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// One request; returns the whole response object.
    pub fn rpc(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        let deadline = Instant::now() + Duration::from_secs(ANSWER_TIMEOUT_SECS);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no answer to {method} within {ANSWER_TIMEOUT_SECS} s"));
            let message: Value = serde_json::from_str(&line).unwrap();
            if message["id"] == id {
                return message;
            }
            if message.get("id").is_none() {
                self.notifications.push(message);
            }
        }
    }

    /// Waits up to `deadline` for a notification named `method` (one that arrived earlier
    /// counts, and is taken); whether it came.
    pub fn wait_notification(&mut self, method: &str, deadline: Duration) -> bool {
        if let Some(at) = self
            .notifications
            .iter()
            .position(|n| n["method"] == method)
        {
            self.notifications.remove(at);
            return true;
        }
        let until = Instant::now() + deadline;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            let Ok(line) = self.lines.recv_timeout(left) else {
                return false;
            };
            let message: Value = serde_json::from_str(&line).unwrap();
            if message["method"] == method {
                return true;
            }
            if message.get("id").is_none() {
                self.notifications.push(message);
            }
        }
    }

    /// `tools/list`: the tools' names, with each tool object.
    pub fn tools(&mut self) -> Vec<Value> {
        let answer = self.rpc("tools/list", json!({}));
        answer["result"]["tools"].as_array().unwrap().clone()
    }

    pub fn tool_names(&mut self) -> Vec<String> {
        self.tools()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect()
    }

    /// Sends a `tools/call` without waiting for its answer.
    pub fn send_call(&mut self, tool: &str, arguments: Value) {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments}}));
    }

    /// `tools/call`: the result object (`structuredContent`, `content`, `isError`).
    pub fn call(&mut self, tool: &str, arguments: Value) -> Value {
        let answer = self.rpc("tools/call", json!({"name": tool, "arguments": arguments}));
        answer["result"].clone()
    }

    /// The fixed code of a failed call (asserting it failed, and that text and structure agree).
    pub fn refused(&mut self, tool: &str, arguments: Value) -> String {
        let result = self.call(tool, arguments);
        assert_eq!(result["isError"], true, "{result}");
        let text: Value =
            serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap();
        assert_eq!(text, result["structuredContent"], "{result}");
        let object = result["structuredContent"].as_object().unwrap();
        assert_eq!(
            object.len(),
            2,
            "a failure carries its code and message: {result}"
        );
        let code = object["code"].as_str().unwrap();
        // The message is the code's fixed sentence: nothing the caller sent.
        let fixed = annal_engine::policy::Refusal::from_code(code)
            .map(|refusal| refusal.message())
            .unwrap_or_else(|| panic!("{code} is not one of annal's codes"));
        assert_eq!(object["message"], fixed, "{result}");
        code.to_owned()
    }

    /// The structured content of a successful call.
    pub fn answered(&mut self, tool: &str, arguments: Value) -> Value {
        let result = self.call(tool, arguments);
        assert_eq!(result["isError"], false, "{result}");
        let text: Value =
            serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap();
        assert_eq!(text, result["structuredContent"], "{result}");
        result["structuredContent"].clone()
    }
}

impl Drop for Mcp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A raw client of the daemon's socket: frames written and read by hand.
pub struct Raw {
    pub stream: UnixStream,
}

impl Raw {
    pub fn connect(socket: &Path) -> Self {
        let stream = UnixStream::connect(socket).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(ANSWER_TIMEOUT_SECS)))
            .unwrap();
        Self { stream }
    }

    pub fn send_bytes(&mut self, body: &[u8]) {
        let len = u32::try_from(body.len()).unwrap().to_be_bytes();
        self.stream.write_all(&len).unwrap();
        self.stream.write_all(body).unwrap();
    }

    /// One reply frame, or `None` when the daemon closed the connection.
    pub fn reply(&mut self) -> Option<Value> {
        let mut header = [0u8; 4];
        self.stream.read_exact(&mut header).ok()?;
        let mut body = vec![0u8; u32::from_be_bytes(header) as usize];
        self.stream.read_exact(&mut body).ok()?;
        Some(serde_json::from_slice(&body).unwrap())
    }

    /// Sends `request` and returns the reply.
    pub fn ask(&mut self, request: Value) -> Value {
        self.send_bytes(request.to_string().as_bytes());
        self.reply().expect("the daemon closed the connection")
    }
}

impl Raw {
    /// Captures one action (`start` holds `capability` and optional `application`/`session`)
    /// that completes `confirmed` through the accessibility route; asserts both were answered.
    pub fn action(&mut self, mut start: Value) {
        start["op"] = json!("action_started");
        let started = self.ask(start);
        let action = started["ok"]["action"]
            .as_u64()
            .unwrap_or_else(|| panic!("{started}"));
        let completed = self.ask(json!({
            "op": "action_completed",
            "action": action,
            "outcome": {"effect": "confirmed", "route": "accessibility"}
        }));
        assert!(completed["ok"].is_object(), "{completed}");
    }
}

/// Runs `f` on a thread of its own whose real and effective uid are `uid`, and returns what it
/// returned: a peer of another uid without forking a process (on Linux, credentials are per
/// thread, and rustix changes only the calling thread's). Needs root; the thread ends with `f`.
pub fn as_uid<T: Send + 'static>(uid: u32, f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::spawn(move || {
        let uid = rustix::process::Uid::from_raw(uid);
        rustix::thread::set_thread_res_uid(uid, uid, None::<rustix::process::Uid>).unwrap();
        f()
    })
    .join()
    .unwrap()
}

/// Every regular file below `dir`.
pub fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else if path.is_file() {
            out.push(path);
        }
    }
    out
}

/// Waits until `path` exists (a daemon's socket).
pub fn wait_for(path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(ANSWER_TIMEOUT_SECS);
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// [`annal_engine::test_support::copy_tree`], for tests.
pub fn copy_tree(from: &Path, to: &Path) {
    annal_engine::test_support::copy_tree(from, to).unwrap();
}

/// Sends `count` captures on each of `connections` connections at once, without waiting for
/// each reply (as a busy runtime would): more than the capture queue holds.
pub fn flood(socket: &Path, connections: usize, count: usize) {
    let frame = {
        let body = json!({"op": "action_started", "capability": "input.pointer.click"})
            .to_string()
            .into_bytes();
        let mut frame = u32::try_from(body.len()).unwrap().to_be_bytes().to_vec();
        frame.extend(body);
        frame
    };
    let threads: Vec<_> = (0..connections)
        .map(|_| {
            let socket = socket.to_path_buf();
            let frame = frame.clone();
            std::thread::spawn(move || {
                let mut stream = UnixStream::connect(&socket).unwrap();
                stream
                    .set_read_timeout(Some(Duration::from_secs(ANSWER_TIMEOUT_SECS)))
                    .unwrap();
                let mut reader = stream.try_clone().unwrap();
                let replies = std::thread::spawn(move || {
                    for _ in 0..count {
                        let mut header = [0u8; 4];
                        reader.read_exact(&mut header).unwrap();
                        let mut body = vec![0u8; u32::from_be_bytes(header) as usize];
                        reader.read_exact(&mut body).unwrap();
                    }
                });
                let all: Vec<u8> = frame.repeat(count);
                stream.write_all(&all).unwrap();
                replies.join().unwrap();
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
}
