//! Load and resource bounds: producer processes and producer threads capture through the
//! daemon's socket for a bounded time while another connection runs queries and control
//! operations. Then: nothing was dropped (the producers stay below capacity: each waits for its
//! reply), every acknowledged action is there, the daemon's resident memory stayed under
//! `MAX_RSS_BYTES`, its file descriptors and threads did not grow, and `stop` drained within the
//! engine's shutdown deadline.
//!
//! A `harness = false` target: it prints `FIGURE load.*` lines. `ANNAL_LOAD_SECS` sets the run
//! time (default `LOAD_SECS`). The same binary is the producer process (`ANNAL_LOAD_PRODUCER`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{Raw, Sandbox};

/// How long the producers run, in seconds.
const LOAD_SECS: u64 = 4;

/// How long the daemon's thread count may take to come back down after the load, in seconds:
/// above tokio's blocking-pool keep-alive (10 s), which holds an idle blocking thread that long.
const THREAD_SETTLE_DEADLINE_SECS: u64 = 15;

/// Producer processes.
const PRODUCER_PROCESSES: usize = 3;

/// Producer threads in this process.
const PRODUCER_THREADS: usize = 2;

/// Actions a producer captures between two flushes. Each op waits for its reply and an action
/// is two events (start, completion), so at most this many events per producer wait in the
/// capture queue: all producers together stay below its capacity, whatever the drain's pace.
const ACTIONS_PER_FLUSH: usize = 32;

/// Events per action: its start and its completion.
const EVENTS_PER_ACTION: usize = 2;

const _: () = assert!(
    (PRODUCER_PROCESSES + PRODUCER_THREADS) * ACTIONS_PER_FLUSH * EVENTS_PER_ACTION
        < annal_engine::capture::CAPTURE_QUEUE_CAPACITY_EVENTS
);

/// The daemon's resident memory must stay under this, in bytes.
const MAX_RSS_BYTES: u64 = 256 * 1024 * 1024;

/// Descriptors the daemon may hold above its idle count while every client is connected (one
/// socket per client, and the store's files), and must give back once they are gone.
const FD_SLACK: u64 = 16;

fn proc_status(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn rss_bytes(pid: u32) -> u64 {
    proc_status(pid, "VmRSS:") * 1024
}

fn fds(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count() as u64)
        .unwrap_or(0)
}

/// One producer: captures actions until `until`; returns how many were acknowledged durable.
fn produce(socket: &Path, tag: &str, until: Instant) -> u64 {
    let mut raw = Raw::connect(socket);
    let mut acknowledged = 0;
    let mut pending = 0;
    let mut n = 0u64;
    while Instant::now() < until {
        raw.action(json!({
            "capability": "input.pointer.click",
            "application": {"bundle_id": format!("org.load.{tag}.a{n}")},
        }));
        n += 1;
        pending += 1;
        if pending == ACTIONS_PER_FLUSH as u64 {
            let flushed = raw.ask(json!({"op": "flush"}));
            assert!(flushed["ok"]["status"].is_object(), "{flushed}");
            acknowledged += pending;
            pending = 0;
        }
    }
    let flushed = raw.ask(json!({"op": "flush"}));
    assert!(flushed["ok"]["status"].is_object(), "{flushed}");
    acknowledged + pending
}

fn main() {
    if let Some(socket) = std::env::var_os("ANNAL_LOAD_PRODUCER") {
        let tag = std::env::var("ANNAL_LOAD_TAG").unwrap_or_default();
        let secs: u64 =
            annal_engine::test_support::env_parsed("ANNAL_LOAD_SECS").unwrap_or(LOAD_SECS);
        let done = produce(
            Path::new(&socket),
            &tag,
            Instant::now() + Duration::from_secs(secs),
        );
        println!("{done}");
        return;
    }
    if !annal_engine::test_support::suite_selected("load") {
        return;
    }
    let secs: u64 = annal_engine::test_support::env_parsed("ANNAL_LOAD_SECS").unwrap_or(LOAD_SECS);
    if std::panic::catch_unwind(|| run(secs)).is_err() {
        eprintln!("load suite FAILED");
        std::process::exit(1);
    }
}

fn run(secs: u64) {
    let sandbox = Sandbox::new();
    let mut daemon = sandbox
        .annal(&["serve"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = daemon.id();
    let mut control = sandbox.connect_when_up();
    let socket = sandbox.socket();
    assert!(control.ask(json!({"op": "enable"}))["ok"].is_object());
    let idle_fds = fds(pid);
    let idle_threads = proc_status(pid, "Threads:");

    let until = Instant::now() + Duration::from_secs(secs);
    let processes: Vec<_> = (0..PRODUCER_PROCESSES)
        .map(|i| {
            Command::new(std::env::current_exe().unwrap())
                .env("ANNAL_LOAD_PRODUCER", &socket)
                .env("ANNAL_LOAD_TAG", format!("p{i}"))
                .env("ANNAL_LOAD_SECS", secs.to_string())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let threads: Vec<_> = (0..PRODUCER_THREADS)
        .map(|i| {
            let socket = socket.clone();
            std::thread::spawn(move || produce(&socket, &format!("t{i}"), until))
        })
        .collect();
    // Queries and control operations meanwhile, on their own connection.
    let mut max_rss = rss_bytes(pid);
    let mut max_fds = fds(pid);
    let mut queries = 0u64;
    while Instant::now() < until {
        let read = control.ask(json!({"op": "query", "arguments": {"limit": 50}}));
        assert!(read["ok"]["answer"]["events"].is_array(), "{read}");
        queries += 1;
        if queries.is_multiple_of(10) {
            assert!(control.ask(json!({"op": "status"}))["ok"].is_object());
            assert!(control
                .ask(json!({"op": "grant", "actor": "load-agent", "operation": "query"}))["ok"]
                .is_object());
            assert!(control.ask(json!({"op": "revoke", "actor": "load-agent"}))["ok"].is_object());
            max_rss = max_rss.max(rss_bytes(pid));
            max_fds = max_fds.max(fds(pid));
        }
    }
    let mut acknowledged: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    for process in processes {
        let output = process.wait_with_output().unwrap();
        assert!(output.status.success(), "a producer process failed");
        acknowledged += String::from_utf8_lossy(&output.stdout)
            .trim()
            .parse::<u64>()
            .unwrap();
    }
    max_rss = max_rss.max(rss_bytes(pid));
    let status = control.ask(json!({"op": "flush"}));
    assert_eq!(status["ok"]["status"]["dropped_events"], 0, "{status}");
    std::thread::sleep(Duration::from_millis(200));
    let settled_fds = fds(pid);
    // Threads the load made the runtime start (its blocking pool) end after tokio's keep-alive
    // (10 s idle): a leak is a count that stays up past it, not one that is still coming down.
    let settle_deadline = Instant::now() + Duration::from_secs(THREAD_SETTLE_DEADLINE_SECS);
    let settled_threads = loop {
        let threads = proc_status(pid, "Threads:");
        if threads <= idle_threads + 2 || Instant::now() >= settle_deadline {
            break threads;
        }
        std::thread::sleep(Duration::from_millis(100));
    };

    // Every acknowledged action is there: count completions per producer over the owner's reads.
    let completed = count_completed(&mut control);
    assert_eq!(
        completed, acknowledged,
        "every acknowledged action, and nothing else"
    );

    // Stop: the bounded drain.
    let stop_started = Instant::now();
    assert!(control.ask(json!({"op": "stop"}))["ok"]["stopping"] == true);
    let exited = loop {
        if let Some(status) = daemon.try_wait().unwrap() {
            break status;
        }
        assert!(
            stop_started.elapsed()
                < Duration::from_millis(annal_actors::config::SHUTDOWN_DEADLINE_MS + 2_000),
            "the daemon did not stop within its deadline"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    let shutdown_ms = stop_started.elapsed().as_millis();
    assert!(exited.success());

    assert!(
        max_rss < MAX_RSS_BYTES,
        "RSS {max_rss} over {MAX_RSS_BYTES}"
    );
    assert!(
        max_fds <= idle_fds + FD_SLACK + (PRODUCER_PROCESSES + PRODUCER_THREADS) as u64,
        "descriptors grew: idle {idle_fds}, peak {max_fds}"
    );
    assert!(
        settled_fds <= idle_fds + 2,
        "descriptors were not given back: idle {idle_fds}, after {settled_fds}"
    );
    assert!(
        settled_threads <= idle_threads + 2,
        "threads grew: idle {idle_threads}, after {settled_threads}"
    );
    let _ = std::io::stdout().flush();
    println!(
        "load: {} producers for {secs} s, {acknowledged} actions acknowledged, {queries} queries, \
         0 dropped",
        PRODUCER_PROCESSES + PRODUCER_THREADS
    );
    println!("FIGURE load.actions_acknowledged {acknowledged} actions");
    println!("FIGURE load.queries {queries} queries");
    println!("FIGURE load.max_rss_bytes {max_rss} bytes");
    println!(
        "FIGURE load.fd_growth_after {} fds",
        settled_fds.saturating_sub(idle_fds)
    );
    println!("FIGURE load.shutdown_ms {shutdown_ms} ms");
}

/// Completed actions in the store, paging down by sequence through the owner's reads.
fn count_completed(control: &mut Raw) -> u64 {
    let mut completed = 0;
    let mut until: Option<u64> = None;
    loop {
        let mut arguments = json!({"limit": 200});
        if let Some(until) = until {
            arguments["until_sequence"] = json!(until);
        }
        let read = control.ask(json!({"op": "query", "arguments": arguments}));
        let events: Vec<Value> = read["ok"]["answer"]["events"].as_array().unwrap().clone();
        let Some(lowest) = events.first().and_then(|e| e["data"]["sequence"].as_u64()) else {
            break;
        };
        completed += events
            .iter()
            .filter(|e| e["data"]["payload"]["kind"] == "action_completed")
            .count() as u64;
        if lowest <= 1 {
            break;
        }
        until = Some(lowest - 1);
    }
    completed
}
