//! Bench `profile`: encode+encrypt and decode+decrypt+validate of one ~700-byte v0 event.
//!
//! After criterion's own output it prints `FIGURE profile.seal_ns <n> ns` and
//! `FIGURE profile.open_ns <n> ns`: the median of [`FIGURE_ROUNDS`] timed rounds of
//! [`FIGURE_ITERS_PER_ROUND`] operations each, measured by a plain loop after criterion ran.
#![allow(missing_docs)]

use std::hint::black_box;
use std::time::Instant;

use annal_bench::print_figure;
use annal_engine::keys::RootKey;
use annal_engine::profile::{
    ChunkHeader, ChunkId, MAX_RECORDS_PER_CHUNK, RecordOpener, RecordSealer, read_chunk,
};
use annal_schema::Event;
use criterion::{Criterion, criterion_group};

/// A 706-byte action_started event from the reference fixture (records.json, record 2).
const EVENT_JSON: &str = r#"{"specversion":"1.0","id":"5061ef0eb99d394fd65b98d72d1137cc","source":"urn:cua-driver:history:6dd3aa1eef99854a9a3d39ba1e2315f1","type":"cua-driver.history.action_started.v0","subject":"action/ce91d84254159bba79eb9c533b49fd99","time":"2026-11-30T22:14:03.769225615Z","datacontenttype":"application/json","dataschema":"urn:cua-driver:schema:history-event:v0","data":{"session_id":"b11ddce8dbd1872c9250e3f67dad2d9d","action_id":"ce91d84254159bba79eb9c533b49fd99","sequence":3,"platform":"linux","process_model":"in_daemon","capability":"input.pointer.click","caller_category":"cua_runtime","application":{"bundle_id":"com.example.TextEditor","display_name":"Text Editor"},"payload":{"kind":"action_started"}}}"#;

/// Timed rounds for the FIGURE lines.
const FIGURE_ROUNDS: usize = 15;

/// Operations per timed round.
const FIGURE_ITERS_PER_ROUND: usize = 2_000;

fn root() -> RootKey {
    RootKey::from_bytes([0x42; 32])
}

fn header() -> ChunkHeader {
    ChunkHeader::new(
        1,
        "bench.history.v1",
        "6dd3aa1eef99854a9a3d39ba1e2315f1",
        ChunkId([0x11; 16]),
        [1, 2, 3, 4],
    )
    .unwrap_or_else(|e| panic!("bench header: {e}"))
}

/// Encode (the event to compact JSON) + encrypt (one COSE_Encrypt0 record).
struct Sealing {
    /// Root key, to start a fresh chunk when the position counter nears its limit.
    root: RootKey,
    /// Sealer of the current bench chunk.
    sealer: RecordSealer,
    /// The parsed event, serialized on every iteration.
    event: Event,
}

impl Sealing {
    fn new() -> Self {
        let root = root();
        let sealer = RecordSealer::new(&root, &header()).unwrap_or_else(|e| panic!("{e}"));
        let event = Event::from_json_slice(EVENT_JSON.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
        Self {
            root,
            sealer,
            event,
        }
    }

    fn seal_one(&mut self) -> Vec<u8> {
        if self.sealer.next_position() + 1 >= MAX_RECORDS_PER_CHUNK {
            self.sealer =
                RecordSealer::new(&self.root, &header()).unwrap_or_else(|e| panic!("{e}"));
        }
        let json = self.event.to_json_vec();
        self.sealer.seal(&json).unwrap_or_else(|e| panic!("{e}"))
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
        let root = root();
        let mut sealer = RecordSealer::new(&root, &header()).unwrap_or_else(|e| panic!("{e}"));
        let item = sealer
            .seal(EVENT_JSON.as_bytes())
            .unwrap_or_else(|e| panic!("{e}"));
        let mut chunk = sealer.header_bytes().to_vec();
        chunk.extend(&item);
        let reading = read_chunk(&chunk, &root, None);
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
            .open(&self.item, 0, 0)
            .unwrap_or_else(|e| panic!("{e}"));
        record.plaintext.len()
    }
}

fn bench_profile(c: &mut Criterion) {
    let mut sealing = Sealing::new();
    assert_eq!(sealing.event.to_json_vec(), EVENT_JSON.as_bytes());
    c.bench_function("profile/seal_700B_event", |b| {
        b.iter(|| black_box(sealing.seal_one()))
    });
    let opening = Opening::new();
    c.bench_function("profile/open_700B_event", |b| {
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
    let opening = Opening::new();
    let open_ns = median_ns(|| {
        black_box(opening.open_one());
    });
    print_figure("profile.seal_ns", seal_ns, "ns");
    print_figure("profile.open_ns", open_ns, "ns");
}
