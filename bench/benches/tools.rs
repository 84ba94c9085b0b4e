//! Bench `tools`: agents calling `history_query` (newest 50) at the same time through
//! `Engine::call_tool`, each agent with its own grant, on a store of [`STORE_EVENTS`] events
//! filled through the real `Engine`.
//!
//! A call goes from the caller to the policy gate, which decides it in its handler and runs the
//! rest in a task of the call's own: the pre-execution audit record made durable (the journal
//! groups the records of calls that arrive together under one `fdatasync`), the read, the
//! completion record. So concurrent calls should scale until the disk's syncs or the two cores
//! are the limit. Per number of concurrent callers N in [`CALLERS`]:
//! - `tools.concurrent{N}.calls_per_s`: calls answered per second, all callers together;
//! - `tools.concurrent{N}.p99_us` (and `p50_us`): one call's latency as its caller sees it.
//!
//! And the two ratios the floors are stated in (docs/benchmarks.md): `tools.scaling_8_over_1`
//! (calls per second at 8 callers over 1; floor >= 4) and `tools.p99_8_over_1` (floor <= 3).
//!
//! A call costs at least one `fdatasync` (its pre-execution audit record is durable before the
//! read runs). The same run measures the disk's own: [`FDATASYNC_ROUNDS`] appends of an
//! audit-record-sized write, each synced, in the store's directory: `tools.fdatasync.{p50,p99}_us`,
//! and `tools.call.p99_over_fdatasync_p99`, one caller's p99 over the disk's (issue 30: <= 1.3).
//!
//! The same through the daemon's socket (`annal serve`'s server, `daemon::serve`, in this
//! process): N clients, each on its own connection and thread as N MCP bridges would be, each
//! for its own agent, sending `call_tool` newest-50: `tools.socket{N}.calls_per_s`,
//! `tools.socket{N}.p50_us`/`p99_us`, and `tools.socket_scaling_8_over_1`. Calls that
//! serialized somewhere (one connection's handler, one mailbox) would show 8 clients at the
//! 1-client rate, with 8 times its latency.
//!
//! criterion (`tools/call_newest50_small_store`) times single calls on a small store (also run
//! once, in debug, by `cargo test --all-targets`).
#![allow(missing_docs)]

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use annal_actors::Engine;
use annal_actors::daemon::{DaemonClient, Request, ServeOptions, serve};
use annal_actors::gate::PolicyChange;
use annal_bench::engine::RigError;
use annal_bench::query::{fill_store, start_engine};
use annal_bench::{print_figure, quantile};
use annal_engine::policy::{ActorId, GrantTerms, Operation, Principal};
use criterion::{Criterion, criterion_group};

/// Events in the bench's store.
const STORE_EVENTS: usize = 100_000;

/// Events in the smoke store criterion times.
const SMOKE_STORE_EVENTS: usize = 2_000;

/// The numbers of concurrent callers measured.
const CALLERS: [usize; 5] = [1, 2, 4, 8, 16];

/// How long each number of callers runs, after its warm-up.
const RUN_FOR: Duration = Duration::from_secs(4);

/// Syncs of the disk's own `fdatasync` figure.
const FDATASYNC_ROUNDS: usize = 1_000;

/// Bytes appended before each of those syncs (about one audit record in its chunk).
const FDATASYNC_WRITE_BYTES: usize = 320;

/// Calls each caller makes before the clock starts (caches, the gate's policy, the cursor key).
const WARM_UP_CALLS: usize = 5;

fn must<T>(what: &str, result: Result<T, RigError>) -> T {
    match result {
        Ok(value) => value,
        Err(error) => {
            eprintln!("tools bench: {what}: {error}");
            std::process::exit(1);
        }
    }
}

/// The agent of caller `n`, granted `history_query`.
fn agent(engine: &Engine, n: usize) -> Result<Principal, RigError> {
    let actor = ActorId::new(&format!("bench-agent-{n:02}"))?;
    engine.change_policy(PolicyChange::Grant {
        actor: actor.clone(),
        operation: Operation::Query,
        terms: GrantTerms::DEFAULT,
    })?;
    Ok(Principal::Agent(actor))
}

/// One `history_query` call of newest 50; an error when it is refused or short.
fn call(engine: &Engine, principal: &Principal) -> Result<(), RigError> {
    let arguments = serde_json::json!({ "limit": 50 });
    match engine.call_tool(principal, "history_query", &arguments) {
        Ok(annal_actors::gate::ToolAnswer::Query { response, .. })
            if response.events.len() == 50 =>
        {
            Ok(())
        }
        Ok(_) => Err("a call answered something other than 50 events".into()),
        Err(refusal) => Err(format!("a call was refused: {refusal:?}").into()),
    }
}

/// `callers` threads call for [`RUN_FOR`]: every call's latency (ns) and the wall time.
fn run(
    engine: &Arc<Engine>,
    principals: &[Principal],
    callers: usize,
) -> Result<(Vec<u64>, Duration), RigError> {
    let started = Instant::now();
    let threads: Vec<_> = principals[..callers]
        .iter()
        .cloned()
        .map(|principal| {
            let engine = Arc::clone(engine);
            std::thread::spawn(move || -> Result<Vec<u64>, String> {
                for _ in 0..WARM_UP_CALLS {
                    call(&engine, &principal).map_err(|e| e.to_string())?;
                }
                let mut latencies = Vec::new();
                let until = Instant::now() + RUN_FOR;
                while Instant::now() < until {
                    let at = Instant::now();
                    call(&engine, &principal).map_err(|e| e.to_string())?;
                    latencies.push(u64::try_from(at.elapsed().as_nanos()).unwrap_or(u64::MAX));
                }
                Ok(latencies)
            })
        })
        .collect();
    Ok((
        joined(threads, "a caller thread panicked")?,
        started.elapsed(),
    ))
}

/// Every latency the `threads` measured (each thread's own failure, or `panicked` when one
/// panicked).
fn joined(
    threads: Vec<std::thread::JoinHandle<Result<Vec<u64>, String>>>,
    panicked: &'static str,
) -> Result<Vec<u64>, RigError> {
    let mut all = Vec::new();
    for thread in threads {
        all.extend(
            thread
                .join()
                .map_err(|_| panicked)?
                .map_err(RigError::from)?,
        );
    }
    Ok(all)
}

fn print_concurrency_figures() {
    let dir = must("tempdir", tempfile::tempdir().map_err(Into::into));
    let events = must("fill", fill_store(dir.path(), u64::MAX, STORE_EVENTS));
    println!("store: {events} events");
    let engine = Arc::new(must("start", start_engine(dir.path())));
    let most = CALLERS.iter().copied().max().unwrap_or(1);
    let principals: Vec<Principal> = (0..most)
        .map(|n| must("grant", agent(&engine, n)))
        .collect();
    let mut by_callers = Vec::new();
    for callers in CALLERS {
        let (mut latencies, wall) = must("run", run(&engine, &principals, callers));
        latencies.sort_unstable();
        let calls = latencies.len();
        // Each caller ran RUN_FOR after its own warm-up; the wall time includes the warm-ups.
        let per_s = calls as f64 / RUN_FOR.as_secs_f64().min(wall.as_secs_f64());
        let p50 = quantile(&latencies, 0.50) / 1_000;
        let p99 = quantile(&latencies, 0.99) / 1_000;
        print_figure(
            &format!("tools.concurrent{callers}.calls_per_s"),
            format!("{per_s:.0}"),
            "calls/s",
        );
        print_figure(&format!("tools.concurrent{callers}.p50_us"), p50, "us");
        print_figure(&format!("tools.concurrent{callers}.p99_us"), p99, "us");
        by_callers.push((callers, per_s, p99));
    }
    let at = |n: usize| by_callers.iter().find(|(callers, ..)| *callers == n);
    let sync_p99 = print_fdatasync_figures(dir.path());
    if let Some((_, _, one_p99)) = at(1) {
        print_figure(
            "tools.call.p99_over_fdatasync_p99",
            format!("{:.2}", *one_p99 as f64 / sync_p99.max(1) as f64),
            "x",
        );
    }
    if let (Some((_, one_per_s, one_p99)), Some((_, eight_per_s, eight_p99))) = (at(1), at(8)) {
        print_figure(
            "tools.scaling_8_over_1",
            format!("{:.2}", eight_per_s / one_per_s),
            "x",
        );
        print_figure(
            "tools.p99_8_over_1",
            format!("{:.2}", *eight_p99 as f64 / (*one_p99).max(1) as f64),
            "x",
        );
    }
    print_socket_figures(&engine, most);
    if let Ok(engine) = Arc::try_unwrap(engine) {
        engine.shutdown();
    }
}

/// The disk's own `fdatasync` in `dir` (the store's file system), as the journal syncs one audit
/// record: its p50 and p99 printed, its p99 in microseconds returned.
fn print_fdatasync_figures(dir: &Path) -> u64 {
    use std::io::Write;
    let path = dir.join("fdatasync.probe");
    let mut file = must(
        "probe",
        std::fs::OpenOptions::new()
            .create_new(true)
            .append(true)
            .open(&path)
            .map_err(Into::into),
    );
    let record = [0x5a_u8; FDATASYNC_WRITE_BYTES];
    let mut took = Vec::with_capacity(FDATASYNC_ROUNDS);
    for _ in 0..FDATASYNC_ROUNDS {
        must("probe write", file.write_all(&record).map_err(Into::into));
        let at = Instant::now();
        must("probe sync", file.sync_data().map_err(Into::into));
        took.push(u64::try_from(at.elapsed().as_nanos()).unwrap_or(u64::MAX));
    }
    drop(file);
    let _ = std::fs::remove_file(&path);
    took.sort_unstable();
    let p50 = quantile(&took, 0.50) / 1_000;
    let p99 = quantile(&took, 0.99) / 1_000;
    print_figure("tools.fdatasync.p50_us", p50, "us");
    print_figure("tools.fdatasync.p99_us", p99, "us");
    p99
}

/// One `call_tool` of newest 50 for `actor` over `client`; an error when refused or short.
async fn socket_call(client: &mut DaemonClient, actor: &str) -> Result<(), String> {
    let request = Request::CallTool {
        actor: actor.to_owned(),
        tool: "history_query".to_owned(),
        arguments: serde_json::Map::from_iter([("limit".to_owned(), 50.into())]),
    };
    let reply = client.request(&request).await.map_err(|e| e.to_string())?;
    match reply["answer"]["events"].as_array() {
        Some(events) if events.len() == 50 => Ok(()),
        _ => Err(format!("a socket call answered {reply}")),
    }
}

/// `callers` client threads, each with its own connection and runtime, call for [`RUN_FOR`].
fn run_socket(socket: &Path, callers: usize) -> Result<(Vec<u64>, Duration), RigError> {
    let started = Instant::now();
    let threads: Vec<_> = (0..callers)
        .map(|n| {
            let socket = socket.to_path_buf();
            std::thread::spawn(move || -> Result<Vec<u64>, String> {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| e.to_string())?;
                runtime.block_on(async move {
                    let actor = format!("bench-agent-{n:02}");
                    let mut client = DaemonClient::connect(&socket)
                        .await
                        .map_err(|e| e.to_string())?;
                    for _ in 0..WARM_UP_CALLS {
                        socket_call(&mut client, &actor).await?;
                    }
                    let mut latencies = Vec::new();
                    let until = Instant::now() + RUN_FOR;
                    while Instant::now() < until {
                        let at = Instant::now();
                        socket_call(&mut client, &actor).await?;
                        latencies.push(u64::try_from(at.elapsed().as_nanos()).unwrap_or(u64::MAX));
                    }
                    Ok(latencies)
                })
            })
        })
        .collect();
    Ok((
        joined(threads, "a client thread panicked")?,
        started.elapsed(),
    ))
}

/// The socket case: the daemon's server over `engine` on a socket in a private temporary
/// directory, and the figures for each number of clients in [`CALLERS`] (at most `agents`).
fn print_socket_figures(engine: &Arc<Engine>, agents: usize) {
    let dir = must("tempdir", tempfile::tempdir().map_err(Into::into));
    // The client trusts only a private socket directory, as the daemon's own is.
    must(
        "socket directory",
        annal_actors::daemon::create_private_dir(&dir.path().join("run"))
            .map_err(|e| e.to_string().into()),
    );
    let socket = dir.path().join("run").join("annal.sock");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (bound, is_bound) = std::sync::mpsc::channel::<Result<(), String>>();
    let server = {
        let engine = Arc::clone(engine);
        let socket = socket.clone();
        std::thread::spawn(move || {
            // As `annal serve` runs its server: one thread, the engine's runtime beside it.
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime,
                Err(error) => {
                    let _ = bound.send(Err(error.to_string()));
                    return;
                }
            };
            runtime.block_on(async move {
                let listener = match tokio::net::UnixListener::bind(&socket) {
                    Ok(listener) => listener,
                    Err(error) => {
                        let _ = bound.send(Err(error.to_string()));
                        return;
                    }
                };
                let _ = bound.send(Ok(()));
                let options = ServeOptions {
                    idle_exit: None,
                    key_store: "memory".to_owned(),
                    on_enabled: None,
                };
                let _ = serve(listener, engine, options, async {
                    let _ = stopped.await;
                })
                .await;
            });
        })
    };
    let ready = is_bound
        .recv()
        .map_err(|e| e.to_string())
        .and_then(|bound| bound);
    must("bind the socket", ready.map_err(RigError::from));
    let mut by_callers = Vec::new();
    for callers in CALLERS.into_iter().filter(|&n| n <= agents) {
        let (mut latencies, wall) = must("socket run", run_socket(&socket, callers));
        latencies.sort_unstable();
        let per_s = latencies.len() as f64 / RUN_FOR.as_secs_f64().min(wall.as_secs_f64());
        let p50 = quantile(&latencies, 0.50) / 1_000;
        let p99 = quantile(&latencies, 0.99) / 1_000;
        print_figure(
            &format!("tools.socket{callers}.calls_per_s"),
            format!("{per_s:.0}"),
            "calls/s",
        );
        print_figure(&format!("tools.socket{callers}.p50_us"), p50, "us");
        print_figure(&format!("tools.socket{callers}.p99_us"), p99, "us");
        by_callers.push((callers, per_s, p50));
    }
    let at = |n: usize| by_callers.iter().find(|(callers, ..)| *callers == n);
    if let (Some((_, one_per_s, one_p50)), Some((_, eight_per_s, eight_p50))) = (at(1), at(8)) {
        print_figure(
            "tools.socket_scaling_8_over_1",
            format!("{:.2}", eight_per_s / one_per_s),
            "x",
        );
        print_figure(
            "tools.socket_p50_8_over_1",
            format!("{:.2}", *eight_p50 as f64 / (*one_p50).max(1) as f64),
            "x",
        );
    }
    let _ = stop.send(());
    let _ = server.join();
}

fn bench_tools(c: &mut Criterion) {
    let dir = must("tempdir", tempfile::tempdir().map_err(Into::into));
    must("fill", fill_store(dir.path(), u64::MAX, SMOKE_STORE_EVENTS));
    let engine = must("start", start_engine(dir.path()));
    let principal = must("grant", agent(&engine, 0));
    c.bench_function("tools/call_newest50_small_store", |b| {
        b.iter(|| must("call", call(&engine, &principal)));
    });
    engine.shutdown();
}

criterion_group!(benches, bench_tools);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    if !annal_bench::under_cargo_bench() {
        return;
    }
    print_concurrency_figures();
}
