//! Bench `profile`: encode+encrypt and decode+decrypt+validate of one 664-byte v0 event; the
//! whole append of a batch of 1,000 such events to a real store; one record read by offset.
//!
//! After criterion's own output it prints `FIGURE profile.seal_ns <n> ns`,
//! `FIGURE profile.seal_into_ns <n> ns` and `FIGURE profile.open_ns <n> ns`: the median of
//! [`FIGURE_ROUNDS`] timed rounds of [`FIGURE_ITERS_PER_ROUND`] operations each, measured by a
//! plain loop after criterion ran; `FIGURE profile.read_at_ns <n> ns` the same way; and
//! `FIGURE profile.append_per_event_ns <n> ns` and `FIGURE profile.append_synced_per_event_ns
//! <n> ns`: the median of [`FIGURE_ROUNDS`] rounds of [`APPEND_FIGURE_BATCHES_PER_ROUND`]
//! batches, per event.
//!
//! The append benches write to stores in temporary directories (the system temp dir). A store
//! is replaced by a fresh one (untimed) before a batch could make its chunk rotate, and each
//! fresh store's first chunk is created by an untimed one-event append, so a timed batch never
//! creates, syncs or renames a chunk: the time is serialize + seal + one buffered write (plus
//! one `fdatasync` in the synced figure), however long criterion runs.
#![allow(missing_docs)]

use std::hint::black_box;
use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use annal_bench::{
    APPEND_BATCH_EVENTS, BenchWriter, EVENT_JSON, bench_drafts, bench_header, bench_keys,
    create_bench_writer, print_figure,
};
use annal_engine::keys::HistoryKeys;
use annal_engine::profile::{
    HistorySchema, MAX_RECORDS_PER_CHUNK, RecordOpener, RecordSealer, TAG_LEN_BYTES, TailRule,
    read_chunk,
};
use annal_engine::store::{
    AppendReceipt, CHUNK_SIZE_LIMIT_BYTES, ChunkHandle, History, RecordLocation, StoreReader,
};
use annal_schema::{Event, EventDraft};
use criterion::{Criterion, Throughput, criterion_group};

/// Timed rounds for the FIGURE lines.
const FIGURE_ROUNDS: usize = 15;

/// Operations per timed round.
const FIGURE_ITERS_PER_ROUND: usize = 2_000;

/// Timed batches of [`APPEND_BATCH_EVENTS`] events per round of the append FIGURE lines.
const APPEND_FIGURE_BATCHES_PER_ROUND: usize = 10;

/// Criterion samples of the synced append (each batch waits for the disk, milliseconds).
const APPEND_SYNCED_SAMPLE_SIZE: usize = 20;

/// Name of the store's namespace directory inside a bench temp dir.
const NAMESPACE_DIR_NAME: &str = "ns";

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

/// A store in its own temporary directory, with its writer.
struct BenchStore {
    /// The store and its writer (dropped before the directory is removed).
    bench: BenchWriter,
    /// The temporary directory holding the store; removed on drop.
    _dir: tempfile::TempDir,
}

impl BenchStore {
    /// A fresh store whose first chunk was already created by a one-event append (untimed).
    /// Returns it with the file length of that chunk, in bytes.
    fn with_open_chunk(draft: &EventDraft) -> (Self, u64) {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("temp dir: {e}"));
        let mut bench = create_bench_writer(&dir.path().join(NAMESPACE_DIR_NAME))
            .unwrap_or_else(|e| panic!("bench store: {e}"));
        let receipt = bench
            .writer
            .append(vec![draft.clone()])
            .unwrap_or_else(|e| panic!("priming append: {e}"));
        let end = chunk_end_bytes(&receipt);
        (Self { bench, _dir: dir }, end)
    }
}

/// File length of the chunk the receipt's last record went into, after that record, in bytes.
fn chunk_end_bytes(receipt: &AppendReceipt) -> u64 {
    receipt
        .records
        .last()
        .map_or(0, |last| last.offset + last.len)
}

/// The whole append of a batch: `StoreWriter::append` of [`APPEND_BATCH_EVENTS`] drafts
/// (assign identity, serialize, seal into one buffer, one write), optionally with one sync.
struct Appending {
    /// The batch handed to the writer (cloned, untimed, before each timed append).
    drafts: Vec<EventDraft>,
    /// The store being appended to; replaced before a batch could make its chunk rotate.
    store: Option<BenchStore>,
    /// File length of the store's current chunk, in bytes.
    chunk_len_bytes: u64,
    /// Bytes the last batch added to the chunk (0 before the first batch).
    batch_len_bytes: u64,
}

impl Appending {
    fn new() -> Self {
        Self {
            drafts: bench_drafts(APPEND_BATCH_EVENTS),
            store: None,
            chunk_len_bytes: 0,
            batch_len_bytes: 0,
        }
    }

    /// The writer of a store whose current chunk has room for the next batch without
    /// rotating: a fresh store when the next batch might not fit (the margin is one more batch,
    /// so sequences growing by a digit never make a chunk overflow).
    fn store_with_room(&mut self) -> &mut BenchStore {
        let room = CHUNK_SIZE_LIMIT_BYTES.saturating_sub(self.chunk_len_bytes);
        if self.store.is_none() || room < 2 * self.batch_len_bytes {
            self.store = None;
            let (store, end) = BenchStore::with_open_chunk(&self.drafts[0]);
            self.chunk_len_bytes = end;
            self.store = Some(store);
        }
        self.store
            .as_mut()
            .unwrap_or_else(|| panic!("the bench store was just created"))
    }

    /// Appends `batches` batches (syncing after each when `synced`); returns the time spent in
    /// `append` (and `sync`) only.
    fn timed_batches(&mut self, batches: u64, synced: bool) -> Duration {
        let mut total = Duration::ZERO;
        for _ in 0..batches {
            let drafts = self.drafts.clone();
            let store = self.store_with_room();
            let writer = &mut store.bench.writer;
            let start = Instant::now();
            let receipt = writer
                .append(drafts)
                .unwrap_or_else(|e| panic!("append: {e}"));
            if synced {
                writer.sync().unwrap_or_else(|e| panic!("sync: {e}"));
            }
            total += start.elapsed();
            assert!(
                receipt.created.is_empty() && receipt.closed.is_empty(),
                "a timed batch rotated its chunk"
            );
            assert_eq!(receipt.records.len(), APPEND_BATCH_EVENTS);
            let end = chunk_end_bytes(&receipt);
            self.batch_len_bytes = end - self.chunk_len_bytes;
            self.chunk_len_bytes = end;
        }
        total
    }

    /// Median over [`FIGURE_ROUNDS`] rounds of the time per event, in ns.
    fn median_per_event_ns(&mut self, synced: bool) -> u64 {
        let mut rounds: Vec<u64> = (0..FIGURE_ROUNDS)
            .map(|_| {
                let batches = APPEND_FIGURE_BATCHES_PER_ROUND as u64;
                let elapsed = self.timed_batches(batches, synced);
                let events = u128::from(batches) * APPEND_BATCH_EVENTS as u128;
                u64::try_from(elapsed.as_nanos() / events).unwrap_or(u64::MAX)
            })
            .collect();
        rounds.sort_unstable();
        rounds[rounds.len() / 2]
    }
}

/// One record read by offset: `ChunkHandle::read_at` (pread, framing check, AEAD, v0 parse)
/// of a record the writer wrote, its chunk already open and in the page cache.
struct ReadingAt {
    /// The open chunk.
    handle: ChunkHandle<History>,
    /// Where the record read lies (the middle of a batch of [`APPEND_BATCH_EVENTS`]).
    location: RecordLocation,
    /// The store (kept until the reads end).
    _store: BenchStore,
}

impl ReadingAt {
    fn new() -> Self {
        let drafts = bench_drafts(APPEND_BATCH_EVENTS);
        let (mut store, _) = BenchStore::with_open_chunk(&drafts[0]);
        let receipt = store
            .bench
            .writer
            .append(drafts.clone())
            .unwrap_or_else(|e| panic!("append: {e}"));
        store
            .bench
            .writer
            .sync()
            .unwrap_or_else(|e| panic!("sync: {e}"));
        let location = receipt.records[APPEND_BATCH_EVENTS / 2];
        let handle = StoreReader::<History>::new(Arc::clone(&store.bench.storage))
            .open_chunk(&bench_keys(), location.chunk_id)
            .unwrap_or_else(|e| panic!("open chunk: {e}"));
        let record = handle
            .read_at(&location)
            .unwrap_or_else(|e| panic!("read_at: {e}"));
        assert_eq!(record.event.to_draft(), drafts[0]);
        Self {
            handle,
            location,
            _store: store,
        }
    }

    fn read_one(&self) -> usize {
        let record = self
            .handle
            .read_at(&self.location)
            .unwrap_or_else(|e| panic!("read_at: {e}"));
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
    let reading = ReadingAt::new();
    c.bench_function("profile/read_at_664B_event", |b| {
        b.iter(|| black_box(reading.read_one()))
    });
    let mut appending = Appending::new();
    let mut group = c.benchmark_group("profile");
    group.throughput(Throughput::Elements(APPEND_BATCH_EVENTS as u64));
    group.bench_function("append_1000x664B_events", |b| {
        b.iter_custom(|batches| appending.timed_batches(batches, false))
    });
    group.sample_size(APPEND_SYNCED_SAMPLE_SIZE);
    group.bench_function("append_synced_1000x664B_events", |b| {
        b.iter_custom(|batches| appending.timed_batches(batches, true))
    });
    group.finish();
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
    if !annal_bench::under_cargo_bench() {
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
    let reading = ReadingAt::new();
    let read_at_ns = median_ns(|| {
        black_box(reading.read_one());
    });
    let mut appending = Appending::new();
    let append_ns = appending.median_per_event_ns(false);
    let append_synced_ns = appending.median_per_event_ns(true);
    print_figure("profile.seal_ns", seal_ns, "ns");
    print_figure("profile.seal_into_ns", seal_into_ns, "ns");
    print_figure("profile.open_ns", open_ns, "ns");
    print_figure("profile.read_at_ns", read_at_ns, "ns");
    print_figure("profile.append_per_event_ns", append_ns, "ns");
    print_figure("profile.append_synced_per_event_ns", append_synced_ns, "ns");
}
