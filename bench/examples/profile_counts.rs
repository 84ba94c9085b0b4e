//! Drives the profile codec a given number of times, for instruction counting under callgrind.
//!
//! `profile_counts MODE N`: MODE is `seal` (serialize the event + `RecordSealer::seal`),
//! `seal_into` (serialize + `RecordSealer::seal_into` into a reused batch buffer) or `open`
//! (`RecordOpener::open` of one record). Per-record cost is the difference of two runs over the
//! difference of their N (docs/benchmarks.md), so set-up and process start cancel out.
#![allow(missing_docs)]

use std::hint::black_box;
use std::process::ExitCode;

use annal_bench::{EVENT_JSON, bench_header, bench_keys};
use annal_engine::profile::{HistorySchema, RecordOpener, RecordSealer, TailRule, read_chunk};
use annal_schema::Event;

/// Size of the reused batch buffer of the `seal_into` mode (a writer's write buffer).
const BATCH_CAPACITY_BYTES: usize = 64 * 1024;

/// Upper bound of a record's framing around its plaintext (22 fixed bytes, a head, the tag).
const RECORD_OVERHEAD_BYTES: usize = 64;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let (Some(mode), Some(count)) = (args.get(1), args.get(2).and_then(|n| n.parse::<u64>().ok()))
    else {
        eprintln!("usage: profile_counts seal|seal_into|open N");
        return ExitCode::from(2);
    };
    let root = bench_keys();
    let mut sealer = match RecordSealer::new(&root, &bench_header()) {
        Ok(sealer) => sealer,
        Err(e) => {
            eprintln!("sealer: {e}");
            return ExitCode::FAILURE;
        }
    };
    let Ok(event) = Event::from_json_slice(EVENT_JSON.as_bytes()) else {
        eprintln!("the bench event does not parse");
        return ExitCode::FAILURE;
    };
    let mut total = 0usize;
    match mode.as_str() {
        "seal" => {
            for _ in 0..count {
                match sealer.seal(&event.to_json_vec()) {
                    Ok(record) => total += black_box(record).len(),
                    Err(e) => {
                        eprintln!("seal: {e}");
                        return ExitCode::FAILURE;
                    }
                }
            }
        }
        "seal_into" => {
            let mut batch = Vec::with_capacity(BATCH_CAPACITY_BYTES);
            for _ in 0..count {
                if batch.len() + EVENT_JSON.len() + RECORD_OVERHEAD_BYTES > BATCH_CAPACITY_BYTES {
                    batch.clear();
                }
                match sealer.seal_into(&event.to_json_vec(), &mut batch) {
                    Ok(range) => total += black_box(range).len(),
                    Err(e) => {
                        eprintln!("seal_into: {e}");
                        return ExitCode::FAILURE;
                    }
                }
            }
        }
        "open" => {
            let item = match sealer.seal(EVENT_JSON.as_bytes()) {
                Ok(item) => item,
                Err(e) => {
                    eprintln!("seal: {e}");
                    return ExitCode::FAILURE;
                }
            };
            let mut chunk = sealer.header_bytes().to_vec();
            chunk.extend(&item);
            let Some(parsed) = read_chunk(&chunk, &root, None, TailRule::MustBeClean).header else {
                eprintln!("the bench chunk does not read");
                return ExitCode::FAILURE;
            };
            let opener = RecordOpener::new(&root, parsed);
            for _ in 0..count {
                match opener.open::<HistorySchema>(black_box(&item), 0, 0) {
                    Ok(record) => total += black_box(record).plaintext.len(),
                    Err(e) => {
                        eprintln!("open: {e}");
                        return ExitCode::FAILURE;
                    }
                }
            }
        }
        other => {
            eprintln!("unknown mode {other}");
            return ExitCode::from(2);
        }
    }
    println!("{mode} {count} records, {total} bytes");
    ExitCode::SUCCESS
}
