//! Drives the profile codec a given number of times, for instruction counting under callgrind.
//!
//! `profile_counts MODE N`: MODE is `seal` (serialize the event + `RecordSealer::seal`),
//! `seal_into` (serialize + `RecordSealer::seal_into` into a reused batch buffer), `open`
//! (`RecordOpener::open` of one record), `append` (`StoreWriter::append` of N events to a store
//! in a temporary directory, in batches of 1,000; N a multiple of 1,000; not synced) or
//! `read_at` (`ChunkHandle::read_at` of one record the writer wrote, the chunk open). Per-record
//! cost is the difference of two runs over the difference of their N (docs/benchmarks.md), so
//! set-up and process start cancel out. In `append` mode the drafts of each batch are cloned
//! outside `append`; count with `--toggle-collect='*StoreWriter*::append'` to leave that out.
#![allow(missing_docs)]

use std::hint::black_box;
use std::process::ExitCode;
use std::sync::Arc;

use annal_bench::{
    APPEND_BATCH_EVENTS, EVENT_JSON, bench_drafts, bench_header, bench_keys, create_bench_writer,
};
use annal_engine::profile::{HistorySchema, RecordOpener, RecordSealer, TailRule, read_chunk};
use annal_engine::store::{History, StoreReader};
use annal_schema::Event;

/// Size of the reused batch buffer of the `seal_into` mode (a writer's write buffer).
const BATCH_CAPACITY_BYTES: usize = 64 * 1024;

/// Upper bound of a record's framing around its plaintext (22 fixed bytes, a head, the tag).
const RECORD_OVERHEAD_BYTES: usize = 64;

/// Name of the store's namespace directory inside the temporary directory.
const NAMESPACE_DIR_NAME: &str = "ns";

/// `StoreWriter::append` of `count` events (a multiple of [`APPEND_BATCH_EVENTS`]) after a
/// one-event append that creates the first chunk. Returns the bytes of the records written.
fn append(count: u64) -> Result<u64, String> {
    let batch = APPEND_BATCH_EVENTS as u64;
    if !count.is_multiple_of(batch) {
        return Err(format!("append needs a multiple of {batch} events"));
    }
    let dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
    let mut bench = create_bench_writer(&dir.path().join(NAMESPACE_DIR_NAME))
        .map_err(|e| format!("bench store: {e}"))?;
    let drafts = bench_drafts(APPEND_BATCH_EVENTS);
    bench
        .writer
        .append(drafts[..1].to_vec())
        .map_err(|e| format!("priming append: {e}"))?;
    let mut total = 0;
    for _ in 0..count / batch {
        let receipt = bench
            .writer
            .append(drafts.clone())
            .map_err(|e| format!("append: {e}"))?;
        total += black_box(receipt)
            .records
            .iter()
            .map(|r| r.len)
            .sum::<u64>();
    }
    Ok(total)
}

/// `ChunkHandle::read_at` of one record (the middle of a batch the writer wrote), `count`
/// times, its chunk opened once. Returns the plaintext bytes read.
fn read_at(count: u64) -> Result<u64, String> {
    let dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
    let mut bench = create_bench_writer(&dir.path().join(NAMESPACE_DIR_NAME))
        .map_err(|e| format!("bench store: {e}"))?;
    let receipt = bench
        .writer
        .append(bench_drafts(APPEND_BATCH_EVENTS))
        .map_err(|e| format!("append: {e}"))?;
    let location = receipt.records[APPEND_BATCH_EVENTS / 2];
    let handle = StoreReader::<History>::new(Arc::clone(&bench.storage))
        .open_chunk(&bench_keys(), location.chunk_id)
        .map_err(|e| format!("open chunk: {e}"))?;
    let mut total = 0;
    for _ in 0..count {
        let record = handle
            .read_at(black_box(&location))
            .map_err(|e| format!("read_at: {e}"))?;
        total += black_box(record).plaintext.len() as u64;
    }
    Ok(total)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let (Some(mode), Some(count)) = (args.get(1), args.get(2).and_then(|n| n.parse::<u64>().ok()))
    else {
        eprintln!("usage: profile_counts seal|seal_into|open|append|read_at N");
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
        "append" | "read_at" => {
            let run = if mode == "append" { append } else { read_at };
            match run(count) {
                Ok(bytes) => total += bytes as usize,
                Err(e) => {
                    eprintln!("{e}");
                    return ExitCode::FAILURE;
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
