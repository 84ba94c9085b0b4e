//! The daemon's per-connection bounds, driven over its socket from this process: a peer that
//! holds connections without completing a frame keeps nobody out, a frame has a deadline, a full
//! daemon keeps a slot for its owner and reclaims idle connections, and session labels and open
//! sessions are bounded, so a label flood cannot grow the daemon past the documented memory bound
//! (`docs/reliability.md`).
//!
//! A `harness = false` target: it prints `FIGURE daemon.*` lines. Its cases run one after the
//! other on this one thread, so the daemons it starts inherit no descriptor of another test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use annal_actors::daemon::server::{
    FRAME_READ_DEADLINE_MS, MAX_CONNECTIONS, MAX_OPEN_SESSIONS_PER_CONNECTION,
    MAX_OPEN_SESSIONS_PER_DAEMON, OWNER_RESERVED_CONNECTIONS, RECLAIM_IDLE_AFTER_MS,
    SESSION_LABEL_MAX_BYTES,
};
use serde_json::{Value, json};
use support::{Raw, Sandbox};

/// Stalled connections the first case holds: each sent a frame header and one byte of its body.
const STALLED_CONNECTIONS: usize = 200;

/// Labels of each kind the flood sends.
const FLOOD_LABELS: usize = 512;

/// The size of the flood's oversized labels, in bytes (the adversarial review's).
const OVERSIZED_LABEL_BYTES: usize = 520_000;

/// The daemon's resident memory must stay under this, in bytes (`docs/reliability.md`).
const MAX_RSS_BYTES: u64 = 256 * 1024 * 1024;

/// A foreground `annal serve` child; killed on drop.
struct Daemon(Child);

impl Daemon {
    fn start(sandbox: &Sandbox) -> (Self, PathBuf) {
        let daemon = Self(
            sandbox
                .annal(&["serve"])
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        let deadline = Instant::now() + Duration::from_secs(support::ANSWER_TIMEOUT_SECS);
        loop {
            if let Some(socket) = sandbox.bound_socket() {
                return (daemon, socket);
            }
            assert!(
                Instant::now() < deadline,
                "the daemon never bound its socket"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A field of `/proc/PID/status`, in kB (read in-process: no tool is spawned).
fn proc_status_kb(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn code(reply: &Value) -> &str {
    reply["error"]["code"].as_str().unwrap_or("<no error>")
}

/// A connection that sent a frame header declaring `declared` bytes and one byte of the body,
/// and then nothing.
fn stall(socket: &Path) -> UnixStream {
    let mut stream = UnixStream::connect(socket).unwrap();
    // The daemon may already have closed it (an oldest pending connection): then the write fails.
    let _ = stream.write_all(&[0, 0, 0, 100, b'{']);
    stream
}

/// Captures one action on `raw` and checks the daemon admitted it.
fn capture(raw: &mut Raw, bundle_id: &str) {
    let started = raw.ask(json!({
        "op": "action_started",
        "capability": "input.pointer.click",
        "application": {"bundle_id": bundle_id}
    }));
    assert_eq!(started["ok"]["admission"], "accepted", "{started}");
    let done = raw.ask(json!({
        "op": "action_completed",
        "action": started["ok"]["action"],
        "outcome": {"effect": "confirmed", "route": "accessibility"}
    }));
    assert!(done["ok"].is_object(), "{done}");
}

/// How many completed actions on `bundle_id` the newest `limit` events hold (after a flush).
fn captured(raw: &mut Raw, bundle_id: &str, limit: u64) -> usize {
    assert!(raw.ask(json!({"op": "flush"}))["ok"].is_object());
    let read = raw.ask(json!({"op": "query", "arguments": {"limit": limit}}));
    read["ok"]["answer"]["events"]
        .as_array()
        .unwrap_or_else(|| panic!("{read}"))
        .iter()
        .filter(|e| {
            e["data"]["payload"]["kind"] == "action_completed"
                && e["data"]["application"]["bundle_id"] == bundle_id
        })
        .count()
}

/// 200 stalled connections and a flood of 512 maximal and 512 oversized labels: the owner's
/// `annal status` still answers, capture goes on (on a connection made before the stall and on
/// one made during it), and the daemon's resident memory stays under the documented bound.
fn stalled_connections_and_a_label_flood() {
    let sandbox = Sandbox::new();
    let (daemon, socket) = Daemon::start(&sandbox);
    let mut owner = Raw::connect(&socket);
    assert!(owner.ask(json!({"op": "enable"}))["ok"].is_object());
    let mut driver = Raw::connect(&socket);
    capture(&mut driver, "org.bounds.before");
    let rss_before = proc_status_kb(daemon.pid(), "VmRSS:") * 1024;

    let stalled: Vec<UnixStream> = (0..STALLED_CONNECTIONS).map(|_| stall(&socket)).collect();
    // The owner's CLI, a fresh process and connection, while every stalled one is held.
    let started = Instant::now();
    let status = sandbox.json(&["status"]);
    let status_ms = started.elapsed().as_millis();
    assert_eq!(status["status"]["enabled"], true, "{status}");
    println!("FIGURE daemon.stalled_connections.held {STALLED_CONNECTIONS} connections");
    println!("FIGURE daemon.stalled_connections.status_ms {status_ms} ms");

    // Capture goes on: the driver connected before the stall, and a new one during it.
    for _ in 0..8 {
        capture(&mut driver, "org.bounds.during");
    }
    let started = Instant::now();
    let mut newcomer = Raw::connect(&socket);
    capture(&mut newcomer, "org.bounds.newcomer");
    println!(
        "FIGURE daemon.stalled_connections.new_driver_ms {} ms",
        started.elapsed().as_millis()
    );
    assert_eq!(captured(&mut owner, "org.bounds.during", 50), 8);
    assert_eq!(captured(&mut owner, "org.bounds.newcomer", 50), 1);

    // The flood. Oversized labels: each refused, naming the field and never quoting the label.
    let mut flooder = Raw::connect(&socket);
    let oversized_label = "L".repeat(OVERSIZED_LABEL_BYTES);
    for n in 0..FLOOD_LABELS {
        let label = format!("{n:06}{oversized_label}");
        let reply = flooder.ask(json!({"op": "session_started", "session": label}));
        assert_eq!(code(&reply), "invalid_request", "{reply:.200}");
        let message = reply["error"]["message"].as_str().unwrap();
        assert!(message.contains("\"session\""), "{message}");
        assert!(!message.contains("LLLL"), "the label is never quoted");
    }
    let just_over = "x".repeat(SESSION_LABEL_MAX_BYTES + 1);
    let reply = flooder.ask(json!({"op": "session_started", "session": just_over}));
    assert_eq!(code(&reply), "invalid_request", "{reply}");
    let reply = flooder.ask(json!({"op": "session_started", "session": ""}));
    assert_eq!(code(&reply), "invalid_request", "{reply}");

    // Maximal labels: accepted up to the per-connection bound, then `too_many_open`.
    let mut holders = Vec::new();
    let mut open = 0;
    while open < FLOOD_LABELS {
        let mut holder = Raw::connect(&socket);
        for _ in 0..MAX_OPEN_SESSIONS_PER_CONNECTION.min(FLOOD_LABELS - open) {
            let label = format!("{open:06}{}", "m".repeat(SESSION_LABEL_MAX_BYTES - 6));
            let reply = holder.ask(json!({"op": "session_started", "session": label}));
            assert!(reply["ok"]["admission"].is_string(), "{reply}");
            open += 1;
        }
        holders.push(holder);
    }
    let label = format!("{:06}{}", open, "m".repeat(SESSION_LABEL_MAX_BYTES - 6));
    let reply = holders[0].ask(json!({"op": "session_started", "session": label}));
    assert_eq!(code(&reply), "too_many_open", "{reply}");

    // The daemon-wide bound: more connections open sessions until it is reached.
    'fill: loop {
        let mut holder = Raw::connect(&socket);
        for _ in 0..MAX_OPEN_SESSIONS_PER_CONNECTION {
            let label = format!("{open:06}");
            let reply = holder.ask(json!({"op": "session_started", "session": label}));
            if open == MAX_OPEN_SESSIONS_PER_DAEMON {
                assert_eq!(code(&reply), "too_many_open", "{reply}");
                holders.push(holder);
                break 'fill;
            }
            assert!(reply["ok"]["admission"].is_string(), "{open}: {reply}");
            open += 1;
        }
        holders.push(holder);
    }
    // Ending one session frees a place in the daemon's bound.
    let reply = holders[0].ask(json!({"op": "session_ended", "session": format!("{:06}{}", 0, "m".repeat(SESSION_LABEL_MAX_BYTES - 6))}));
    assert!(reply["ok"].is_object(), "{reply}");
    let reply = holders[0].ask(json!({"op": "session_started", "session": "again"}));
    assert!(reply["ok"]["admission"].is_string(), "{reply}");

    // Still answering, still capturing (once the flood's session events are drained: the
    // capture queue may have dropped some of them), and within the memory bound.
    assert!(owner.ask(json!({"op": "flush"}))["ok"].is_object());
    // With the open sessions held and 200 freshly stalled connections again.
    let stalled_again: Vec<UnixStream> = (0..STALLED_CONNECTIONS).map(|_| stall(&socket)).collect();
    let started = Instant::now();
    let status = sandbox.json(&["status"]);
    println!(
        "FIGURE daemon.label_flood.status_ms {} ms",
        started.elapsed().as_millis()
    );
    assert_eq!(status["status"]["enabled"], true, "{status}");
    capture(&mut driver, "org.bounds.after");
    assert_eq!(captured(&mut owner, "org.bounds.after", 10), 1);
    let rss_after = proc_status_kb(daemon.pid(), "VmRSS:") * 1024;
    let rss_peak = proc_status_kb(daemon.pid(), "VmHWM:") * 1024;
    println!(
        "FIGURE daemon.label_flood.labels {} labels",
        2 * FLOOD_LABELS
    );
    println!("FIGURE daemon.label_flood.rss_before_bytes {rss_before} bytes");
    println!("FIGURE daemon.label_flood.rss_after_bytes {rss_after} bytes");
    println!("FIGURE daemon.label_flood.rss_peak_bytes {rss_peak} bytes");
    assert!(rss_before > 0 && rss_after > 0, "VmRSS was not read");
    assert!(
        rss_peak < MAX_RSS_BYTES,
        "the daemon's peak RSS {rss_peak} is over {MAX_RSS_BYTES}"
    );
    drop(stalled);
    drop(stalled_again);
    drop(holders);
    println!("daemon_bounds: stalled connections and a label flood: ok");
}

/// A frame has a deadline: a served connection that begins a frame and stops, and a new one
/// that sends nothing, are closed after `FRAME_READ_DEADLINE_MS`; a served connection idle
/// between frames for longer is kept.
fn a_frame_has_a_deadline_and_an_idle_connection_is_kept() {
    let sandbox = Sandbox::new();
    let (_daemon, socket) = Daemon::start(&sandbox);
    let mut idle = Raw::connect(&socket);
    assert!(idle.ask(json!({"op": "status"}))["ok"].is_object());
    let mut midway = Raw::connect(&socket);
    assert!(midway.ask(json!({"op": "hello"}))["ok"].is_object());
    let mut silent = Raw::connect(&socket);

    let started = Instant::now();
    midway.stream.write_all(&[0, 0, 0, 100, b'{']).unwrap();
    assert!(
        midway.reply().is_none(),
        "a frame begun and never finished closes the connection"
    );
    let midway_ms = started.elapsed().as_millis();
    assert!(
        silent.reply().is_none(),
        "a connection that never sends a frame is closed"
    );
    // Closed only once the deadline passed (the daemon read the byte after it was sent), and
    // well before the read timeout of `Raw` (which would have ended `reply` too).
    assert!(
        midway_ms >= u128::from(FRAME_READ_DEADLINE_MS),
        "{midway_ms} ms"
    );
    assert!(
        midway_ms < u128::from(support::ANSWER_TIMEOUT_SECS) * 1_000,
        "{midway_ms} ms"
    );
    println!("FIGURE daemon.frame_deadline.closed_after_ms {midway_ms} ms");
    // The idle connection waited as long, with no frame begun: it is still served.
    assert_eq!(
        idle.ask(json!({"op": "status"}))["ok"]["status"]["enabled"],
        false
    );
    println!("daemon_bounds: a frame has a deadline, an idle connection is kept: ok");
}

/// How many of `others` and `owners` the daemon has closed, once at least `expected` are (or
/// the answer timeout passed).
fn wait_closed(others: &mut [Raw], owners: &mut [Raw], expected: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(support::ANSWER_TIMEOUT_SECS);
    loop {
        let mut closed = 0;
        for raw in others.iter_mut().chain(owners.iter_mut()) {
            raw.stream.set_nonblocking(true).unwrap();
            let mut byte = [0u8; 1];
            if matches!(std::io::Read::read(&mut raw.stream, &mut byte), Ok(0)) {
                closed += 1;
            }
            raw.stream.set_nonblocking(false).unwrap();
        }
        if closed >= expected || Instant::now() >= deadline {
            return closed;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A full daemon: other clients hold every slot but the owner's reserved ones; the owner still
/// gets in, then again once the reserved ones are held too (an idle one is reclaimed); another
/// client is refused until a connection has been idle `RECLAIM_IDLE_AFTER_MS`, then gets in.
fn a_full_daemon_keeps_the_owner_a_slot_and_reclaims_idle_ones() {
    let sandbox = Sandbox::new();
    let (_daemon, socket) = Daemon::start(&sandbox);
    let filled = Instant::now();
    let mut others: Vec<Raw> = (0..MAX_CONNECTIONS - OWNER_RESERVED_CONNECTIONS)
        .map(|_| {
            let mut raw = Raw::connect(&socket);
            assert!(raw.ask(json!({"op": "hello"}))["ok"].is_object());
            raw
        })
        .collect();
    // One more client that is not the owner: refused while no connection has been idle long.
    let mut refused = Raw::connect(&socket);
    let reply = refused.ask(json!({"op": "hello"}));
    if filled.elapsed() < Duration::from_millis(RECLAIM_IDLE_AFTER_MS / 2) {
        assert_eq!(code(&reply), "too_many_connections", "{reply}");
        assert!(refused.reply().is_none(), "then closed");
    }
    // The owner: first in a reserved slot, held, until those are all taken.
    let mut owners: Vec<Raw> = (0..OWNER_RESERVED_CONNECTIONS)
        .map(|_| {
            let mut raw = Raw::connect(&socket);
            assert!(raw.ask(json!({"op": "status"}))["ok"].is_object());
            raw
        })
        .collect();
    // Every slot is held: the owner's CLI still gets in (an idle connection is reclaimed).
    let started = Instant::now();
    let status = sandbox.json(&["status"]);
    assert_eq!(status["status"]["enabled"], false, "{status}");
    println!(
        "FIGURE daemon.full.owner_status_ms {} ms",
        started.elapsed().as_millis()
    );
    // Exactly one held connection was reclaimed for it: closed, without a reply.
    assert_eq!(wait_closed(&mut others, &mut owners, 1), 1);
    // Its slot is free again: another client fills it, and every slot is held once more (once
    // the daemon has seen the CLI's connection end: until then, it is refused).
    let deadline = Instant::now() + Duration::from_secs(support::ANSWER_TIMEOUT_SECS);
    loop {
        let mut refill = Raw::connect(&socket);
        let reply = refill.ask(json!({"op": "hello"}));
        if reply["ok"].is_object() {
            others.push(refill);
            break;
        }
        assert_eq!(code(&reply), "too_many_connections", "{reply}");
        assert!(
            Instant::now() < deadline,
            "the CLI's slot was never given back"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    // After the idle time, another client reclaims the connection idle longest.
    std::thread::sleep(Duration::from_millis(RECLAIM_IDLE_AFTER_MS));
    let mut driver = Raw::connect(&socket);
    let reply = driver.ask(json!({"op": "hello"}));
    assert!(reply["ok"].is_object(), "{reply}");
    assert_eq!(wait_closed(&mut others, &mut owners, 2), 2);
    println!("daemon_bounds: a full daemon keeps the owner a slot and reclaims idle ones: ok");
}

fn main() {
    if !annal_engine::test_support::suite_selected("daemon_bounds") {
        return;
    }
    stalled_connections_and_a_label_flood();
    a_frame_has_a_deadline_and_an_idle_connection_is_kept();
    a_full_daemon_keeps_the_owner_a_slot_and_reclaims_idle_ones();
}
