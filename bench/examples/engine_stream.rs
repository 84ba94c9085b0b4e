//! One stream through the real engine (`annal_bench::engine::run_stream`), with a trace of its
//! commits, for profiling (`perf record`, `valgrind --tool=callgrind`) and for reading what the
//! `append` bench's figures are made of.
//!
//! `engine_stream N [flusher]`: captures N `action_started` events; with `flusher`, a second
//! thread flushes back to back. Prints the durable rate, the time from the last capture to
//! durable, and each commit (when it was asked, since the first capture, and its round trip).
//! `engine_stream idle SECS`: an enabled engine left idle for SECS seconds (what an idle engine
//! runs, for `perf record`).
#![allow(missing_docs)]

use std::process::ExitCode;
use std::time::Duration;

use annal_bench::engine::{EngineRig, RigError, run_stream};

/// An enabled engine, idle for `window`.
fn idle(window: Duration) -> Result<(), RigError> {
    let rig = EngineRig::start()?;
    std::thread::sleep(window);
    rig.finish(0, 0)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).is_some_and(|a| a == "idle") {
        let Some(secs) = args.get(2).and_then(|n| n.parse::<u64>().ok()) else {
            eprintln!("usage: engine_stream idle SECS");
            return ExitCode::FAILURE;
        };
        return match idle(Duration::from_secs(secs)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("engine_stream: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let Some(events) = args.get(1).and_then(|n| n.parse::<usize>().ok()) else {
        eprintln!("usage: engine_stream N [flusher]");
        return ExitCode::FAILURE;
    };
    let flusher = args.get(2).is_some_and(|a| a == "flusher");
    match run_stream(events, flusher) {
        Ok(stream) => {
            println!(
                "events {} captured_ms {:.1} durable_ms {:.1} events_per_s {:.0} final_flush_ms {:.1}",
                stream.events,
                stream.captured.as_secs_f64() * 1e3,
                stream.durable.as_secs_f64() * 1e3,
                stream.events_per_s(),
                (stream.durable - stream.captured).as_secs_f64() * 1e3,
            );
            for commit in &stream.commits {
                println!(
                    "commit at_ms {:.1} took_us {}",
                    commit.at.as_secs_f64() * 1e3,
                    commit.took.as_micros()
                );
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("engine_stream: {e}");
            ExitCode::FAILURE
        }
    }
}
