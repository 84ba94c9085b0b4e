//! The store-wide reader: lists a stream's chunks, gives each its own verdict, and merges their
//! records into one sequence order; and single records by location.
//!
//! Read-only: it creates nothing and takes no lock, so it runs beside a live writer. One bad
//! file never stops the read: a chunk that cannot be read at all (too large, a symlink, not a
//! regular file, an I/O error) is [`ChunkVerdict::Unreadable`] and the rest of the store reads
//! past it.
//!
//! Torn tails: whatever follows the last authenticated record is a crash's leftovers only in
//! the newest chunk of its stream (each writer generation writes its own stream, and a writer
//! that abandons a chunk after a write error starts a new one), so only there is it a
//! [`ChunkVerdict::TornTail`]; in any other chunk the same bytes are
//! [`ChunkVerdict::Corrupt`]. A record that authenticates under its own IV at the wrong
//! position (replayed, duplicated, reordered) is never a tail: the chunk reader makes it
//! corrupt wherever it stands (`profile::reader`).

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::marker::PhantomData;
use std::sync::Arc;

use super::stream::{EventOf, Stream};
use super::write::RecordLocation;
use super::{CHUNK_FILE_EXTENSION, MAX_CHUNK_FILE_BYTES, chunk_file_name, parse_chunk_file_name};
use crate::profile::{
    ChunkId, ChunkScan, ChunkVerdict, CorruptReason, MAX_RECORD_LEN_BYTES, ParsedHeader, Record,
    RecordOpener, RecordSchema, ScanEnd, TailRule, UnreadableReason, read_header, scan_chunk,
};
use crate::storage::{Area, EntryKind, ReadFile, Storage, StorageError, read_bounded};

/// Most bytes read from the front of a chunk to learn its header. A header is seven short
/// fields (at most a few hundred bytes); 4 KiB leaves room for any conforming header.
pub const HEADER_READ_LIMIT_BYTES: u64 = 4096;

/// Reads one stream of a store.
pub struct StoreReader<S: Stream> {
    /// The store's storage (read-only or the writer's own).
    storage: Arc<dyn Storage>,
    /// The stream read.
    _stream: PhantomData<fn() -> S>,
}

impl<S: Stream> std::fmt::Debug for StoreReader<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreReader")
            .field("stream", &S::NAME)
            .field("storage", &self.storage)
            .finish()
    }
}

/// Reading the store failed before any verdict could be given: the chunk directory itself
/// could not be listed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadStoreError {
    /// Listing the stream's directory failed.
    #[error("listing the {area:?} directory: {source}")]
    List {
        /// The directory.
        area: Area,
        /// The storage error.
        source: StorageError,
    },
}

/// One chunk file and its verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkReport<E> {
    /// The file name inside the stream's directory.
    pub file_name: String,
    /// The chunk id the file name carries, when it is well formed.
    pub chunk_id: Option<ChunkId>,
    /// The file's length in bytes (0 when it could not be read).
    pub len_bytes: u64,
    /// Its header, when the header parsed.
    pub header: Option<ParsedHeader>,
    /// Its verdict.
    pub verdict: ChunkVerdict<E>,
    /// The highest `sequence` among the records that authenticated, even in a corrupt chunk:
    /// a writer must never hand out a sequence at or below it.
    pub last_authenticated_sequence: Option<u64>,
}

impl<E> ChunkReport<E> {
    /// The first valid record.
    pub fn first_record(&self) -> Option<&Record<E>> {
        self.verdict.records().first()
    }

    /// The last valid record.
    pub fn last_record(&self) -> Option<&Record<E>> {
        self.verdict.records().last()
    }
}

/// Two chunks disagree about an event: a different event reuses a sequence number or an id.
/// This is corruption at store level even when each chunk is valid on its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SequenceConflict {
    /// The sequence number of the refused record.
    pub sequence: u64,
    /// The chunk whose record was accepted first.
    pub kept_file: String,
    /// The chunk whose record conflicts.
    pub conflicting_file: String,
}

/// Where an accepted record lives in a [`StoreReport`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventLocation {
    /// Index into [`StoreReport::chunks`].
    pub chunk: usize,
    /// Index into that chunk's records.
    pub record: usize,
}

/// Everything a stream holds, classified and merged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreReport<E> {
    /// Every chunk: those with records ordered by first sequence, then the rest by file name.
    pub chunks: Vec<ChunkReport<E>>,
    /// The accepted records, strictly increasing by sequence, duplicates removed.
    pub events: Vec<EventLocation>,
    /// Store-level conflicts between chunks.
    pub conflicts: Vec<SequenceConflict>,
    /// Every chunk holding records fails authentication at record 0: most likely the key is
    /// wrong rather than every chunk being tampered with.
    pub probable_wrong_key: bool,
    /// Entries of the directory that are not chunk files (`*.cborseq`): the reference refuses a
    /// store holding them. Never read.
    pub foreign_entries: Vec<OsString>,
}

impl<E> StoreReport<E> {
    /// The accepted records, in sequence order.
    pub fn records(&self) -> impl Iterator<Item = &Record<E>> {
        self.events.iter().filter_map(|loc| {
            self.chunks
                .get(loc.chunk)?
                .verdict
                .records()
                .get(loc.record)
        })
    }

    /// Whether any chunk is corrupt or any conflict was found (queries must fail closed).
    pub fn has_corruption(&self) -> bool {
        !self.conflicts.is_empty()
            || self
                .chunks
                .iter()
                .any(|c| matches!(c.verdict, ChunkVerdict::Corrupt { .. }))
    }

    /// Whether any chunk could not be read at all (the store is not fully available).
    pub fn has_unreadable(&self) -> bool {
        self.chunks
            .iter()
            .any(|c| matches!(c.verdict, ChunkVerdict::Unreadable { .. }))
    }

    /// The highest sequence any authenticated record carries, in any chunk (corrupt ones
    /// included): the floor of the next sequence a writer may hand out.
    pub fn last_authenticated_sequence(&self) -> Option<u64> {
        self.chunks
            .iter()
            .filter_map(|c| c.last_authenticated_sequence)
            .max()
    }
}

/// A chunk file as listed, before its verdict.
struct Listed<E> {
    /// Its name.
    file_name: String,
    /// The id its name carries.
    chunk_id: Option<ChunkId>,
    /// Its length.
    len_bytes: u64,
    /// The scan, or why it could not be read.
    scan: Result<ChunkScan<E>, ListedFault>,
}

/// One chunk file read: its length, and its scan or why it could not be read.
type ScannedFile<E> = (u64, Result<ChunkScan<E>, UnreadableReason>);

/// Why a listed chunk has no scan.
enum ListedFault {
    /// The file could not be read.
    Unreadable(UnreadableReason),
    /// The name ends in `.cborseq` but is not `<32 lower hex>.cborseq`.
    BadName,
}

fn unreadable(error: &StorageError) -> UnreadableReason {
    match error {
        StorageError::Symlink => UnreadableReason::Symlink,
        StorageError::NotRegularFile => UnreadableReason::NotRegularFile,
        StorageError::Io(e) => UnreadableReason::Io { kind: e.kind() },
        StorageError::NotFound => UnreadableReason::Io {
            kind: std::io::ErrorKind::NotFound,
        },
        _ => UnreadableReason::Io {
            kind: std::io::ErrorKind::Other,
        },
    }
}

impl<S: Stream> StoreReader<S> {
    /// A reader of stream `S` of the store behind `storage`.
    pub fn new(storage: Arc<dyn Storage>) -> Self {
        Self {
            storage,
            _stream: PhantomData,
        }
    }

    /// Reads and classifies every chunk of the stream with `keys` and merges the records.
    /// Fails only if the directory cannot be listed; every per-chunk problem is a verdict.
    pub fn read(&self, keys: &S::Keys) -> Result<StoreReport<EventOf<S>>, ReadStoreError> {
        self.read_except(keys, &|_, _| false)
            .map(|(report, _)| report)
    }

    /// [`Self::read`], leaving out every regular chunk file for which `skip(chunk_id,
    /// len_bytes)` holds: neither read nor scanned nor in the report (a writer opening a store
    /// whose sealed chunks it need not read). Returns the ids left out. The reader's rules are
    /// applied to the rest only, so the caller must know the chunks it skips are complete.
    pub fn read_except(
        &self,
        keys: &S::Keys,
        skip: &dyn Fn(ChunkId, u64) -> bool,
    ) -> Result<(StoreReport<EventOf<S>>, Vec<ChunkId>), ReadStoreError> {
        let mut skipped = Vec::new();
        let entries = self
            .storage
            .list(S::AREA)
            .map_err(|source| ReadStoreError::List {
                area: S::AREA,
                source,
            })?;
        let mut listed = Vec::new();
        let mut foreign_entries = Vec::new();
        for entry in entries {
            let Some(name) = entry
                .name
                .to_str()
                .filter(|n| n.ends_with(CHUNK_FILE_EXTENSION))
            else {
                foreign_entries.push(entry.name);
                continue;
            };
            let file_name = name.to_owned();
            let Some(chunk_id) = parse_chunk_file_name(name) else {
                listed.push(Listed {
                    file_name,
                    chunk_id: None,
                    len_bytes: 0,
                    scan: Err(ListedFault::BadName),
                });
                continue;
            };
            let (len_bytes, scan) = match entry.kind {
                EntryKind::Symlink => (0, Err(UnreadableReason::Symlink)),
                EntryKind::Dir | EntryKind::Other => (0, Err(UnreadableReason::NotRegularFile)),
                EntryKind::File => match self.scan_file(keys, chunk_id, skip) {
                    Some(scanned) => scanned,
                    None => {
                        skipped.push(chunk_id);
                        continue;
                    }
                },
            };
            listed.push(Listed {
                file_name,
                chunk_id: Some(chunk_id),
                len_bytes,
                scan: scan.map_err(ListedFault::Unreadable),
            });
        }
        Ok((classify::<S::Schema>(listed, foreign_entries), skipped))
    }

    /// Reads and scans one chunk file; `None` when `skip` leaves it out (by id and length).
    fn scan_file(
        &self,
        keys: &S::Keys,
        chunk_id: ChunkId,
        skip: &dyn Fn(ChunkId, u64) -> bool,
    ) -> Option<ScannedFile<EventOf<S>>> {
        let file = match self.storage.open_read(S::AREA, &chunk_file_name(chunk_id)) {
            Ok(file) => file,
            Err(e) => return Some((0, Err(unreadable(&e)))),
        };
        let len_bytes = file.len();
        if skip(chunk_id, len_bytes) {
            return None;
        }
        Some(match read_bounded(file.as_ref(), MAX_CHUNK_FILE_BYTES) {
            Ok(Ok(bytes)) => (
                len_bytes,
                Ok(scan_chunk::<S::Schema>(&bytes, keys, Some(chunk_id))),
            ),
            Ok(Err(len)) => (len, Err(UnreadableReason::TooLarge { len_bytes: len })),
            Err(e) => (len_bytes, Err(unreadable(&e))),
        })
    }

    /// Opens one chunk for reads by offset: reads and checks its header and derives its key
    /// once, so a caller reading many records of it pays that once.
    pub fn open_chunk(
        &self,
        keys: &S::Keys,
        chunk_id: ChunkId,
    ) -> Result<ChunkHandle<S>, ReadAtError> {
        let file = self
            .storage
            .open_read(S::AREA, &chunk_file_name(chunk_id))
            .map_err(ReadAtError::Storage)?;
        let front_len = file.len().min(HEADER_READ_LIMIT_BYTES);
        let mut front = vec![0u8; front_len as usize];
        file.read_exact_at(0, &mut front)
            .map_err(ReadAtError::Storage)?;
        let (header, _) = read_header(&front).map_err(ReadAtError::Header)?;
        if header.header.chunk_id() != chunk_id {
            return Err(ReadAtError::Header(CorruptReason::ChunkIdMismatch));
        }
        Ok(ChunkHandle {
            opener: RecordOpener::new(keys, header),
            file,
            chunk_id,
            _stream: PhantomData,
        })
    }

    /// Reads the one record at `location` (opening its chunk for this read only).
    pub fn read_at(
        &self,
        keys: &S::Keys,
        location: &RecordLocation,
    ) -> Result<Record<EventOf<S>>, ReadAtError> {
        self.open_chunk(keys, location.chunk_id)?.read_at(location)
    }
}

/// One chunk opened for reads by offset.
pub struct ChunkHandle<S: Stream> {
    /// The chunk's AEAD and header.
    opener: RecordOpener,
    /// The open file.
    file: Box<dyn ReadFile>,
    /// Its id.
    chunk_id: ChunkId,
    /// The stream it belongs to.
    _stream: PhantomData<fn() -> S>,
}

impl<S: Stream> std::fmt::Debug for ChunkHandle<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChunkHandle")
            .field("chunk_id", &self.chunk_id)
            .finish_non_exhaustive()
    }
}

/// A record could not be read at its location.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadAtError {
    /// The chunk file could not be opened or read.
    #[error("reading the chunk: {0}")]
    Storage(StorageError),
    /// The chunk's header is unreadable or names another chunk.
    #[error("the chunk header is corrupt: {0}")]
    Header(CorruptReason),
    /// The location does not lie inside the file, or is longer than a record may be.
    #[error("the record location lies outside the chunk")]
    OutOfBounds,
    /// The bytes there are not the expected record.
    #[error("the record is corrupt: {0}")]
    Record(CorruptReason),
    /// The record there carries another sequence than the location says (a stale index).
    #[error("the record carries sequence {found}, not {expected}")]
    SequenceMismatch {
        /// What the location said.
        expected: u64,
        /// What the record holds.
        found: u64,
    },
}

impl<S: Stream> ChunkHandle<S> {
    /// The chunk's id.
    pub fn chunk_id(&self) -> ChunkId {
        self.chunk_id
    }

    /// Reads, authenticates and parses the record at `location` (which must name this chunk).
    pub fn read_at(&self, location: &RecordLocation) -> Result<Record<EventOf<S>>, ReadAtError> {
        if location.chunk_id != self.chunk_id || location.len > MAX_RECORD_LEN_BYTES as u64 {
            return Err(ReadAtError::OutOfBounds);
        }
        let end = location
            .offset
            .checked_add(location.len)
            .ok_or(ReadAtError::OutOfBounds)?;
        if location.len == 0 {
            return Err(ReadAtError::OutOfBounds);
        }
        // Past the length seen at open: the writer may have appended since (one fstat, only
        // then).
        if end > self.file.len() && end > self.file.current_len().map_err(ReadAtError::Storage)? {
            return Err(ReadAtError::OutOfBounds);
        }
        let mut item = vec![0u8; location.len as usize];
        self.file
            .read_exact_at(location.offset, &mut item)
            .map_err(ReadAtError::Storage)?;
        let record = self
            .opener
            .open::<S::Schema>(&item, location.position, location.offset)
            .map_err(ReadAtError::Record)?;
        let found = S::Schema::sequence(&record.event);
        if found != location.sequence {
            return Err(ReadAtError::SequenceMismatch {
                expected: location.sequence,
                found,
            });
        }
        Ok(record)
    }
}

/// Gives every listed chunk its verdict (deciding which may hold a torn tail) and merges.
fn classify<Sc: RecordSchema>(
    listed: Vec<Listed<Sc::Event>>,
    foreign_entries: Vec<OsString>,
) -> StoreReport<Sc::Event> {
    let scans: Vec<&ChunkScan<Sc::Event>> =
        listed.iter().filter_map(|l| l.scan.as_ref().ok()).collect();
    // The key is probably wrong when every chunk with record bytes fails authentication at its
    // first record; then nothing is a crash, everything is refused as it is.
    let with_record_bytes: Vec<_> = scans.iter().filter(|s| s.has_record_bytes()).collect();
    let probable_wrong_key = !with_record_bytes.is_empty()
        && with_record_bytes.iter().all(|s| {
            s.records.is_empty()
                && matches!(
                    s.end,
                    ScanEnd::Tail {
                        record_index: 0,
                        reason: CorruptReason::AuthenticationFailed,
                        ..
                    }
                )
        });
    // The newest chunk of each stream, by first sequence: only it may end in a torn tail.
    // Chunks with no record at all may be torn too (nothing of theirs was ever accepted).
    let mut newest: HashMap<&str, (u64, usize)> = HashMap::new();
    for (index, item) in listed.iter().enumerate() {
        let Ok(scan) = &item.scan else { continue };
        let (Some(header), Some(first)) = (&scan.header, scan.records.first()) else {
            continue;
        };
        let first = Sc::sequence(&first.event);
        let slot = newest
            .entry(header.header.stream_id())
            .or_insert((first, index));
        if first > slot.0 {
            *slot = (first, index);
        }
    }
    let newest_indexes: Vec<usize> = newest.values().map(|(_, i)| *i).collect();
    let mut chunks: Vec<ChunkReport<Sc::Event>> = Vec::with_capacity(listed.len());
    for (index, item) in listed.into_iter().enumerate() {
        let report = match item.scan {
            Ok(scan) => {
                let may_be_torn = !probable_wrong_key
                    && (scan.records.is_empty() || newest_indexes.contains(&index));
                let rule = if may_be_torn {
                    TailRule::MayBeTorn
                } else {
                    TailRule::MustBeClean
                };
                let last_authenticated_sequence = scan.last_authenticated_sequence::<Sc>();
                let (header, verdict) = scan.into_verdict(rule);
                ChunkReport {
                    file_name: item.file_name,
                    chunk_id: item.chunk_id,
                    len_bytes: item.len_bytes,
                    header,
                    verdict,
                    last_authenticated_sequence,
                }
            }
            Err(fault) => ChunkReport {
                file_name: item.file_name,
                chunk_id: item.chunk_id,
                len_bytes: item.len_bytes,
                header: None,
                verdict: match fault {
                    ListedFault::Unreadable(reason) => ChunkVerdict::Unreadable { reason },
                    ListedFault::BadName => ChunkVerdict::Corrupt {
                        record_index: None,
                        offset: 0,
                        reason: CorruptReason::ChunkIdMismatch,
                    },
                },
                last_authenticated_sequence: None,
            },
        };
        chunks.push(report);
    }
    merge::<Sc>(chunks, probable_wrong_key, foreign_entries)
}

/// Orders chunks by first sequence and merges their records into one strictly increasing
/// sequence, dropping byte-identical duplicates and recording conflicts.
fn merge<Sc: RecordSchema>(
    mut chunks: Vec<ChunkReport<Sc::Event>>,
    probable_wrong_key: bool,
    foreign_entries: Vec<OsString>,
) -> StoreReport<Sc::Event> {
    let first = |c: &ChunkReport<Sc::Event>| c.first_record().map(|r| Sc::sequence(&r.event));
    chunks.sort_by(|a, b| {
        (first(a).is_none(), first(a))
            .cmp(&(first(b).is_none(), first(b)))
            .then_with(|| a.file_name.cmp(&b.file_name))
    });
    let mut events: Vec<EventLocation> = Vec::new();
    let mut by_sequence: BTreeMap<u64, EventLocation> = BTreeMap::new();
    let mut by_identity: HashMap<(&str, &str), EventLocation> = HashMap::new();
    let mut conflicts = Vec::new();
    let mut last: Option<u64> = None;
    for (chunk_index, chunk) in chunks.iter().enumerate() {
        for (record_index, record) in chunk.verdict.records().iter().enumerate() {
            let here = EventLocation {
                chunk: chunk_index,
                record: record_index,
            };
            let sequence = Sc::sequence(&record.event);
            let identity = Sc::identity(&record.event);
            let earlier = by_sequence
                .get(&sequence)
                .or_else(|| identity.and_then(|id| by_identity.get(&id)))
                .copied();
            if let Some(kept) = earlier {
                let kept_record = &chunks[kept.chunk].verdict.records()[kept.record];
                if kept_record.plaintext != record.plaintext {
                    conflicts.push(SequenceConflict {
                        sequence,
                        kept_file: chunks[kept.chunk].file_name.clone(),
                        conflicting_file: chunk.file_name.clone(),
                    });
                }
                continue;
            }
            if last.is_some_and(|l| sequence <= l) {
                // A new record whose sequence falls inside an earlier chunk's range: chunks
                // interleave, which the writer never produces.
                conflicts.push(SequenceConflict {
                    sequence,
                    kept_file: chunks[events.last().map_or(0, |e| e.chunk)]
                        .file_name
                        .clone(),
                    conflicting_file: chunk.file_name.clone(),
                });
                continue;
            }
            last = Some(sequence);
            by_sequence.insert(sequence, here);
            if let Some(identity) = identity {
                by_identity.insert(identity, here);
            }
            events.push(here);
        }
    }
    StoreReport {
        chunks,
        events,
        conflicts,
        probable_wrong_key,
        foreign_entries,
    }
}
