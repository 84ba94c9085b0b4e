//! Bench `profile`: encode+encrypt and decode+decrypt+validate of one 664-byte v0 event.
//!
//! After criterion's own output it prints `FIGURE profile.seal_ns <n> ns`,
//! `FIGURE profile.seal_into_ns <n> ns` and `FIGURE profile.open_ns <n> ns`: the median of
//! [`FIGURE_ROUNDS`] timed rounds of [`FIGURE_ITERS_PER_ROUND`] operations each, measured by a
//! plain loop after criterion ran.
#![allow(missing_docs)]

use std::hint::black_box;
use std::ops::Range;
use std::time::Instant;

use annal_bench::{EVENT_JSON, bench_header, bench_keys, print_figure};
use annal_engine::keys::HistoryKeys;
use annal_engine::profile::{
    HistorySchema, MAX_RECORDS_PER_CHUNK, RecordOpener, RecordSealer, TAG_LEN_BYTES, TailRule,
    read_chunk,
};
use annal_schema::Event;
use criterion::{Criterion, criterion_group};

/// Timed rounds for the FIGURE lines.
const FIGURE_ROUNDS: usize = 15;

/// Operations per timed round.
const FIGURE_ITERS_PER_ROUND: usize = 2_000;

/// Size of the reused batch buffer `seal_into` appends to (a writer's write buffer).
const BATCH_CAPACITY_BYTES: usize = 64 * 1024;

/// Upper bound of a record's framing around its plaintext (22 fixed bytes, a head, the tag).
const RECORD_OVERHEAD_BYTES: usize = 48 + TAG_LEN_BYTES;

/// Encode (the event to compact JSON) + encrypt (one COSE_Encrypt0 record).
struct Sealing {
    /// Root key, to start a fresh chunk when the position counter nears its limit.
    root: HistoryKeys,
    /// Sealer of the current bench chunk.
    sealer: RecordSealer,
    /// The parsed event, serialized on every iteration.
    event: Event,
}

impl Sealing {
    fn new() -> Self {
        let root = bench_keys();
        let sealer = RecordSealer::new(&root, &bench_header()).unwrap_or_else(|e| panic!("{e}"));
        let event = Event::from_json_slice(EVENT_JSON.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
        Self {
            root,
            sealer,
            event,
        }
    }

    fn fresh_chunk_if_full(&mut self) {
        if self.sealer.next_position() + 1 >= MAX_RECORDS_PER_CHUNK {
            self.sealer =
                RecordSealer::new(&self.root, &bench_header()).unwrap_or_else(|e| panic!("{e}"));
        }
    }

    /// Serialize + `seal` (one freshly allocated record).
    fn seal_one(&mut self) -> Vec<u8> {
        self.fresh_chunk_if_full();
        let json = self.event.to_json_vec();
        self.sealer.seal(&json).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Serialize + `seal_into` a reused batch buffer, emptied when full (as a writer flushes).
    fn seal_one_into(&mut self, batch: &mut Vec<u8>) -> Range<usize> {
        self.fresh_chunk_if_full();
        if batch.len() + EVENT_JSON.len() + RECORD_OVERHEAD_BYTES > BATCH_CAPACITY_BYTES {
            batch.clear();
        }
        let json = self.event.to_json_vec();
        self.sealer
            .seal_into(&json, batch)
            .unwrap_or_else(|e| panic!("{e}"))
    }
}

/// Decode + decrypt + validate one record with the chunk key already derived.
struct Opening {
    /// Opener with the chunk key already derived.
    opener: RecordOpener,
    /// One sealed record item at position 0.
    item: Vec<u8>,
}

impl Opening {
    fn new() -> Self {
        let root = bench_keys();
        let mut sealer =
            RecordSealer::new(&root, &bench_header()).unwrap_or_else(|e| panic!("{e}"));
        let item = sealer
            .seal(EVENT_JSON.as_bytes())
            .unwrap_or_else(|e| panic!("{e}"));
        let mut chunk = sealer.header_bytes().to_vec();
        chunk.extend(&item);
        let reading = read_chunk(&chunk, &root, None, TailRule::MustBeClean);
        assert_eq!(reading.verdict.records().len(), 1);
        let parsed = reading.header.unwrap_or_else(|| panic!("header"));
        Self {
            opener: RecordOpener::new(&root, parsed),
            item,
        }
    }

    fn open_one(&self) -> usize {
        let record = self
            .opener
            .open::<HistorySchema>(&self.item, 0, 0)
            .unwrap_or_else(|e| panic!("{e}"));
        record.plaintext.len()
    }
}

fn bench_profile(c: &mut Criterion) {
    let mut sealing = Sealing::new();
    assert_eq!(sealing.event.to_json_vec(), EVENT_JSON.as_bytes());
    c.bench_function("profile/seal_664B_event", |b| {
        b.iter(|| black_box(sealing.seal_one()))
    });
    let mut batch = Vec::with_capacity(BATCH_CAPACITY_BYTES);
    c.bench_function("profile/seal_into_664B_event", |b| {
        b.iter(|| black_box(sealing.seal_one_into(&mut batch)))
    });
    let opening = Opening::new();
    c.bench_function("profile/open_664B_event", |b| {
        b.iter(|| black_box(opening.open_one()))
    });
}

/// Median over rounds of the mean time per operation, in ns.
fn median_ns(mut op: impl FnMut()) -> u64 {
    let mut rounds: Vec<u64> = (0..FIGURE_ROUNDS)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..FIGURE_ITERS_PER_ROUND {
                op();
            }
            let ns = start.elapsed().as_nanos() / FIGURE_ITERS_PER_ROUND as u128;
            u64::try_from(ns).unwrap_or(u64::MAX)
        })
        .collect();
    rounds.sort_unstable();
    rounds[rounds.len() / 2]
}

criterion_group!(benches, bench_profile);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    // `cargo bench` passes `--bench`; `cargo test --all-targets` does not, and there (a debug
    // build, each bench run once as a smoke test) timed figures would be slow and meaningless.
    if !std::env::args().any(|arg| arg == "--bench") {
        return;
    }
    let mut sealing = Sealing::new();
    let seal_ns = median_ns(|| {
        black_box(sealing.seal_one());
    });
    let mut batch = Vec::with_capacity(BATCH_CAPACITY_BYTES);
    let seal_into_ns = median_ns(|| {
        black_box(sealing.seal_one_into(&mut batch));
    });
    let opening = Opening::new();
    let open_ns = median_ns(|| {
        black_box(opening.open_one());
    });
    print_figure("profile.seal_ns", seal_ns, "ns");
    print_figure("profile.seal_into_ns", seal_into_ns, "ns");
    print_figure("profile.open_ns", open_ns, "ns");
}
