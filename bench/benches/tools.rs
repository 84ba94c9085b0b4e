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
//! criterion (`tools/call_newest50_small_store`) times single calls on a small store (also run
//! once, in debug, by `cargo test --all-targets`).
#![allow(missing_docs)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use annal_actors::Engine;
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
    let mut all = Vec::new();
    for thread in threads {
        let latencies = thread
            .join()
            .map_err(|_| "a caller thread panicked")?
            .map_err(RigError::from)?;
        all.extend(latencies);
    }
    Ok((all, started.elapsed()))
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
    if let Ok(engine) = Arc::try_unwrap(engine) {
        engine.shutdown();
    }
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
