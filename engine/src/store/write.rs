//! Appending to a stream: [`StoreWriter`].
//!
//! A writer runs on a storage opened for writing, which holds the store's exclusive writer lock,
//! so one writer appends at a time (annal's or the reference's). Rules it keeps, each for a
//! reason given in `docs/design.md`:
//!
//! - **Sequences are burned once handed out.** The writer assigns `sequence` itself, at
//!   dequeue, from a high-water mark that never goes backwards: it starts above every sequence
//!   any authenticated record carries (even in a damaged chunk) and above the journal's mark
//!   ([`WriterConfig::sequence_floor`]), and it advances before anything is written, so a failed
//!   write never makes a sequence reusable.
//! - **Every generation writes its own stream** (a fresh random stream id, so a fresh `source`),
//!   to chunks it created itself; an existing chunk is never reopened for writing.
//! - **Any error once a record was sealed abandons the chunk**: its length or its next IV
//!   position is no longer known, so the next record goes into a new chunk of a new stream.
//!   Before it is abandoned after a failed append, what it holds whole is synced, so the error
//!   reports lost exactly what is not durable. A failed sync is never retried (what it covered
//!   is reported lost).
//! - Chunk ids, nonce prefixes, stream ids and the event-id key come from the operating
//!   system's random source; a seeded source exists only under `cfg(test)` and the
//!   `simulation` feature.
//!
//! A chunk is created in the sidecar's `tmp/` holding only its header, synced, renamed into the
//! stream's directory without replacing anything, and that directory synced: a chunk under its
//! final name always has a complete header, and the contract store never holds a temporary file.

use std::num::NonZeroU64;
use std::ops::RangeInclusive;
use std::sync::Arc;
use std::time::Duration;

use annal_schema::{HealthCategory, OpaqueId, Sequence, SourceUrn, WriteRuleViolation};

use super::prune::PruneCandidate;
use super::read::{ReadStoreError, StoreReader, StoreReport};
use super::stream::{EventOf, RecordIdentity, Stream};
use super::{
    CHUNK_FILE_EXTENSION, CHUNK_SIZE_LIMIT_BYTES, MAX_CHUNK_FILE_BYTES, TEMP_FILE_EXTENSION,
    chunk_file_name,
};
use crate::clock::Clock;
use crate::entropy::{Entropy, EntropyError, OsEntropy};
use crate::keys::KeyReference;
use crate::keys::material::{CHUNK_ID_LEN_BYTES, RAW_ID_LEN_BYTES, keyed_id_at, keyed_ids};
use crate::profile::{
    ChunkHeader, ChunkId, ChunkVerdict, MAX_PLAINTEXT_LEN_BYTES, MAX_RECORDS_PER_CHUNK,
    NONCE_PREFIX_LEN_BYTES, RECORD_OVERHEAD_MAX_BYTES, RecordSchema, RecordSealer, SealError,
};
use crate::seal::{ChainDigest, DIGEST_LEN_BYTES};
use crate::storage::{Area, FileName, Replace, Storage, StorageError, WriteFile};

/// Longest a chunk stays open for appends, in seconds, measured on the wall clock (and, so a
/// clock set backwards cannot keep a chunk open forever, on the monotonic clock too). Under an
/// hour, so a chunk's records span at most one retention step and seals come often.
pub const CHUNK_MAX_AGE_SECS: u64 = 30 * 60;

/// Length of the key that derives event ids, in bytes.
pub(crate) const EVENT_ID_KEY_LEN_BYTES: usize = 32;

/// The raw event ids of the sequences `first..first + count` under `id_key`, 16 bytes each,
/// into `out` (replacing what it held): [`keyed_ids`] numbered by sequence.
pub(crate) fn event_ids(
    id_key: &[u8; EVENT_ID_KEY_LEN_BYTES],
    first: u64,
    count: usize,
    out: &mut Vec<u8>,
) {
    out.clear();
    out.resize(count * RAW_ID_LEN_BYTES, 0);
    keyed_ids(id_key, first, out);
}

/// What a writer generation writes into every chunk header, its rotation limits, and the floor
/// of the sequences it may hand out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriterConfig {
    /// The credential-store name of the root key, recorded in every header.
    pub key_reference: KeyReference,
    /// The key epoch; part of every chunk key.
    pub key_epoch: NonZeroU64,
    /// Rotate before a chunk would exceed this many bytes (at most [`CHUNK_SIZE_LIMIT_BYTES`]).
    /// A chunk always takes at least one record, so a record larger than the limit gets a chunk
    /// of its own.
    pub chunk_size_limit_bytes: u64,
    /// Rotate before a chunk would hold more records (1..=[`MAX_RECORDS_PER_CHUNK`]).
    pub max_records_per_chunk: u64,
    /// Rotate a chunk this old (at most [`CHUNK_MAX_AGE_SECS`]).
    pub chunk_max_age: Duration,
    /// The highest sequence ever handed out, as the engine journal recorded it: the writer
    /// never assigns one at or below it, even if the chunks that held it are gone (deleted,
    /// pruned, unreadable).
    pub sequence_floor: Option<Sequence>,
}

impl WriterConfig {
    /// A configuration with the default limits and no journal floor.
    pub fn new(key_reference: KeyReference, key_epoch: NonZeroU64) -> Self {
        Self {
            key_reference,
            key_epoch,
            chunk_size_limit_bytes: CHUNK_SIZE_LIMIT_BYTES,
            max_records_per_chunk: MAX_RECORDS_PER_CHUNK,
            chunk_max_age: Duration::from_secs(CHUNK_MAX_AGE_SECS),
            sequence_floor: None,
        }
    }
}

/// Opening a writer failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenWriterError {
    /// The storage was opened read-only (it does not hold the writer lock).
    #[error("the store was opened read-only; a writer needs write access")]
    ReadOnly,
    /// The configuration exceeds the profile's limits.
    #[error("invalid writer configuration: {0}")]
    Config(&'static str),
    /// Listing the stream's chunks failed.
    #[error(transparent)]
    Read(#[from] ReadStoreError),
    /// Every chunk with records fails authentication at record 0: probably the wrong key.
    /// Writing with it would create chunks the right key cannot read.
    #[error(
        "every existing chunk fails authentication at its first record: probably the wrong key"
    )]
    ProbableWrongKey,
    /// Removing an abandoned temporary chunk failed.
    #[error("removing an abandoned temporary chunk: {0}")]
    Cleanup(StorageError),
    /// The random source failed.
    #[error(transparent)]
    Entropy(#[from] EntropyError),
}

/// An append or sync failed.
///
/// Nothing of a refused batch was written when the variant is [`AppendError::InvalidDraft`];
/// the others abandon the chunk being written, and `lost` names the sequences that can never
/// be acknowledged (they may or may not be found on disk later): exactly those above the
/// durable mark ([`StoreWriter::durable_through`]) after the failure, of the batch and of
/// earlier batches not yet synced.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AppendError {
    /// Draft `index` breaks annal's write rules. Nothing was written, no sequence was used.
    #[error("record {index} of the batch breaks the write rules: {violation}")]
    InvalidDraft {
        /// Index in the batch.
        index: usize,
        /// Which rule.
        violation: WriteRuleViolation,
    },
    /// Record `index` serialized larger than a record may be.
    #[error("record {index} of the batch is {len_bytes} bytes, above the plaintext limit")]
    TooLarge {
        /// Index in the batch.
        index: usize,
        /// Its serialized length.
        len_bytes: usize,
        /// Sequences that can never be acknowledged.
        lost: Option<RangeInclusive<u64>>,
    },
    /// No sequence is left (the stream reached `u64::MAX`).
    #[error("the stream has no sequence numbers left")]
    SequencesExhausted,
    /// A batch of finished events ([`StoreWriter::append_imported`]) breaks the import
    /// rules. Nothing was written, no sequence was used.
    #[error("the imported batch is refused: {0}")]
    InvalidImport(super::import::ImportViolation),
    /// Sealing failed.
    #[error("sealing a record: {source}")]
    Seal {
        /// What failed.
        source: SealError,
        /// Sequences that can never be acknowledged.
        lost: Option<RangeInclusive<u64>>,
    },
    /// The random source failed while creating a chunk.
    #[error("the random source failed while creating a chunk")]
    Entropy {
        /// Sequences that can never be acknowledged.
        lost: Option<RangeInclusive<u64>>,
    },
    /// A storage operation failed (`ENOSPC` shows as [`StorageError::NoSpace`]).
    #[error("{operation} failed: {source}")]
    Storage {
        /// What was being done (`create`, `write`, `sync`, `rename`, `sync directory`).
        operation: &'static str,
        /// The storage error.
        source: StorageError,
        /// Sequences that can never be acknowledged.
        lost: Option<RangeInclusive<u64>>,
    },
}

impl AppendError {
    /// Whether the store refused the batch before writing anything (a draft broke a write rule,
    /// or no sequence is left): none of the batch is on disk, and the chunk being written, with
    /// what waits for its sync, is as it was. Any other failure abandoned that chunk, and
    /// [`AppendError::lost`] says what is not durable.
    pub fn is_refused(&self) -> bool {
        matches!(
            self,
            Self::InvalidDraft { .. } | Self::SequencesExhausted | Self::InvalidImport(_)
        )
    }

    /// The sequences this failure made impossible to acknowledge.
    pub fn lost(&self) -> Option<&RangeInclusive<u64>> {
        match self {
            Self::InvalidDraft { .. } | Self::SequencesExhausted | Self::InvalidImport(_) => None,
            Self::TooLarge { lost, .. }
            | Self::Seal { lost, .. }
            | Self::Entropy { lost }
            | Self::Storage { lost, .. } => lost.as_ref(),
        }
    }

    /// The health category this failure shows in status: `storage_unavailable` for anything
    /// the disk or the random source did (the writer stays usable and the next batch starts a
    /// new chunk once the fault clears), `writer_stopped` when no sequence is left, none for a
    /// refused draft (a caller's bug, not the store's state).
    pub fn health_category(&self) -> Option<HealthCategory> {
        match self {
            Self::InvalidDraft { .. } | Self::TooLarge { .. } | Self::InvalidImport(_) => None,
            Self::SequencesExhausted => Some(HealthCategory::WriterStopped),
            Self::Seal { .. } | Self::Entropy { .. } | Self::Storage { .. } => {
                Some(HealthCategory::StorageUnavailable)
            }
        }
    }

    /// Whether the disk is full (capture should count drops until space returns).
    pub fn is_no_space(&self) -> bool {
        matches!(
            self,
            Self::Storage {
                source: StorageError::NoSpace,
                ..
            }
        )
    }

    fn with_lost(mut self, range: Option<RangeInclusive<u64>>) -> Self {
        match &mut self {
            Self::TooLarge { lost, .. }
            | Self::Seal { lost, .. }
            | Self::Entropy { lost }
            | Self::Storage { lost, .. } => *lost = range,
            Self::InvalidDraft { .. } | Self::SequencesExhausted | Self::InvalidImport(_) => {}
        }
        self
    }
}

fn storage_error(operation: &'static str) -> impl FnOnce(StorageError) -> AppendError {
    move |source| AppendError::Storage {
        operation,
        source,
        lost: None,
    }
}

/// Where one record was written: what the derived index and the seals need, and what
/// [`ChunkHandle::read_at`](super::ChunkHandle::read_at) takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RecordLocation {
    /// The chunk holding it.
    pub chunk_id: ChunkId,
    /// Its position in the chunk (its IV counter).
    pub position: u64,
    /// Byte offset of the record item in the chunk file.
    pub offset: u64,
    /// Length of the record item in bytes.
    pub len: u64,
    /// Its sequence.
    pub sequence: u64,
}

/// A torn tail the writer found when it opened: the bytes after the last authenticated record
/// of a stream's newest chunk, which every reader leaves out. The writer never appends to that
/// chunk again (each generation writes new chunks), so the tail stays as the crash left it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TornTailFound {
    /// The chunk.
    pub chunk_id: ChunkId,
    /// How many bytes follow its last authenticated record (>= 1).
    pub bytes_left_out: u64,
    /// What pruning needs of it, from its authenticated records as the open read them (`None`
    /// when it has none): no seal will ever vouch for a torn chunk, so this scan is what lets
    /// retention and eviction take it ([`super::Pruner::add_torn`]).
    pub prunable: Option<PruneCandidate>,
}

/// The complete, non-empty chunks of `report` that no seal in `sealed` names, as closed chunks
/// (see [`StoreWriter::unsealed_at_open`]), with the chain digest of their exact bytes (read
/// again: the report keeps no bytes; a sealed chunk, which a whole-stream read also reports, is
/// never read twice). A chunk whose file changed length since the report is left out.
fn unsealed_complete_chunks<S: Stream>(
    storage: &dyn Storage,
    report: &StoreReport<EventOf<S>>,
    sealed: &[SealedChunk],
) -> Vec<ClosedChunk> {
    let mut closed: Vec<ClosedChunk> = report
        .chunks
        .iter()
        .filter(|chunk| !sealed.iter().any(|s| Some(s.chunk_id) == chunk.chunk_id))
        .filter_map(|chunk| {
            let ChunkVerdict::Complete { records } = &chunk.verdict else {
                return None;
            };
            let (first, last) = (records.first()?, records.last()?);
            let (chunk_id, header) = (chunk.chunk_id?, chunk.header.as_ref()?);
            let file = storage
                .open_read(S::AREA, &chunk_file_name(chunk_id))
                .ok()?;
            let bytes = crate::storage::read_bounded(file.as_ref(), MAX_CHUNK_FILE_BYTES)
                .ok()?
                .ok()?;
            if bytes.len() as u64 != chunk.len_bytes {
                return None;
            }
            let mut chain = ChainDigest::new(bytes.get(..header.bytes.len())?);
            for record in records {
                let start = usize::try_from(record.offset).ok()?;
                let end = start.checked_add(usize::try_from(record.len).ok()?)?;
                chain.push(bytes.get(start..end)?);
            }
            let time = |r: &crate::profile::Record<EventOf<S>>| {
                <S::Schema as RecordSchema>::time_since_epoch(&r.event)
            };
            let sequence = |r: &crate::profile::Record<EventOf<S>>| {
                <S::Schema as RecordSchema>::sequence(&r.event)
            };
            Some(ClosedChunk {
                chunk_id,
                stream_id: OpaqueId::new(header.header.stream_id()).ok()?,
                records: records.len() as u64,
                len_bytes: chunk.len_bytes,
                first_sequence: sequence(first),
                last_sequence: sequence(last),
                first_time: time(first),
                last_time: time(last),
                latest_time: records.iter().map(time).max()?,
                chain: chain.value(),
            })
        })
        .collect();
    closed.sort_by_key(|c| c.first_sequence);
    closed
}

/// A torn chunk's facts for pruning, from its authenticated `records` (none: `None`);
/// `len_bytes` is its whole file, torn tail included (what eviction frees, and what the pass
/// checks the file still has before recording it).
fn torn_prune_candidate<S: Stream>(
    chunk_id: ChunkId,
    records: &[crate::profile::Record<EventOf<S>>],
    len_bytes: u64,
) -> Option<PruneCandidate> {
    let time = |r: &crate::profile::Record<EventOf<S>>| {
        <S::Schema as RecordSchema>::time_since_epoch(&r.event)
    };
    let last = records.last()?;
    Some(PruneCandidate {
        chunk_id,
        last_sequence: <S::Schema as RecordSchema>::sequence(&last.event),
        last_time: time(last),
        latest_time: records.iter().map(time).max(),
        records: records.len() as u64,
        len_bytes,
    })
}

/// What a verified seal says of its chunk: enough for a writer to open the store without
/// reading that chunk ([`StoreWriter::open_skipping_sealed`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealedChunk {
    /// The chunk.
    pub chunk_id: ChunkId,
    /// Its length when sealed: a file of another length is read.
    pub len_bytes: u64,
    /// Its stream id, as its header spells it.
    pub stream_id: String,
    /// Its first record's sequence.
    pub first_sequence: u64,
    /// Its last record's sequence (the writer's floor).
    pub last_sequence: u64,
}

/// A chunk the writer closed: complete and synced; the seal of a later issue is written from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClosedChunk {
    /// The chunk.
    pub chunk_id: ChunkId,
    /// Its stream.
    pub stream_id: OpaqueId,
    /// How many records it holds.
    pub records: u64,
    /// Its file length in bytes.
    pub len_bytes: u64,
    /// Sequence of its first record.
    pub first_sequence: u64,
    /// Sequence of its last record.
    pub last_sequence: u64,
    /// Event time of its first record (since the epoch).
    pub first_time: Duration,
    /// Event time of its last record (since the epoch).
    pub last_time: Duration,
    /// The latest event time among its records (since the epoch): after `last_time` when
    /// captures raced or the clock was set back. Retention prunes a chunk only below it.
    pub latest_time: Duration,
    /// The chain digest over the exact bytes written (header, then every record item): what
    /// its seal attests, computed while writing so that sealing never reads the chunk back.
    pub chain: [u8; DIGEST_LEN_BYTES],
}

/// What an append did. The records are written, not yet durable: [`StoreWriter::sync`] makes
/// them so (group commit).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendReceipt<E = annal_schema::Event> {
    /// Where each record of the batch went, in batch order.
    pub records: Vec<RecordLocation>,
    /// The events as written (ids, source and sequence assigned), in batch order, moved out of
    /// the writer rather than dropped: the query path's hot cache keeps them, so the newest
    /// events are answered without decrypting anything.
    pub events: Vec<E>,
    /// Records of an earlier append that failed but wrote them durably all the same (to a
    /// chunk it closed before failing), in sequence order, all below this batch's: reported
    /// once, here, so the shell can index them in this life too.
    pub recovered: Vec<RecordLocation>,
    /// The events of [`AppendReceipt::recovered`], in the same order.
    pub recovered_events: Vec<E>,
    /// Chunks closed (rotated away from, synced) during this append, after any that an earlier,
    /// failed append closed before it failed (complete and synced all the same, so they are
    /// reported here, to be sealed, rather than lost with that append's receipt).
    pub closed: Vec<ClosedChunk>,
    /// Chunks created during this append.
    pub created: Vec<ChunkId>,
}

impl<E> Default for AppendReceipt<E> {
    fn default() -> Self {
        Self {
            records: Vec::new(),
            events: Vec::new(),
            recovered: Vec::new(),
            recovered_events: Vec::new(),
            closed: Vec::new(),
            created: Vec::new(),
        }
    }
}

/// The chunk the writer is appending to.
struct OpenChunk {
    /// The file, created by this writer generation.
    file: Box<dyn WriteFile>,
    /// Its id.
    chunk_id: ChunkId,
    /// Encrypts its next records; owns the position counter.
    sealer: RecordSealer,
    /// Its file length in bytes.
    len_bytes: u64,
    /// Wall-clock time it was created, for rotation by age.
    created_wall: Duration,
    /// Monotonic time it was created, for rotation by age.
    created_monotonic: Duration,
    /// Sequence and time of its first record.
    first: Option<(u64, Duration)>,
    /// Sequence and time of its last record.
    last: Option<(u64, Duration)>,
    /// The latest event time among its records.
    latest_time: Duration,
    /// First sequence written to it since its last successful sync.
    unsynced_first: Option<u64>,
    /// The last sequence whose record is whole in the file (its write returned): what a sync
    /// after a failed append can still make durable.
    written_last: Option<u64>,
    /// A sync of this file failed: it is never synced again (a retried fsync may report
    /// success for pages the kernel dropped).
    sync_failed: bool,
    /// The chain digest over its header and every record written to it, for its seal.
    chain: ChainDigest,
}

/// One writer generation's identity: its stream and the key its event ids are derived with.
struct Generation {
    /// The stream id of this generation's chunks.
    stream_id: OpaqueId,
    /// The same as its records' `source`, made once per generation.
    source: SourceUrn,
    /// Event ids are [`keyed_ids`] under this key, numbered by sequence ([`event_ids`]): unique
    /// within the stream (sequences never repeat) and unguessable, with no system call per
    /// event, and a batch's ids are one read.
    id_key: [u8; EVENT_ID_KEY_LEN_BYTES],
}

/// One record of a batch: a draft the writer gives its identity (capture), or a finished event
/// that keeps its own (an import, [`StoreWriter::append_imported`]).
enum BatchItem<S: Stream> {
    Draft(S::Draft),
    Finished(EventOf<S>),
}

/// A chunk this close to its size limit (the last 1/8) is closed early after a sync
/// ([`StoreWriter::rotate_if_nearly_full`]): about one group commit's worth of records at full
/// rate on a 4 MiB chunk, so a busy writer usually rotates when it costs nothing.
pub const EARLY_ROTATION_HEADROOM_FRACTION: u64 = 8;

/// The single writer of one stream of a store.
pub struct StoreWriter<S: Stream> {
    /// The store's storage, opened for writing.
    storage: Arc<dyn Storage>,
    /// The stream's keys (never the root key).
    keys: S::Keys,
    /// Header fields and limits.
    config: WriterConfig,
    /// For rotation by age.
    clock: Arc<dyn Clock>,
    /// Chunk ids, nonce prefixes, stream ids, event-id keys.
    entropy: Box<dyn Entropy + Send>,
    /// The current generation.
    generation: Generation,
    /// Set when a chunk of the current generation was abandoned: the next chunk must start a
    /// new generation first.
    generation_spent: bool,
    /// Highest sequence handed out (burned); never decreases.
    high_water: Option<Sequence>,
    /// Highest sequence covered by a successful sync of this writer.
    durable_through: Option<Sequence>,
    /// The chunk being appended to; `None` before the first append of a generation.
    current: Option<OpenChunk>,
    /// Scratch: the plaintext of the record being sealed.
    plaintext: Vec<u8>,
    /// Scratch: the raw event ids of the batch being written ([`event_ids`]).
    ids: Vec<u8>,
    /// Scratch: the sealed records of the current chunk not yet written.
    batch: Vec<u8>,
    /// Chunks closed by appends that then failed (say, the next chunk could not be created):
    /// reported by the next successful append's receipt.
    closed_unreported: Vec<ClosedChunk>,
    /// Records of appends that then failed which are durable all the same (written to a chunk
    /// the append closed), with their events: the next successful append's receipt reports
    /// them ([`AppendReceipt::recovered`]).
    written_unreported: (Vec<RecordLocation>, Vec<EventOf<S>>),
    /// The torn tails found at open, for the shell to record.
    torn_tails_at_open: Vec<TornTailFound>,
    /// Complete chunks of earlier generations that no seal covers, found by
    /// [`StoreWriter::open_skipping_sealed`]: a crash's last chunks, to be sealed now.
    unsealed_at_open: Vec<ClosedChunk>,
    /// What the store itself showed at open (sequences and control events), before the
    /// caller's floor: [`OpenState`].
    open_state: OpenState,
    /// The chunk files of earlier generations this open read (those a seal vouched for were
    /// not read): what a crashed writer may have left in the page cache only
    /// ([`StoreWriter::sync_chunks_read_at_open`]).
    chunks_read_at_open: Vec<FileName>,
    /// [`Self::high_water`] as opened: while it is still this, nothing was handed out, and
    /// [`StoreWriter::release_floor`] may lower it.
    opened_high_water: Option<Sequence>,
}

/// What a writer learned of the stream's own records when it opened, apart from the floor its
/// caller gave it: the sequence rule and the contract's lifecycle state need both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OpenState {
    /// The highest sequence the store holds: of any authenticated record read, and of the
    /// seals of the chunks not read. Below [`StoreWriter::high_water`] when the caller's floor
    /// (the journal's reservation) is above it: sequences skipped after a crash.
    pub stored_high_water: Option<Sequence>,
    /// The newest lifecycle `control` event among the records read (by `data.sequence`; not
    /// in the chunks a seal vouched for, which were not read): another implementation's
    /// disable or pause, or annal's own in a crash's unsealed chunk.
    pub newest_control: Option<ControlRead>,
}

/// A lifecycle `control` event read at open: its operation and its `data.sequence`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControlRead {
    /// `enable`, `disable`, `pause`, `resume` or `delete` (never `flush`).
    pub operation: annal_schema::ControlOperation,
    /// Its `data.sequence`.
    pub sequence: u64,
}

/// [`OpenState`] of `report`: its highest sequence and its newest lifecycle control event.
fn open_state_of<S: Stream>(report: &StoreReport<EventOf<S>>) -> OpenState {
    use crate::profile::RecordSchema as _;
    let newest_control = report
        .chunks
        .iter()
        .flat_map(|chunk| chunk.verdict.records())
        .filter_map(|record| {
            S::lifecycle_control(&record.event).map(|operation| ControlRead {
                operation,
                sequence: S::Schema::sequence(&record.event),
            })
        })
        .max_by_key(|read| read.sequence);
    OpenState {
        stored_high_water: report.last_authenticated_sequence().and_then(Sequence::new),
        newest_control,
    }
}

impl<S: Stream> std::fmt::Debug for StoreWriter<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreWriter")
            .field("stream", &S::NAME)
            .field("stream_id", &self.generation.stream_id)
            .field("high_water", &self.high_water)
            .field("durable_through", &self.durable_through)
            .finish_non_exhaustive()
    }
}

/// The temporary name of chunk `id` of stream `S` in `tmp/`. The stream's name comes first, so
/// the history and journal writers (which share `tmp/`) each clean up only their own.
fn temp_file_name<S: Stream>(id: ChunkId) -> FileName {
    FileName::from_known(format!(
        "{}.{}{CHUNK_FILE_EXTENSION}{TEMP_FILE_EXTENSION}",
        S::NAME,
        id.to_hex()
    ))
}

fn is_temp_file_of<S: Stream>(name: &str) -> bool {
    name.strip_prefix(S::NAME)
        .and_then(|n| n.strip_prefix('.'))
        .and_then(|n| n.strip_suffix(TEMP_FILE_EXTENSION))
        .and_then(super::parse_chunk_file_name)
        .is_some()
}

impl<S: Stream> StoreWriter<S> {
    /// Opens the writer of stream `S` on `storage` (which must hold the writer lock), with
    /// chunk ids and nonces from the operating system's random source. Removes this stream's
    /// abandoned temporary chunks, reads the existing chunks to learn the highest sequence, and
    /// refuses a probably wrong key.
    pub fn open(
        storage: Arc<dyn Storage>,
        keys: S::Keys,
        config: WriterConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, OpenWriterError> {
        Self::open_inner(storage, keys, config, clock, Box::new(OsEntropy))
    }

    /// [`Self::open`] with an injected random source, for tests and deterministic simulation
    /// only: a seeded source repeats chunk ids, and with them (key, IV) pairs, across runs.
    #[cfg(any(test, feature = "simulation"))]
    pub fn open_with_entropy(
        storage: Arc<dyn Storage>,
        keys: S::Keys,
        config: WriterConfig,
        clock: Arc<dyn Clock>,
        entropy: Box<dyn Entropy + Send>,
    ) -> Result<Self, OpenWriterError> {
        Self::open_inner(storage, keys, config, clock, entropy)
    }

    fn open_inner(
        storage: Arc<dyn Storage>,
        keys: S::Keys,
        config: WriterConfig,
        clock: Arc<dyn Clock>,
        entropy: Box<dyn Entropy + Send>,
    ) -> Result<Self, OpenWriterError> {
        check_open(storage.as_ref(), &config)?;
        let report = StoreReader::<S>::new(Arc::clone(&storage)).read(&keys)?;
        Self::open_from_report(storage, keys, config, clock, entropy, &report)
    }

    /// [`Self::open`] without reading the chunks `sealed` vouches for: a chunk whose verified
    /// seal matches its current length is complete, and all the writer needs of it (its last
    /// sequence) is in the seal; only the other chunks are read (after a clean stop, none). The
    /// reader's "only the newest chunk of its stream may be torn" rule needs every chunk of a
    /// stream, so when a skipped chunk is newer than a read chunk of its own stream the whole
    /// stream is read as [`Self::open`] does.
    pub fn open_skipping_sealed(
        storage: Arc<dyn Storage>,
        keys: S::Keys,
        mut config: WriterConfig,
        clock: Arc<dyn Clock>,
        sealed: &[SealedChunk],
    ) -> Result<Self, OpenWriterError> {
        check_open(storage.as_ref(), &config)?;
        let reader = StoreReader::<S>::new(Arc::clone(&storage));
        let vouched = |id: ChunkId, len: u64| {
            sealed
                .iter()
                .any(|s| s.chunk_id == id && s.len_bytes == len)
        };
        let (report, skipped) = reader.read_except(&keys, &vouched)?;
        let skipped: Vec<&SealedChunk> = sealed
            .iter()
            .filter(|s| skipped.contains(&s.chunk_id))
            .collect();
        let exact = skipped.iter().all(|s| {
            !report.chunks.iter().any(|c| {
                c.header
                    .as_ref()
                    .is_some_and(|h| h.header.stream_id() == s.stream_id)
                    && c.last_authenticated_sequence
                        .is_some_and(|last| last < s.first_sequence)
            })
        });
        let report = if exact {
            let sealed_floor = skipped
                .iter()
                .map(|s| s.last_sequence)
                .max()
                .and_then(Sequence::new);
            config.sequence_floor = config.sequence_floor.max(sealed_floor);
            report
        } else {
            reader.read(&keys)?
        };
        let unsealed = unsealed_complete_chunks::<S>(storage.as_ref(), &report, sealed);
        let sealed_high_water = skipped
            .iter()
            .map(|s| s.last_sequence)
            .max()
            .and_then(Sequence::new);
        let mut writer =
            Self::open_from_report(storage, keys, config, clock, Box::new(OsEntropy), &report)?;
        writer.unsealed_at_open = unsealed;
        writer.open_state.stored_high_water =
            writer.open_state.stored_high_water.max(sealed_high_water);
        Ok(writer)
    }

    /// The complete chunks of earlier generations that [`Self::open_skipping_sealed`] read
    /// (no seal vouched for them), in sequence order, as closed chunks ready to seal: the last
    /// chunk of a crashed generation, which its writer never closed. A torn chunk is not among
    /// them (its file holds bytes past its last record). The caller seals those its seal chain
    /// may take, and must skip any that already has a seal file.
    pub fn unsealed_at_open(&self) -> &[ClosedChunk] {
        &self.unsealed_at_open
    }

    /// [`Self::open`] for a caller that has just read the stream itself with `keys` (the
    /// journal replays every record at open): the writer learns what it needs from that
    /// `report` instead of reading every chunk a second time. The report must come from this
    /// `storage` while its writer lock was held, so nothing was written since.
    pub fn open_after_read(
        storage: Arc<dyn Storage>,
        keys: S::Keys,
        config: WriterConfig,
        clock: Arc<dyn Clock>,
        report: &StoreReport<EventOf<S>>,
    ) -> Result<Self, OpenWriterError> {
        check_open(storage.as_ref(), &config)?;
        Self::open_from_report(storage, keys, config, clock, Box::new(OsEntropy), report)
    }

    fn open_from_report(
        storage: Arc<dyn Storage>,
        keys: S::Keys,
        config: WriterConfig,
        clock: Arc<dyn Clock>,
        mut entropy: Box<dyn Entropy + Send>,
        report: &StoreReport<EventOf<S>>,
    ) -> Result<Self, OpenWriterError> {
        // Temporary chunks live outside the chunk area the report read, so removing them after
        // the read changes nothing it saw.
        remove_abandoned_temp_chunks::<S>(storage.as_ref())?;
        if report.probable_wrong_key {
            return Err(OpenWriterError::ProbableWrongKey);
        }
        let torn_tails_at_open = report
            .chunks
            .iter()
            .filter_map(|chunk| match chunk.verdict {
                ChunkVerdict::TornTail {
                    ref records,
                    valid_len,
                } => {
                    let chunk_id = chunk.chunk_id?;
                    Some(TornTailFound {
                        chunk_id,
                        bytes_left_out: chunk
                            .len_bytes
                            .checked_sub(valid_len)
                            .filter(|&n| n > 0)?,
                        prunable: torn_prune_candidate::<S>(chunk_id, records, chunk.len_bytes),
                    })
                }
                _ => None,
            })
            .collect();
        let on_disk = report.last_authenticated_sequence().and_then(Sequence::new);
        let high_water = on_disk.max(config.sequence_floor);
        let generation = new_generation(entropy.as_mut())?;
        Ok(Self {
            storage,
            keys,
            config,
            clock,
            entropy,
            generation,
            generation_spent: false,
            high_water,
            durable_through: None,
            current: None,
            plaintext: Vec::with_capacity(1024),
            ids: Vec::new(),
            batch: Vec::new(),
            closed_unreported: Vec::new(),
            written_unreported: (Vec::new(), Vec::new()),
            torn_tails_at_open,
            unsealed_at_open: Vec::new(),
            open_state: open_state_of::<S>(report),
            chunks_read_at_open: report
                .chunks
                .iter()
                .filter_map(|chunk| chunk.chunk_id.map(chunk_file_name))
                .collect(),
            opened_high_water: high_water,
        })
    }

    /// Makes every chunk file this open read durable (`Storage::sync_file`): after a crash in
    /// the same boot, what the crashed writer wrote and never synced is in the page cache, and
    /// a reader may have seen it; synced, it stays, whatever happens next. The first failure
    /// stops and is returned (then nothing may be assumed durable).
    pub fn sync_chunks_read_at_open(&self) -> Result<(), StorageError> {
        for name in &self.chunks_read_at_open {
            self.storage.sync_file(S::AREA, name)?;
        }
        Ok(())
    }

    /// Lowers the floor the caller gave at open to `high_water` (never below the highest
    /// sequence the store holds), so the next record gets the one after it: the caller
    /// released the rest of its reservation (durably, first). Only before anything was handed
    /// out; returns whether it was lowered.
    pub fn release_floor(&mut self, high_water: Option<Sequence>) -> bool {
        if self.high_water != self.opened_high_water {
            return false;
        }
        let lowered = high_water.max(self.open_state.stored_high_water);
        if lowered >= self.high_water {
            return false;
        }
        self.high_water = lowered;
        self.opened_high_water = lowered;
        true
    }

    /// What the store itself showed when this writer opened ([`OpenState`]).
    pub fn open_state(&self) -> OpenState {
        self.open_state
    }

    /// The torn tails found when this writer opened (in the store's chunk order).
    pub fn torn_tails_at_open(&self) -> &[TornTailFound] {
        &self.torn_tails_at_open
    }

    /// The highest sequence handed out so far (the mark the journal persists).
    pub fn high_water(&self) -> Option<Sequence> {
        self.high_water
    }

    /// The sequence the next append's first record gets (`None`: none is left), so a caller
    /// can tell which of its events a failed append's `lost` range names.
    pub fn next_sequence(&self) -> Option<Sequence> {
        match self.high_water {
            None => Some(Sequence::FIRST),
            Some(mark) => mark.next(),
        }
    }

    /// What the in-flight bound counts from (`history::State::must_sync_first`): the highest
    /// sequence of a record this writer wrote and synced, or the floor it opened at (every
    /// sequence at or below it was durable, recorded, or never handed out in this life).
    pub fn durable_base(&self) -> Option<Sequence> {
        self.durable_through.max(self.opened_high_water)
    }

    /// The highest sequence made durable by this writer. Every record this writer wrote with a
    /// sequence at or below it is durable, except those an error reported `lost`.
    pub fn durable_through(&self) -> Option<Sequence> {
        self.durable_through
    }

    /// The stream id of the current generation.
    pub fn stream_id(&self) -> &OpaqueId {
        &self.generation.stream_id
    }

    /// The chunk being appended to, if any: the one chunk pruning must never touch.
    pub fn current_chunk(&self) -> Option<ChunkId> {
        self.current.as_ref().map(|c| c.chunk_id)
    }

    /// Rotates before a chunk would exceed `bytes` from the next record on (at most
    /// [`CHUNK_SIZE_LIMIT_BYTES`]; a larger value is taken as that). The quota sets it
    /// (`store::prune::chunk_size_limit_for_quota`) so eviction always has whole chunks to take.
    pub fn set_chunk_size_limit(&mut self, bytes: u64) {
        self.config.chunk_size_limit_bytes = bytes.min(CHUNK_SIZE_LIMIT_BYTES);
    }

    /// Appends a batch. Checks every draft against the write rules first (nothing is written or
    /// burned if one fails); then assigns the next sequences (burned from here on, whatever
    /// happens), serializes each event once, seals it into one buffer per chunk and writes
    /// that buffer with one write. Rotates at the size, count and age limits. Not synced.
    pub fn append(
        &mut self,
        drafts: Vec<S::Draft>,
    ) -> Result<AppendReceipt<EventOf<S>>, AppendError> {
        for (index, draft) in drafts.iter().enumerate() {
            S::check_write_rules(draft)
                .map_err(|violation| AppendError::InvalidDraft { index, violation })?;
        }
        let Some(count) = NonZeroU64::new(drafts.len() as u64) else {
            return Ok(AppendReceipt::default());
        };
        let first = self
            .next_sequence()
            .ok_or(AppendError::SequencesExhausted)?;
        let last = first
            .get()
            .checked_add(count.get() - 1)
            .and_then(Sequence::new)
            .ok_or(AppendError::SequencesExhausted)?;
        self.high_water = Some(last);
        let batch = first.get()..=last.get();
        let mut receipt = AppendReceipt::default();
        let len = drafts.len();
        let items = drafts.into_iter().map(BatchItem::Draft);
        match self.write_batch(items, len, first.get(), &mut receipt) {
            Ok(()) => {
                (receipt.recovered, receipt.recovered_events) =
                    std::mem::take(&mut self.written_unreported);
                Ok(receipt)
            }
            Err(error) => {
                self.salvage_written();
                // What this append wrote and is durable now (a chunk it closed, or the salvage)
                // waits for the next receipt; what is not, is in `lost` below.
                let durable = self.durable_through.map_or(0, |d| d.get());
                let kept = receipt
                    .records
                    .iter()
                    .take_while(|r| r.sequence <= durable)
                    .count();
                receipt.records.truncate(kept);
                receipt.events.truncate(kept);
                self.written_unreported.0.append(&mut receipt.records);
                self.written_unreported.1.append(&mut receipt.events);
                let unsynced = self.abandon();
                // What is durable is not lost: the chunks this append closed were synced on
                // close, and the salvage made what was whole in the current one durable.
                let lost_first = unsynced
                    .map_or(*batch.start(), |u| u.min(*batch.start()))
                    .max(durable + 1);
                Err(error
                    .with_lost((lost_first <= *batch.end()).then(|| lost_first..=*batch.end())))
            }
        }
    }

    /// After a failed append, before the chunk is abandoned: syncs the records written whole
    /// to it since its last sync, so the failure costs only what it did not write (an earlier
    /// batch waiting for its group commit is not lost with it). Never a second sync of a file
    /// whose sync failed; a failed salvage changes nothing (what it covered is reported lost).
    fn salvage_written(&mut self) {
        let Some(current) = self.current.as_mut() else {
            return;
        };
        let (Some(unsynced_first), Some(written_last)) =
            (current.unsynced_first, current.written_last)
        else {
            return;
        };
        if current.sync_failed || unsynced_first > written_last {
            return;
        }
        match current.file.sync() {
            Ok(()) => {
                self.durable_through = Sequence::new(written_last).max(self.durable_through);
            }
            Err(_) => current.sync_failed = true,
        }
    }

    /// Makes everything appended durable (`fdatasync` of the current chunk; earlier chunks were
    /// synced when the writer rotated away from them) and returns the durable mark. A failed
    /// sync abandons the chunk: it is never retried, and what it covered is reported lost.
    pub fn sync(&mut self) -> Result<Option<Sequence>, AppendError> {
        let Some(current) = self.current.as_mut() else {
            return Ok(self.durable_through);
        };
        if current.unsynced_first.is_none() {
            return Ok(self.durable_through);
        }
        match current.file.sync() {
            Ok(()) => {
                current.unsynced_first = None;
                self.durable_through = current
                    .last
                    .and_then(|(sequence, _)| Sequence::new(sequence))
                    .max(self.durable_through);
                Ok(self.durable_through)
            }
            Err(source) => {
                let last = current.last.map(|(s, _)| s);
                let unsynced = self.abandon();
                let lost = unsynced.zip(last).map(|(a, b)| a..=b);
                Err(AppendError::Storage {
                    operation: "sync",
                    source,
                    lost,
                })
            }
        }
    }

    /// Closes the current chunk if it has reached its age limit (the writer actor calls this on
    /// its tick, so an idle chunk does not stay open past its age). Returns the closed chunk.
    pub fn rotate_if_due(&mut self) -> Result<Option<ClosedChunk>, AppendError> {
        let due = self
            .current
            .as_ref()
            .is_some_and(|c| c.first.is_some() && self.is_aged(c));
        if !due {
            return Ok(None);
        }
        self.close_or_abandon()
    }

    /// Closes the current chunk early when it is within 1/[`EARLY_ROTATION_HEADROOM_FRACTION`]
    /// of its size limit and everything in it is durable. Called right after a sync, the close
    /// needs no sync of its own, whereas the rotation an append runs into must first sync what
    /// the old chunk holds (docs/benchmarks.md: about half a rotation's cost on a commit's path).
    /// The next append creates the next chunk. Returns the closed chunk.
    pub fn rotate_if_nearly_full(&mut self) -> Result<Option<ClosedChunk>, AppendError> {
        let limit = self.config.chunk_size_limit_bytes;
        let early_from = limit - limit / EARLY_ROTATION_HEADROOM_FRACTION;
        let due = self.current.as_ref().is_some_and(|c| {
            c.first.is_some() && c.unsynced_first.is_none() && c.len_bytes >= early_from
        });
        if !due {
            return Ok(None);
        }
        self.close_or_abandon()
    }

    /// Closes the current chunk now, whatever its age or size (a clean stop: the writer seals
    /// it, so the next open finds every chunk of this generation sealed and reads none of them).
    /// The next append, if any, starts a new chunk. Returns the closed chunk (`None` when no
    /// chunk holds records).
    pub fn close(&mut self) -> Result<Option<ClosedChunk>, AppendError> {
        if self.current.as_ref().is_none_or(|c| c.first.is_none()) {
            return Ok(None);
        }
        self.close_or_abandon()
    }

    /// Closes the current chunk; if that fails, abandons it and reports what it held unsynced
    /// as lost.
    fn close_or_abandon(&mut self) -> Result<Option<ClosedChunk>, AppendError> {
        self.close_current().map_err(|e| {
            let unsynced = self.abandon();
            e.with_lost(unsynced.map(|u| u..=self.high_water.map_or(u, Sequence::get)))
        })
    }

    /// Drops the current chunk (never to be appended to again) and starts a new generation, so
    /// the next chunk belongs to a new stream: the abandoned chunk stays the newest of its own
    /// stream, the one place a torn tail is a crash. Returns the first unsynced sequence it
    /// held.
    fn abandon(&mut self) -> Option<u64> {
        self.batch.clear();
        let unsynced = self.current.take().and_then(|c| c.unsynced_first);
        self.generation_spent = true;
        unsynced
    }

    fn is_aged(&self, chunk: &OpenChunk) -> bool {
        let max = self.config.chunk_max_age;
        self.clock
            .now_since_epoch()
            .saturating_sub(chunk.created_wall)
            >= max
            || self
                .clock
                .monotonic()
                .saturating_sub(chunk.created_monotonic)
                >= max
    }

    /// Serializes, seals and writes the batch of `len` items whose first sequence is `first`
    /// (drafts take `first`, `first + 1`, ...; finished events keep theirs).
    fn write_batch(
        &mut self,
        items: impl Iterator<Item = BatchItem<S>>,
        len: usize,
        first: u64,
        receipt: &mut AppendReceipt<EventOf<S>>,
    ) -> Result<(), AppendError> {
        let mut pending: Vec<RecordLocation> = Vec::with_capacity(len);
        let mut pending_events: Vec<EventOf<S>> = Vec::with_capacity(len);
        self.batch.clear();
        // The chunk first: starting one may start a new generation, and each record's `source`
        // must name the stream of the chunk it goes into. Rotation below keeps the generation.
        if self.current.is_none() {
            receipt.created.push(self.create_chunk()?);
        }
        // The age limit is checked once per batch (two clock reads), not per record.
        let mut aged = self.current.as_ref().is_some_and(|c| self.is_aged(c));
        // Every id of the batch at once (rotation below keeps the generation, so its key).
        event_ids(&self.generation.id_key, first, len, &mut self.ids);
        for (index, item) in items.enumerate() {
            let (sequence, event) = match item {
                BatchItem::Draft(draft) => {
                    let sequence = first + index as u64;
                    let identity = RecordIdentity {
                        id: OpaqueId::from_bytes(keyed_id_at(&self.ids, index)),
                        stream_id: &self.generation.stream_id,
                        source: &self.generation.source,
                        sequence: Sequence::new(sequence).ok_or(AppendError::SequencesExhausted)?,
                    };
                    (sequence, S::finish(draft, &identity))
                }
                BatchItem::Finished(event) => {
                    (<S::Schema as RecordSchema>::sequence(&event), event)
                }
            };
            self.plaintext.clear();
            S::encode(&event, &mut self.plaintext);
            if self.plaintext.len() > MAX_PLAINTEXT_LEN_BYTES {
                return Err(AppendError::TooLarge {
                    index,
                    len_bytes: self.plaintext.len(),
                    lost: None,
                });
            }
            let bound = self.plaintext.len() as u64 + RECORD_OVERHEAD_MAX_BYTES;
            if !self.fits(bound, aged) {
                self.flush(&mut pending, &mut pending_events, receipt)?;
                if let Some(closed) = self.close_current()? {
                    // Kept by the writer until the receipt is returned, so a failure below
                    // (the next chunk not created) does not lose it.
                    self.closed_unreported.push(closed);
                }
                receipt.created.push(self.create_chunk()?);
                aged = false;
            }
            let current = self.current.as_mut().ok_or(AppendError::Seal {
                source: SealError::ChunkFull,
                lost: None,
            })?;
            let position = current.sealer.next_position();
            let range = current
                .sealer
                .seal_into(&self.plaintext, &mut self.batch)
                .map_err(|source| AppendError::Seal { source, lost: None })?;
            debug_assert!(range.len() as u64 <= bound, "record exceeds its size bound");
            let time = <S::Schema as RecordSchema>::time_since_epoch(&event);
            current.first.get_or_insert((sequence, time));
            current.last = Some((sequence, time));
            current.latest_time = current.latest_time.max(time);
            current.unsynced_first.get_or_insert(sequence);
            pending.push(RecordLocation {
                chunk_id: current.chunk_id,
                position,
                offset: current.len_bytes + range.start as u64,
                len: range.len() as u64,
                sequence,
            });
            pending_events.push(event);
        }
        self.flush(&mut pending, &mut pending_events, receipt)?;
        receipt.closed = std::mem::take(&mut self.closed_unreported);
        Ok(())
    }

    /// Whether a record of at most `bound` bytes still goes into the current chunk (`aged`:
    /// the chunk had reached its age limit when the batch began).
    fn fits(&self, bound: u64, aged: bool) -> bool {
        let Some(current) = self.current.as_ref() else {
            return false;
        };
        if current.sealer.next_position() == 0 {
            // A fresh chunk takes at least one record, whatever its size.
            return true;
        }
        current.sealer.next_position() < self.config.max_records_per_chunk
            && current.len_bytes + self.batch.len() as u64 + bound
                <= self.config.chunk_size_limit_bytes
            && !aged
    }

    /// Writes the sealed records of the current chunk with one append.
    fn flush(
        &mut self,
        pending: &mut Vec<RecordLocation>,
        pending_events: &mut Vec<EventOf<S>>,
        receipt: &mut AppendReceipt<EventOf<S>>,
    ) -> Result<(), AppendError> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let Some(current) = self.current.as_mut() else {
            return Ok(());
        };
        current
            .file
            .append(&self.batch)
            .map_err(storage_error("write"))?;
        current.chain.push(&self.batch);
        current.len_bytes += self.batch.len() as u64;
        current.written_last = pending.last().map(|r| r.sequence).or(current.written_last);
        self.batch.clear();
        receipt.records.append(pending);
        receipt.events.append(pending_events);
        Ok(())
    }

    /// Syncs and closes the current chunk, if any.
    fn close_current(&mut self) -> Result<Option<ClosedChunk>, AppendError> {
        let Some(mut chunk) = self.current.take() else {
            return Ok(None);
        };
        if chunk.unsynced_first.is_some() {
            if let Err(source) = chunk.file.sync() {
                let lost = chunk.unsynced_first.zip(chunk.last.map(|(s, _)| s));
                chunk.sync_failed = true;
                // Put it back so `abandon` sees what it held.
                self.current = Some(chunk);
                return Err(AppendError::Storage {
                    operation: "sync",
                    source,
                    lost: lost.map(|(a, b)| a..=b),
                });
            }
            self.durable_through = chunk
                .last
                .and_then(|(s, _)| Sequence::new(s))
                .max(self.durable_through);
        }
        Ok(match (chunk.first, chunk.last) {
            (Some((first_sequence, first_time)), Some((last_sequence, last_time))) => {
                Some(ClosedChunk {
                    chunk_id: chunk.chunk_id,
                    stream_id: self.generation.stream_id.clone(),
                    records: chunk.sealer.next_position(),
                    len_bytes: chunk.len_bytes,
                    first_sequence,
                    last_sequence,
                    first_time,
                    last_time,
                    latest_time: chunk.latest_time,
                    chain: chunk.chain.value(),
                })
            }
            _ => None,
        })
    }

    /// Creates a new chunk of the current generation: random id and nonce prefix, the header
    /// written to `tmp/`, synced, renamed into the stream's directory (never replacing a
    /// file), that directory synced.
    fn create_chunk(&mut self) -> Result<ChunkId, AppendError> {
        if self.generation_spent {
            self.generation = new_generation(self.entropy.as_mut())
                .map_err(|EntropyError| AppendError::Entropy { lost: None })?;
            self.generation_spent = false;
        }
        let mut id = [0u8; CHUNK_ID_LEN_BYTES];
        let mut prefix = [0u8; NONCE_PREFIX_LEN_BYTES];
        self.entropy
            .fill(&mut id)
            .and_then(|()| self.entropy.fill(&mut prefix))
            .map_err(|EntropyError| AppendError::Entropy { lost: None })?;
        let chunk_id = ChunkId(id);
        let header = ChunkHeader::new(
            self.config.key_epoch.get(),
            self.config.key_reference.as_str(),
            self.generation.stream_id.as_str(),
            chunk_id,
            prefix,
        )
        .map_err(|e| AppendError::Seal {
            source: SealError::from(e),
            lost: None,
        })?;
        let sealer = RecordSealer::new(&self.keys, &header)
            .map_err(|source| AppendError::Seal { source, lost: None })?;
        let tmp = temp_file_name::<S>(chunk_id);
        let mut file = self
            .storage
            .create_new(Area::Tmp, &tmp)
            .map_err(storage_error("create"))?;
        file.append(sealer.header_bytes())
            .map_err(storage_error("write"))?;
        file.sync().map_err(storage_error("sync"))?;
        self.storage
            .rename(
                Area::Tmp,
                &tmp,
                S::AREA,
                &chunk_file_name(chunk_id),
                Replace::Never,
            )
            .map_err(storage_error("rename"))?;
        self.storage
            .sync_dir(S::AREA)
            .map_err(storage_error("sync directory"))?;
        let chain = ChainDigest::new(sealer.header_bytes());
        self.current = Some(OpenChunk {
            file,
            chunk_id,
            len_bytes: sealer.header_bytes().len() as u64,
            sealer,
            created_wall: self.clock.now_since_epoch(),
            created_monotonic: self.clock.monotonic(),
            first: None,
            last: None,
            latest_time: Duration::ZERO,
            unsynced_first: None,
            written_last: None,
            sync_failed: false,
            chain,
        });
        Ok(chunk_id)
    }
}

impl StoreWriter<super::History> {
    /// An import's append (`annal import`): finished events, each keeping its id, `source`
    /// and `data.sequence`, checked first against the import rules
    /// ([`check_imported`](super::import::check_imported): write rules, sequences above the
    /// high water and increasing, one `source`); a refused batch writes nothing and uses no
    /// sequence ([`AppendError::InvalidImport`]). The batch goes into chunks of the stream its
    /// `source` names: when that is not the current generation's, the current chunk is closed
    /// and a generation of that stream begins (so each record's `source` is its chunk
    /// header's, as the reader checks). Not synced, like [`Self::append`]. Any failure after
    /// the check abandons the chunk and reports the whole batch lost: an import that fails is
    /// thrown away whole by its caller.
    pub fn append_imported(
        &mut self,
        events: Vec<annal_schema::Event>,
    ) -> Result<AppendReceipt, AppendError> {
        super::import::check_imported(&events, self.high_water)
            .map_err(AppendError::InvalidImport)?;
        let (Some(first), Some(last)) = (events.first(), events.last()) else {
            return Ok(AppendReceipt::default());
        };
        let (first_sequence, last_sequence) = (first.data.sequence, last.data.sequence);
        if self.generation_spent || self.generation.source != first.source {
            let stream_id = OpaqueId::new(first.source.stream_id()).map_err(|_| {
                AppendError::InvalidImport(super::import::ImportViolation::NoStream { index: 0 })
            })?;
            if self.current.as_ref().is_some_and(|c| c.first.is_some()) {
                if let Some(closed) = self.close_or_abandon()? {
                    // Reported by the next receipt, as a rotation's closed chunk is.
                    self.closed_unreported.push(closed);
                }
            } else {
                self.current = None;
            }
            let mut id_key = [0u8; EVENT_ID_KEY_LEN_BYTES];
            self.entropy
                .fill(&mut id_key)
                .map_err(|EntropyError| AppendError::Entropy { lost: None })?;
            self.generation = Generation {
                source: first.source.clone(),
                stream_id,
                id_key,
            };
            self.generation_spent = false;
        }
        self.high_water = Some(last_sequence);
        let mut receipt = AppendReceipt::default();
        let len = events.len();
        let items = events.into_iter().map(BatchItem::Finished);
        match self.write_batch(items, len, first_sequence.get(), &mut receipt) {
            Ok(()) => Ok(receipt),
            Err(error) => {
                self.abandon();
                Err(error.with_lost(Some(first_sequence.get()..=last_sequence.get())))
            }
        }
    }
}

fn new_generation(entropy: &mut dyn Entropy) -> Result<Generation, EntropyError> {
    let mut stream = [0u8; CHUNK_ID_LEN_BYTES];
    entropy.fill(&mut stream)?;
    let mut id_key = [0u8; EVENT_ID_KEY_LEN_BYTES];
    entropy.fill(&mut id_key)?;
    let stream_id = OpaqueId::from_bytes(stream);
    Ok(Generation {
        source: SourceUrn::for_stream(&stream_id),
        stream_id,
        id_key,
    })
}

/// Removes the temporary files of chunk creations of stream `S` that a crashed writer left in
/// `tmp/` (`<stream>.<chunk id>.cborseq.tmp`). Safe only under the writer lock: no live writer
/// can be creating one. Such a file was never renamed into place, so no reader ever returned
/// What every writer open checks before it reads anything: a writable storage and a
/// configuration within the store's limits.
fn check_open(storage: &dyn Storage, config: &WriterConfig) -> Result<(), OpenWriterError> {
    if !storage.writable() {
        return Err(OpenWriterError::ReadOnly);
    }
    if config.chunk_size_limit_bytes > CHUNK_SIZE_LIMIT_BYTES {
        return Err(OpenWriterError::Config(
            "chunk size limit above the store's limit",
        ));
    }
    if !(1..=MAX_RECORDS_PER_CHUNK).contains(&config.max_records_per_chunk) {
        return Err(OpenWriterError::Config(
            "records per chunk must be 1..=2^20",
        ));
    }
    if config.chunk_max_age > Duration::from_secs(CHUNK_MAX_AGE_SECS) {
        return Err(OpenWriterError::Config(
            "chunk age above CHUNK_MAX_AGE_SECS",
        ));
    }
    Ok(())
}

/// its records. Only names of exactly that shape are touched.
fn remove_abandoned_temp_chunks<S: Stream>(storage: &dyn Storage) -> Result<(), OpenWriterError> {
    let mut removed = false;
    for entry in storage.list(Area::Tmp).map_err(OpenWriterError::Cleanup)? {
        let Some(name) = entry.file_name() else {
            continue;
        };
        if entry.kind == crate::storage::EntryKind::File && is_temp_file_of::<S>(name.as_str()) {
            storage
                .remove(Area::Tmp, &name)
                .map_err(OpenWriterError::Cleanup)?;
            removed = true;
        }
    }
    if removed {
        storage
            .sync_dir(Area::Tmp)
            .map_err(OpenWriterError::Cleanup)?;
    }
    Ok(())
}
