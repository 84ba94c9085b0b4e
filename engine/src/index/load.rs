//! Loading the in-memory [`Index`] of the history stream: each chunk's index file where it is
//! present, valid and covers the chunk's current length; a scan of the chunk everywhere else
//! (and then, when the storage is writable, a new index file).
//!
//! The result is the index a full [`StoreReader`] scan gives (same entries, same order): the
//! loader applies the reader's rules itself (the probable-wrong-key rule, "only the newest chunk
//! of its stream may end torn", the merge by first sequence), using what each index file
//! records of its chunk (stream id, ending, entries). Should the chunks overlap or repeat
//! sequences (which annal's writer never produces), it falls back to the full reader, whose
//! merge decides duplicates and conflicts by the records' bytes.
//!
//! What it does not do: re-authenticate records an index file lists (each read by location
//! does), or detect a different event reusing an event id under a fresh sequence across
//! chunks (the full reader and `annal verify` do); that takes the chunk key and an edit of an
//! authenticated chunk, which the seals detect.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use annal_schema::Event;

use super::{
    ChunkEnding, ChunkIndex, IndexKey, chunk_index_of, entries_of, parse_index_file_name,
    read_index_file, write_index_file,
};
use crate::keys::HistoryKeys;
use crate::profile::{
    ChunkId, ChunkScan, ChunkVerdict, CorruptReason, HistorySchema, ScanEnd, TailRule, scan_chunk,
};
use crate::query::{Index, IndexEntry};
use crate::storage::{Area, EntryKind, Storage, StorageError, read_bounded};
use crate::store::{
    CHUNK_FILE_EXTENSION, History, MAX_CHUNK_FILE_BYTES, ReadStoreError, RecordLocation,
    SealedChunk, StoreReader, StoreReport, chunk_file_name, parse_chunk_file_name,
};

/// What a load did, and what the query path must know of the store's state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadReport {
    /// Chunk files listed (`*.cborseq`).
    pub chunks: u64,
    /// Index files used as they were.
    pub files_used: u64,
    /// Index files written (new, or replacing a missing, stale or invalid one).
    pub files_rebuilt: u64,
    /// Chunks read and scanned because their index file could not be used.
    pub chunks_scanned: u64,
    /// Index files that could not be written (never fatal: the index is derived).
    pub write_failures: u64,
    /// Index files removed because their chunk is gone.
    pub orphans_removed: u64,
    /// Whether the load fell back to a full store read (chunks overlapping or repeating
    /// sequences, or a rebuild).
    pub full_scan: bool,
    /// File names of corrupt chunks, which contribute nothing: queries must fail closed.
    pub corrupt: Vec<String>,
    /// File names of chunks that could not be read at all.
    pub unreadable: Vec<String>,
    /// Conflicts between chunks the full reader found (a different event under a sequence or
    /// id already taken); only a full scan finds them.
    pub conflicts: u64,
    /// Every chunk holding records fails authentication at its first record: probably the
    /// wrong key.
    pub probable_wrong_key: bool,
}

impl LoadReport {
    /// Whether any chunk is corrupt or conflicts with another (queries must fail closed with
    /// `history_storage_corrupt`).
    pub fn has_corruption(&self) -> bool {
        !self.corrupt.is_empty() || self.conflicts > 0
    }

    /// Whether any chunk could not be read (the store is not fully available).
    pub fn has_unreadable(&self) -> bool {
        !self.unreadable.is_empty()
    }
}

/// Loading the index failed before any chunk could be judged.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadIndexError {
    /// The chunk directory could not be listed.
    #[error("listing the chunk directory: {0}")]
    List(StorageError),
    /// The full store read failed.
    #[error(transparent)]
    Read(#[from] ReadStoreError),
    /// A rebuild needs a writable storage with a sidecar.
    #[error("rebuilding the index files needs the store opened for writing, with a sidecar")]
    NotWritable,
}

/// Where one listed chunk's entries come from.
enum Source {
    /// Its index file, valid for its current length.
    Indexed(ChunkIndex),
    /// A scan of the chunk file, of `len` bytes.
    Scanned {
        /// The scan.
        scan: Box<ChunkScan<Event>>,
        /// The file's length.
        len: u64,
    },
    /// It could not be read.
    Unreadable,
    /// Its name ends in `.cborseq` but carries no chunk id.
    BadName,
}

impl Source {
    /// The stream id and first sequence, for the newest-chunk rule.
    fn first_of_stream(&self) -> Option<(&str, u64)> {
        match self {
            Self::Indexed(index) => index
                .entries
                .first()
                .map(|e| (index.stream_id.as_str(), e.sequence)),
            Self::Scanned { scan, .. } => {
                let header = scan.header.as_ref()?;
                let first = scan.records.first()?;
                Some((header.header.stream_id(), first.sequence()))
            }
            Self::Unreadable | Self::BadName => None,
        }
    }

    /// `Some(fails_at_first_record)` for a chunk holding record bytes.
    fn record_bytes(&self) -> Option<bool> {
        match self {
            Self::Indexed(index) => (!index.entries.is_empty()).then_some(false),
            Self::Scanned { scan, .. } => scan.has_record_bytes().then_some(
                scan.records.is_empty()
                    && matches!(
                        scan.end,
                        ScanEnd::Tail {
                            record_index: 0,
                            reason: CorruptReason::AuthenticationFailed,
                            ..
                        }
                    ),
            ),
            Self::Unreadable | Self::BadName => None,
        }
    }
}

/// One listed chunk.
struct Item {
    /// Its file name.
    file_name: String,
    /// The id its name carries.
    chunk_id: Option<ChunkId>,
    /// Its entries' source.
    source: Source,
}

/// Loads the history stream's index (see the module doc). Index files are read and written
/// only when the store has a sidecar (a bare reference store is indexed in memory) and written
/// only when `storage` is writable; a failed write is counted, never fatal. Fails only when the
/// chunk directory cannot be listed (or the fallback read fails likewise).
pub fn load_index(
    storage: &Arc<dyn Storage>,
    keys: &HistoryKeys,
    key: &IndexKey,
) -> Result<(Index, LoadReport), LoadIndexError> {
    let mut lazy = load_index_lazily(storage, keys, key, &[], None)?;
    while lazy.load_older(storage, keys, key)? {}
    Ok((lazy.index, lazy.report))
}

/// The history index, loaded newest first: every chunk a verified seal does not vouch for is
/// loaded at once (as [`load_index`] does), and so is every sealed chunk newer than the oldest
/// of those; the older sealed chunks are deferred and loaded one at a time, newest first, when a
/// query reaches past what is loaded ([`LazyIndex::load_older`]). Opening a store therefore
/// reads the seals and the newest index files, not one file per chunk.
///
/// The loaded part is always the newest contiguous run of the stream's chunks, so a plan over it
/// that finds more matches than it returns, or whose lower bound lies inside it, is exact.
#[derive(Debug)]
pub struct LazyIndex {
    /// The loaded entries: every record newer than the deferred chunks.
    pub index: Index,
    /// Deferred sealed chunks, ascending by first sequence (the newest is loaded next).
    deferred: Vec<SealedChunk>,
    /// What the loads found (corrupt chunks make queries fail closed).
    pub report: LoadReport,
}

impl LazyIndex {
    /// Forgets `chunks` (pruned: their files are gone or about to go): their entries and, when
    /// deferred, their seals, so no plan reads them and no load reaches for them.
    pub fn forget(&mut self, chunks: &std::collections::BTreeSet<ChunkId>) {
        self.deferred.retain(|s| !chunks.contains(&s.chunk_id));
        self.index = crate::store::prune::index_without(&self.index, chunks);
    }

    /// Whether every chunk is loaded.
    pub fn is_complete(&self) -> bool {
        self.deferred.is_empty()
    }

    /// How many sealed chunks are still deferred.
    pub fn deferred_chunks(&self) -> usize {
        self.deferred.len()
    }

    /// Loads the newest deferred chunk (its index file, else a scan, under the rule for a
    /// sealed chunk: it must end clean, and hold exactly what its seal says). Returns `false`
    /// when nothing was deferred. A chunk that fails is reported corrupt (or unreadable) and
    /// contributes nothing.
    pub fn load_older(
        &mut self,
        storage: &Arc<dyn Storage>,
        keys: &HistoryKeys,
        key: &IndexKey,
    ) -> Result<bool, LoadIndexError> {
        let Some(chunk) = self.deferred.pop() else {
            return Ok(false);
        };
        let file_name = chunk_file_name(chunk.chunk_id).as_str().to_owned();
        let entries = match source_of(
            storage.as_ref(),
            keys,
            key,
            chunk.chunk_id,
            &mut self.report,
        ) {
            Source::Indexed(index) if index.ending == ChunkEnding::Complete => Some(index.entries),
            Source::Indexed(_) => None,
            Source::Scanned { scan, len } => {
                let stream_id = scan
                    .header
                    .as_ref()
                    .map(|h| h.header.stream_id().to_owned());
                match scan.into_verdict(TailRule::MustBeClean).1 {
                    ChunkVerdict::Complete { records } => {
                        let entries = entries_of(chunk.chunk_id, &records);
                        if let Some(stream_id) = stream_id
                            && storage.writable()
                            && storage.has_area(Area::Index)
                        {
                            let index = ChunkIndex {
                                chunk_id: chunk.chunk_id,
                                chunk_len: len,
                                stream_id,
                                ending: ChunkEnding::Complete,
                                entries,
                            };
                            count_write(
                                write_index_file(storage.as_ref(), key, &index),
                                &mut self.report,
                            );
                            Some(index.entries)
                        } else {
                            Some(entries)
                        }
                    }
                    _ => None,
                }
            }
            Source::Unreadable => {
                self.report.unreadable.push(file_name);
                return Ok(true);
            }
            Source::BadName => None,
        };
        // What the seal vouches for, exactly: anything else is damage, never a partial answer.
        let vouched = entries.filter(|e| {
            e.first().map(|f| f.sequence) == Some(chunk.first_sequence)
                && e.last().map(|l| l.sequence) == Some(chunk.last_sequence)
                && e.windows(2).all(|w| w[0].sequence < w[1].sequence)
        });
        let prepended = vouched.is_some_and(|entries| self.index.prepend(entries).is_ok());
        if !prepended {
            self.report.corrupt.push(file_name);
        }
        Ok(true)
    }
}

/// [`load_index`] with the chunks `sealed` vouches for (by id and current length) deferred;
/// see [`LazyIndex`]. With no seals it loads everything at once. `growing` is the chunk a live
/// writer is appending to, if any: scanned like the others, but no index file is written for it
/// (it would be stale at the next append).
pub fn load_index_lazily(
    storage: &Arc<dyn Storage>,
    keys: &HistoryKeys,
    key: &IndexKey,
    sealed: &[SealedChunk],
    growing: Option<ChunkId>,
) -> Result<LazyIndex, LoadIndexError> {
    let listing = storage.list(Area::Chunks).map_err(LoadIndexError::List)?;
    let mut report = LoadReport::default();
    let mut items = Vec::new();
    let mut deferred: Vec<SealedChunk> = Vec::new();
    let mut live: HashSet<ChunkId> = HashSet::new();
    for entry in listing {
        let Some(name) = entry
            .name
            .to_str()
            .filter(|n| n.ends_with(CHUNK_FILE_EXTENSION))
        else {
            continue;
        };
        report.chunks += 1;
        let chunk_id = parse_chunk_file_name(name);
        live.extend(chunk_id);
        if let (Some(id), EntryKind::File) = (chunk_id, entry.kind)
            && let Some(seal) = sealed.iter().find(|s| s.chunk_id == id)
            && chunk_len(storage.as_ref(), id) == Some(seal.len_bytes)
        {
            deferred.push(seal.clone());
            continue;
        }
        let source = match (chunk_id, entry.kind) {
            (None, _) => Source::BadName,
            (Some(id), EntryKind::File) => source_of(storage.as_ref(), keys, key, id, &mut report),
            (Some(_), _) => Source::Unreadable,
        };
        items.push(Item {
            file_name: name.to_owned(),
            chunk_id,
            source,
        });
    }
    let writes = storage.writable() && storage.has_area(Area::Index);
    if writes {
        report.orphans_removed = remove_orphans(storage.as_ref(), |id| live.contains(&id));
    }
    // The reader's rules, over every chunk at once.
    let judged: Vec<_> = items.iter().map(|i| i.source.record_bytes()).collect();
    let probable_wrong_key = judged.iter().any(Option::is_some)
        && judged
            .iter()
            .flatten()
            .all(|fails_at_first| *fails_at_first);
    let mut newest: HashMap<&str, (u64, usize)> = HashMap::new();
    for (index, item) in items.iter().enumerate() {
        if let Some((stream, first)) = item.source.first_of_stream() {
            let slot = newest.entry(stream).or_insert((first, index));
            if first > slot.0 {
                *slot = (first, index);
            }
        }
    }
    let newest: HashSet<usize> = newest.values().map(|(_, i)| *i).collect();
    report.probable_wrong_key = probable_wrong_key;
    let mut accepted: Vec<(String, Vec<IndexEntry>)> = Vec::new();
    for (index, item) in items.into_iter().enumerate() {
        let may_be_torn = !probable_wrong_key && newest.contains(&index);
        let entries = match item.source {
            Source::BadName => None,
            Source::Unreadable => {
                report.unreadable.push(item.file_name);
                continue;
            }
            Source::Indexed(index) => match index.ending {
                ChunkEnding::Complete => Some(index.entries),
                ChunkEnding::TornTail { .. } if may_be_torn => Some(index.entries),
                ChunkEnding::TornTail { .. } => None,
            },
            Source::Scanned { scan, len } => {
                let rule = if may_be_torn || (!probable_wrong_key && scan.records.is_empty()) {
                    TailRule::MayBeTorn
                } else {
                    TailRule::MustBeClean
                };
                let stream_id = scan
                    .header
                    .as_ref()
                    .map(|h| h.header.stream_id().to_owned());
                let (_, verdict) = scan.into_verdict(rule);
                let (records, ending) = match verdict {
                    ChunkVerdict::Complete { records } => (records, ChunkEnding::Complete),
                    ChunkVerdict::TornTail { records, valid_len } => {
                        (records, ChunkEnding::TornTail { valid_len })
                    }
                    ChunkVerdict::Corrupt { .. } | ChunkVerdict::Unreadable { .. } => {
                        report.corrupt.push(item.file_name);
                        continue;
                    }
                };
                item.chunk_id
                    .map(|chunk_id| (chunk_id, entries_of(chunk_id, &records)))
                    .map(|(chunk_id, entries)| {
                        let indexable = ending == ChunkEnding::Complete || !entries.is_empty();
                        match stream_id {
                            Some(stream_id) if writes && indexable && Some(chunk_id) != growing => {
                                let index = ChunkIndex {
                                    chunk_id,
                                    chunk_len: len,
                                    stream_id,
                                    ending,
                                    entries,
                                };
                                count_write(
                                    write_index_file(storage.as_ref(), key, &index),
                                    &mut report,
                                );
                                index.entries
                            }
                            _ => entries,
                        }
                    })
            }
        };
        match entries {
            Some(entries) => accepted.push((item.file_name, entries)),
            None => report.corrupt.push(item.file_name),
        }
    }
    // The reader's merge order: chunks with records by first sequence, then by name.
    accepted.sort_by(|(a_name, a), (b_name, b)| {
        let key = |e: &[IndexEntry]| e.first().map(|f| f.sequence);
        (key(a).is_none(), key(a), a_name).cmp(&(key(b).is_none(), key(b), b_name))
    });
    let total = accepted.iter().map(|(_, e)| e.len()).sum();
    let mut entries: Vec<IndexEntry> = Vec::with_capacity(total);
    for (_, chunk) in accepted {
        let follows = match (entries.last(), chunk.first()) {
            (Some(last), Some(first)) => first.sequence > last.sequence,
            _ => true,
        };
        let ordered = chunk.windows(2).all(|w| w[0].sequence < w[1].sequence);
        if !follows || !ordered {
            // Overlapping or repeated sequences: only the full reader can tell a byte-identical
            // duplicate from a conflict.
            return full_read(storage, keys, report).map(|(index, report)| LazyIndex {
                index,
                deferred: Vec::new(),
                report,
            });
        }
        entries.extend(chunk);
    }
    // A sealed chunk newer than the oldest loaded record (a chunk between two unsealed ones)
    // cannot be loaded later by prepending: load it now, with every chunk newer than it.
    if let Some(oldest) = entries.first().map(|e| e.sequence)
        && deferred.iter().any(|d| d.last_sequence >= oldest)
    {
        let older: Vec<SealedChunk> = deferred
            .iter()
            .filter(|d| d.last_sequence < oldest)
            .cloned()
            .collect();
        if older.len() < sealed.len() {
            return load_index_lazily(storage, keys, key, &older, growing);
        }
    }
    deferred.sort_by_key(|d| d.first_sequence);
    Ok(LazyIndex {
        index: Index::from_entries(entries),
        deferred,
        report,
    })
}

/// The latest event time among the records of the sealed chunk `chunk_id`, `len_bytes` long:
/// from its index file when valid for that length, else from a scan of the chunk, which must
/// end clean. `None` when neither can be read or the chunk holds no record. Retention prunes a
/// chunk only when this is past the cutoff (a seal's last time is its last record's, not always
/// the latest).
pub fn latest_event_time(
    storage: &dyn Storage,
    keys: &HistoryKeys,
    key: &IndexKey,
    chunk_id: ChunkId,
    len_bytes: u64,
) -> Option<std::time::Duration> {
    if let Ok(index) = read_index_file(storage, key, chunk_id, len_bytes)
        && index.ending == ChunkEnding::Complete
    {
        return index.entries.iter().map(|e| e.time).max();
    }
    let file = storage
        .open_read(Area::Chunks, &chunk_file_name(chunk_id))
        .ok()?;
    let bytes = read_bounded(file.as_ref(), MAX_CHUNK_FILE_BYTES)
        .ok()?
        .ok()?;
    if bytes.len() as u64 != len_bytes {
        return None;
    }
    match scan_chunk::<HistorySchema>(&bytes, keys, Some(chunk_id))
        .into_verdict(TailRule::MustBeClean)
        .1
    {
        ChunkVerdict::Complete { records } => {
            records.iter().map(|r| r.event.time.since_epoch()).max()
        }
        _ => None,
    }
}

/// The current length of chunk `chunk_id`, when it can be opened.
fn chunk_len(storage: &dyn Storage, chunk_id: ChunkId) -> Option<u64> {
    storage
        .open_read(Area::Chunks, &chunk_file_name(chunk_id))
        .ok()
        .map(|file| file.len())
}

/// A chunk's entries' source: its index file when valid for `chunk_id`'s current length, else
/// a scan of the chunk.
fn source_of(
    storage: &dyn Storage,
    keys: &HistoryKeys,
    key: &IndexKey,
    chunk_id: ChunkId,
    report: &mut LoadReport,
) -> Source {
    let Ok(file) = storage.open_read(Area::Chunks, &chunk_file_name(chunk_id)) else {
        return Source::Unreadable;
    };
    let len = file.len();
    if let Ok(index) = read_index_file(storage, key, chunk_id, len) {
        report.files_used += 1;
        return Source::Indexed(index);
    }
    match read_bounded(file.as_ref(), MAX_CHUNK_FILE_BYTES) {
        Ok(Ok(bytes)) => {
            report.chunks_scanned += 1;
            Source::Scanned {
                scan: Box::new(scan_chunk::<HistorySchema>(&bytes, keys, Some(chunk_id))),
                len,
            }
        }
        Ok(Err(_)) | Err(_) => Source::Unreadable,
    }
}

fn count_write(result: Result<(), super::IndexWriteError>, report: &mut LoadReport) {
    match result {
        Ok(()) => report.files_rebuilt += 1,
        Err(_) => report.write_failures += 1,
    }
}

/// Removes the index files (`<chunk id>.idx` only) whose chunk `keep` refuses; returns how
/// many went. Failures are left for the next load.
fn remove_orphans(storage: &dyn Storage, keep: impl Fn(ChunkId) -> bool) -> u64 {
    let Ok(listing) = storage.list(Area::Index) else {
        return 0;
    };
    let mut removed = 0;
    for entry in listing {
        let Some(name) = entry.file_name() else {
            continue;
        };
        let Some(id) = parse_index_file_name(name.as_str()) else {
            continue;
        };
        if !keep(id) && storage.remove(Area::Index, &name).is_ok() {
            removed += 1;
        }
    }
    if removed > 0 {
        // Best effort: an orphan that reappears after a crash is removed again.
        let _ = storage.sync_dir(Area::Index);
    }
    removed
}

/// The index of a full store read, and its corrupt, unreadable and conflicting chunks.
fn index_of_report(read: &StoreReport<Event>, report: &mut LoadReport) -> Index {
    report.full_scan = true;
    report.corrupt.clear();
    report.unreadable.clear();
    for chunk in &read.chunks {
        match chunk.verdict {
            ChunkVerdict::Corrupt { .. } => report.corrupt.push(chunk.file_name.clone()),
            ChunkVerdict::Unreadable { .. } => report.unreadable.push(chunk.file_name.clone()),
            ChunkVerdict::Complete { .. } | ChunkVerdict::TornTail { .. } => {}
        }
    }
    report.conflicts = read.conflicts.len() as u64;
    report.probable_wrong_key = read.probable_wrong_key;
    let entries = read
        .events
        .iter()
        .filter_map(|at| {
            let chunk = read.chunks.get(at.chunk)?;
            let record = chunk.verdict.records().get(at.record)?;
            Some(IndexEntry::of(
                &record.event,
                RecordLocation {
                    chunk_id: chunk.chunk_id?,
                    position: record.position,
                    offset: record.offset,
                    len: record.len,
                    sequence: record.sequence(),
                },
            ))
        })
        .collect();
    Index::from_entries(entries)
}

fn full_read(
    storage: &Arc<dyn Storage>,
    keys: &HistoryKeys,
    mut report: LoadReport,
) -> Result<(Index, LoadReport), LoadIndexError> {
    let read = StoreReader::<History>::new(Arc::clone(storage)).read(keys)?;
    let index = index_of_report(&read, &mut report);
    Ok((index, report))
}

/// `annal index rebuild`: reads the whole store with the reader, rewrites the index file of
/// every chunk that gets one ([`chunk_index_of`]), and removes every other index file. Needs a
/// writable storage with a sidecar. Returns the index and the report (`full_scan` set).
pub fn rebuild_index_files(
    storage: &Arc<dyn Storage>,
    keys: &HistoryKeys,
    key: &IndexKey,
) -> Result<(Index, LoadReport), LoadIndexError> {
    if !storage.writable() || !storage.has_area(Area::Index) {
        return Err(LoadIndexError::NotWritable);
    }
    let read = StoreReader::<History>::new(Arc::clone(storage)).read(keys)?;
    let mut report = LoadReport {
        chunks: read.chunks.len() as u64,
        ..LoadReport::default()
    };
    let mut indexed = HashSet::new();
    for chunk in &read.chunks {
        if let Some(index) = chunk_index_of(chunk) {
            report.chunks_scanned += 1;
            indexed.insert(index.chunk_id);
            count_write(write_index_file(storage.as_ref(), key, &index), &mut report);
        }
    }
    report.orphans_removed = remove_orphans(storage.as_ref(), |id| indexed.contains(&id));
    let index = index_of_report(&read, &mut report);
    Ok((index, report))
}
