//! The query path's reader: answers `history_query` pages over one store from the lazily
//! loaded index ([`LazyIndex`]), a cache of decrypted events, and reads by location, through
//! the one planner ([`plan_page_filtered`]). The Query actor owns one (and checks the gate's
//! grant before asking it); the bench drives one directly. Synchronous: the storage is
//! injected.
//!
//! - **Hot cache.** Events the writer appended (handed over with their locations), in sequence
//!   order within [`HOT_CACHE_MAX_BYTES`] (by record size), and events read from disk, by
//!   sequence within [`READ_CACHE_MAX_BYTES`]; the oldest sequences are evicted first. Memory is outside the threat model, as an encrypted
//!   database's page cache is: the cache holds decrypted events of this store only and is never
//!   written anywhere.
//! - **Cold reads.** An event not in the cache is read from its chunk by offset
//!   (`ChunkHandle::read_at`: authenticated, parsed, its sequence checked), only when a page
//!   returns it. A record that no longer reads as the index says is damage: the page fails
//!   closed (`history_storage_corrupt`).
//! - **Lazy index.** A plan over the loaded (newest) part is exact when it found more matches
//!   than the page returns, or when the request's lower bound lies inside the loaded part;
//!   otherwise the next older chunk is loaded and the plan repeated.
//! - **Owner's filters** ([`QueryService::page_filtered`]). What the index decides (time
//!   bounds, an outcome's event type) is planned like any rule: a record it rules out is never
//!   read. A capability, application, outcome or text filter reads the remaining candidates,
//!   newest first, until the page holds `limit` matches and one more match shows that older
//!   ones remain (or the candidates end). [`QueryService::records_read`] counts the records
//!   read from their chunks.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use annal_schema::tools::QueryRequest;
use annal_schema::{ErrorCode, Event};

use super::{
    IndexEntry, OwnerFilter, Page, RetentionCutoff, SessionMatch, candidates, plan_page_filtered,
};
use crate::index::{
    ChunkEnding, ChunkIndex, IndexKey, LazyIndex, LoadIndexError, load_index_lazily,
};
use crate::keys::{HistoryKeys, KeyCustody, SessionIdKey};
use crate::profile::ChunkId;
use crate::seal::{SealKey, read_seals, vouched_chunks};
use crate::storage::{Area, Storage};
use crate::store::{ChunkHandle, History, RecordLocation, StoreReader, chunk_file_name};

/// Most bytes of decrypted events the hot cache keeps (by record size), oldest sequences evicted
/// first. A newest-200 page of ~650-byte events needs ~130 KiB; this keeps tens of thousands.
pub const HOT_CACHE_MAX_BYTES: usize = 16 * 1024 * 1024;

/// Most bytes of events read from disk the cache keeps besides (lowest sequences evicted
/// first): the pages a fresh process, or a query reaching past the appended events, read again.
pub const READ_CACHE_MAX_BYTES: usize = 4 * 1024 * 1024;

/// Most chunk handles kept open for reads by location (each is one file descriptor).
pub const OPEN_CHUNKS_MAX: usize = 16;

/// Candidates an owner's filtered read takes from the index at a time before it reads their
/// records (the index is borrowed while they are chosen, the reader while they are read).
pub const FILTER_BATCH_RECORDS: usize = 256;

/// The keys a reader needs.
pub struct ReaderKeys {
    /// Opens history chunks.
    pub history: HistoryKeys,
    /// Matches a request's session id (raw label or opaque id).
    pub session: Arc<SessionIdKey>,
    /// Opens (and rewrites) the derived index files.
    pub index: Arc<IndexKey>,
    /// Verifies the seals, which say which chunks can be deferred.
    pub seal: Arc<SealKey>,
}

impl ReaderKeys {
    /// The reader's keys, derived from the custody's root key.
    pub fn from_custody(custody: &KeyCustody) -> Self {
        Self {
            history: custody.history_keys(),
            session: Arc::new(custody.session_id_key()),
            index: Arc::new(IndexKey::new(&custody.index_key())),
            seal: Arc::new(SealKey::from_custody(custody)),
        }
    }
}

/// One answered page: the events, ascending by sequence, and whether older matches remain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventPage {
    /// The events.
    pub events: Vec<Event>,
    /// Older matching events remain (below the first one returned).
    pub has_more: bool,
}

/// Answers queries over one store; see the module doc.
pub struct QueryService {
    /// The store.
    storage: Arc<dyn Storage>,
    /// Its keys.
    keys: ReaderKeys,
    /// The index, loaded newest first.
    index: LazyIndex,
    /// Decrypted events by sequence, with their record sizes.
    hot: VecDeque<(u64, Event, usize)>,
    /// Bytes in `hot`.
    hot_bytes: usize,
    /// The budget of `hot`, in bytes (and the ceiling of `read`'s).
    hot_max_bytes: usize,
    /// Events read from disk, by sequence, with their record sizes.
    read: BTreeMap<u64, (Event, usize)>,
    /// Bytes in `read`.
    read_bytes: usize,
    /// Open chunk handles, for reads by location.
    chunks: HashMap<ChunkId, ChunkHandle<History>>,
    /// The chunk the writer appended to last, and its stream id (its index file is due when
    /// it closes).
    appending: Option<(ChunkId, String)>,
    /// Sequences reported lost ([`QueryService::forget_lost`]): forgotten again in every
    /// chunk loaded later, where a failed sync may have left them.
    lost: Vec<std::ops::RangeInclusive<u64>>,
    /// Records read from their chunks (authenticated and decrypted) over this reader's life.
    records_read: u64,
}

impl QueryService {
    /// Opens the reader: the seals, then the index of every chunk they do not vouch for and of
    /// the newest sealed ones (see [`LazyIndex`]). Unreadable seals vouch for nothing, so their
    /// chunks are read at once. `growing` is the chunk a live writer appends to (no index file
    /// is written for it until it closes).
    pub fn open(
        storage: Arc<dyn Storage>,
        keys: ReaderKeys,
        growing: Option<ChunkId>,
    ) -> Result<Self, LoadIndexError> {
        let sealed = vouched_chunks(&read_seals(storage.as_ref(), &keys.seal).unwrap_or_default());
        let index = load_index_lazily(&storage, &keys.history, &keys.index, &sealed, growing)?;
        Ok(Self {
            storage,
            keys,
            index,
            hot: VecDeque::new(),
            hot_bytes: 0,
            hot_max_bytes: HOT_CACHE_MAX_BYTES,
            read: BTreeMap::new(),
            read_bytes: 0,
            chunks: HashMap::new(),
            appending: None,
            lost: Vec::new(),
            records_read: 0,
        })
    }

    /// Forgets `chunks`, which the writer is pruning (`store::prune`): their entries, their
    /// deferred seals and open handles, so no page reads a removed file.
    pub fn forget_chunks(&mut self, chunks: &std::collections::BTreeSet<ChunkId>) {
        self.index.forget(chunks);
        self.chunks.retain(|id, _| !chunks.contains(id));
    }

    /// The writer reports the records of `lost` lost (a failed append or sync: never durable,
    /// and after a failed sync most likely gone from the disk), now or in an earlier life (the
    /// journal's `State::lost`): forgets them, in the index and in both caches, and in every
    /// older chunk loaded from now on, so no page returns an event the history reports dropped
    /// (a failed sync may have left it on disk), nor reads a location that may no longer hold
    /// its record.
    pub fn forget_lost(&mut self, lost: &std::ops::RangeInclusive<u64>) {
        if !self.lost.contains(lost) {
            self.lost.push(lost.clone());
        }
        self.index.index.forget_sequences(lost);
        // The byte counts are recounted from what stays (a rare path: a storage fault).
        self.hot.retain(|(sequence, _, _)| !lost.contains(sequence));
        self.hot_bytes = self
            .hot
            .iter()
            .map(|(_, _, bytes)| *bytes)
            .fold(0, usize::saturating_add);
        self.read.retain(|sequence, _| !lost.contains(sequence));
        self.read_bytes = self
            .read
            .values()
            .map(|(_, bytes)| *bytes)
            .fold(0, usize::saturating_add);
    }

    /// Sets the hot cache's budget in bytes (0: no cache at all, every event read from disk;
    /// the default is [`HOT_CACHE_MAX_BYTES`]), evicting the oldest sequences to fit.
    pub fn set_hot_cache_max_bytes(&mut self, bytes: usize) {
        self.hot_max_bytes = bytes;
        self.evict();
    }

    /// Whether a load found a corrupt chunk or conflict: every page fails closed.
    pub fn is_corrupt(&self) -> bool {
        self.index.report.has_corruption()
    }

    /// How many records are indexed so far (deferred chunks not counted).
    pub fn indexed(&self) -> usize {
        self.index.index.len()
    }

    /// How many records this reader read from their chunks (authenticated and decrypted) over
    /// its life: what the caches did not hold. What a filter skipped on the index's word is
    /// never counted.
    pub fn records_read(&self) -> u64 {
        self.records_read
    }

    /// How many sealed chunks are not loaded yet.
    pub fn deferred_chunks(&self) -> usize {
        self.index.deferred_chunks()
    }

    /// An event the writer just appended at `location` (in sequence order): indexed, and
    /// cached. One the index already holds (read from disk at load) is only cached. When it
    /// is the first of a new chunk, the previous one was closed: its index file is returned,
    /// for the caller to write ([`write_index_file`](crate::index::write_index_file), off its hot path).
    pub fn appended(&mut self, location: RecordLocation, event: Event) -> Option<ChunkIndex> {
        let closed = match &self.appending {
            Some((chunk, _)) if *chunk == location.chunk_id => None,
            Some(_) => self.closed_chunk_index(),
            None => None,
        };
        if self.appending.is_none() {
            self.appending = Some((location.chunk_id, event.source.stream_id().to_owned()));
        }
        let _ = self.index.index.push(IndexEntry::of(&event, location));
        self.cache(location, event);
        closed
    }

    /// The index file of the chunk the writer last appended to, when the index holds every one
    /// of its records (positions from 0, no gap, ending at the file's current length): what a
    /// clean stop, or the next chunk's first record, calls for. Asked once per chunk (it
    /// forgets the chunk), so no file is written twice.
    pub fn closed_chunk_index(&mut self) -> Option<ChunkIndex> {
        let (chunk_id, stream_id) = self.appending.take()?;
        // Its records are the newest indexed ones (the writer appends to one chunk at a time).
        let entries = self.index.index.entries();
        let start = entries
            .iter()
            .rposition(|e| e.location.chunk_id != chunk_id)
            .map_or(0, |i| i + 1);
        let mine: Vec<IndexEntry> = entries.get(start..)?.to_vec();
        let whole = mine
            .iter()
            .enumerate()
            .all(|(i, e)| e.location.position == i as u64);
        let chunk_len = mine.last().map(|e| e.location.offset + e.location.len)?;
        let on_disk = self
            .storage
            .open_read(Area::Chunks, &chunk_file_name(chunk_id))
            .ok()
            .map(|f| f.len());
        (whole && on_disk == Some(chunk_len) && self.storage.writable()).then_some(ChunkIndex {
            chunk_id,
            chunk_len,
            stream_id,
            ending: ChunkEnding::Complete,
            entries: mine,
        })
    }

    /// The storage and index key an index file is written with.
    pub fn index_writer(&self) -> (Arc<dyn Storage>, Arc<IndexKey>) {
        (Arc::clone(&self.storage), Arc::clone(&self.keys.index))
    }

    /// Caches an event the writer appended (the newest sequence so far, so the cache stays
    /// ordered and a push is cheap on the writer's pace).
    fn cache(&mut self, location: RecordLocation, event: Event) {
        let size = usize::try_from(location.len).unwrap_or(usize::MAX);
        if self
            .hot
            .back()
            .is_some_and(|(s, _, _)| *s >= location.sequence)
        {
            return;
        }
        self.hot.push_back((location.sequence, event, size));
        self.hot_bytes = self.hot_bytes.saturating_add(size);
        self.evict();
    }

    /// Caches an event read from disk, within its own budget ([`READ_CACHE_MAX_BYTES`]).
    fn cache_read(&mut self, location: RecordLocation, event: Event) {
        let size = usize::try_from(location.len).unwrap_or(usize::MAX);
        if let Some((_, old)) = self.read.insert(location.sequence, (event, size)) {
            self.read_bytes = self.read_bytes.saturating_sub(old);
        }
        self.read_bytes = self.read_bytes.saturating_add(size);
        self.evict();
    }

    fn evict(&mut self) {
        while self.hot_bytes > self.hot_max_bytes {
            match self.hot.pop_front() {
                Some((_, _, bytes)) => self.hot_bytes = self.hot_bytes.saturating_sub(bytes),
                None => break,
            }
        }
        let read_max = self.hot_max_bytes.min(READ_CACHE_MAX_BYTES);
        while self.read_bytes > read_max {
            match self.read.pop_first() {
                Some((_, (_, bytes))) => self.read_bytes = self.read_bytes.saturating_sub(bytes),
                None => break,
            }
        }
    }

    /// A cached event.
    fn cached(&self, sequence: u64) -> Option<&Event> {
        if let Ok(at) = self.hot.binary_search_by_key(&sequence, |(s, _, _)| *s) {
            return self.hot.get(at).map(|(_, event, _)| event);
        }
        self.read.get(&sequence).map(|(event, _)| event)
    }

    /// The page of `request` below `before_sequence` (exclusive; `None`: the first page), with
    /// `cutoff` applied; `history_storage_corrupt` when the store is damaged (fail closed),
    /// `history_storage_unavailable` when it cannot be read.
    pub fn page(
        &mut self,
        request: &QueryRequest,
        cutoff: RetentionCutoff,
        before_sequence: Option<u64>,
    ) -> Result<EventPage, ErrorCode> {
        self.page_filtered(request, &OwnerFilter::NONE, cutoff, before_sequence)
    }

    /// [`QueryService::page`] narrowed by an owner's `filter` (see the module doc): the newest
    /// `limit` events that match every rule of the request and the filter, ascending.
    pub fn page_filtered(
        &mut self,
        request: &QueryRequest,
        filter: &OwnerFilter,
        cutoff: RetentionCutoff,
        before_sequence: Option<u64>,
    ) -> Result<EventPage, ErrorCode> {
        if filter.needs_event() {
            return self.read_filtered(request, filter, cutoff, before_sequence);
        }
        let page = self.plan(request, filter, cutoff, before_sequence)?;
        let mut events = Vec::with_capacity(page.locations.len());
        for location in &page.locations {
            events.push(self.event(location)?);
        }
        Ok(EventPage {
            events,
            has_more: page.has_more,
        })
    }

    /// A filter that needs the events: the candidates the index leaves are read newest first,
    /// a batch at a time, loading older chunks when the loaded part runs out.
    fn read_filtered(
        &mut self,
        request: &QueryRequest,
        filter: &OwnerFilter,
        cutoff: RetentionCutoff,
        before_sequence: Option<u64>,
    ) -> Result<EventPage, ErrorCode> {
        let limit = usize::from(request.limit());
        let session = request
            .session_id()
            .map(|value| SessionMatch::new(value, &self.keys.session));
        // Newest first while collected.
        let mut matched: Vec<Event> = Vec::with_capacity(limit);
        let mut below = before_sequence;
        loop {
            if self.is_corrupt() {
                return Err(ErrorCode::HistoryStorageCorrupt);
            }
            let batch: Vec<RecordLocation> = candidates(
                request,
                filter,
                &self.index.index,
                session.as_ref(),
                cutoff,
                below,
            )
            .take(FILTER_BATCH_RECORDS)
            .map(|e| e.location)
            .collect();
            let loaded_part_done = batch.len() < FILTER_BATCH_RECORDS;
            for location in &batch {
                below = Some(location.sequence);
                let event = self.event(location)?;
                if !filter.admits_event(&event) {
                    continue;
                }
                if matched.len() == limit {
                    // One more match: older matching events remain.
                    matched.reverse();
                    return Ok(EventPage {
                        events: matched,
                        has_more: true,
                    });
                }
                matched.push(event);
            }
            if !loaded_part_done {
                continue;
            }
            if self.lower_bound_loaded(request) || self.index.is_complete() {
                matched.reverse();
                return Ok(EventPage {
                    events: matched,
                    has_more: false,
                });
            }
            self.load_older()?;
        }
    }

    /// Whether the request's lower sequence bound lies inside the loaded part of the index (no
    /// older chunk can hold a match).
    fn lower_bound_loaded(&self, request: &QueryRequest) -> bool {
        match (request.since_sequence(), self.index.index.first_sequence()) {
            (Some(since), Some(first)) => since >= first,
            _ => false,
        }
    }

    /// Loads the next older chunk's entries, forgetting what was reported lost.
    fn load_older(&mut self) -> Result<(), ErrorCode> {
        self.index
            .load_older(&self.storage, &self.keys.history, &self.keys.index)
            .map_err(|_| ErrorCode::HistoryStorageUnavailable)?;
        for lost in &self.lost {
            self.index.index.forget_sequences(lost);
        }
        Ok(())
    }

    /// The plan, loading older chunks until it is exact.
    fn plan(
        &mut self,
        request: &QueryRequest,
        filter: &OwnerFilter,
        cutoff: RetentionCutoff,
        before_sequence: Option<u64>,
    ) -> Result<Page, ErrorCode> {
        loop {
            if self.is_corrupt() {
                return Err(ErrorCode::HistoryStorageCorrupt);
            }
            let page = plan_page_filtered(
                request,
                filter,
                &self.index.index,
                &self.keys.session,
                cutoff,
                before_sequence,
            );
            if page.has_more || self.lower_bound_loaded(request) || self.index.is_complete() {
                return Ok(page);
            }
            self.load_older()?;
        }
    }

    /// The event at `location`: from the cache, else read from its chunk (and cached).
    fn event(&mut self, location: &RecordLocation) -> Result<Event, ErrorCode> {
        if let Some(event) = self.cached(location.sequence) {
            return Ok(event.clone());
        }
        if !self.chunks.contains_key(&location.chunk_id) {
            if self.chunks.len() >= OPEN_CHUNKS_MAX {
                self.chunks.clear();
            }
            let handle = StoreReader::<History>::new(Arc::clone(&self.storage))
                .open_chunk(&self.keys.history, location.chunk_id)
                .map_err(|_| ErrorCode::HistoryStorageCorrupt)?;
            self.chunks.insert(location.chunk_id, handle);
        }
        let handle = self
            .chunks
            .get(&location.chunk_id)
            .ok_or(ErrorCode::HistoryStorageUnavailable)?;
        let event = handle
            .read_at(location)
            .map(|record| record.event)
            .map_err(|_| ErrorCode::HistoryStorageCorrupt)?;
        self.records_read = self.records_read.saturating_add(1);
        if self.hot_max_bytes > 0 {
            self.cache_read(*location, event.clone());
        }
        Ok(event)
    }
}
