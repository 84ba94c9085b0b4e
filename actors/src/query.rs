//! The Query actor: serves `history_query` from the derived index, a hot cache of recently
//! written events, and reads by location.
//!
//! It never blocks capture or the writer: the writer hands it every event it appends (moved, not
//! copied) with its location, which it keeps in the index and, within `HOT_CACHE_MAX_BYTES`, in
//! memory; an older record is read from its chunk by offset, authenticated and parsed, only when
//! a query returns it. The index is loaded lazily on the first query (`index::load_index`: the
//! index files, rebuilding what is missing or stale), so start-up does not wait for it. Every
//! answer goes through the engine's one planner (`query::plan`). A store whose index load found
//! corruption answers `history_storage_corrupt` (fail closed) until it is repaired.
//!
//! Memory is outside the threat model (as an encrypted database's page cache is): the hot cache
//! holds decrypted events of this store only, never written anywhere.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use annal_engine::clock::Clock;
use annal_engine::index::load_index;
use annal_engine::keys::KeyError;
use annal_engine::policy::{Operation, ReadGrant};
use annal_engine::profile::ChunkId;
use annal_engine::query::{Index, IndexEntry, RetentionCutoff, plan_page};
use annal_engine::store::{ChunkHandle, History, RecordLocation, StoreReader};
use annal_schema::tools::{QueryRequest, QueryResponse};
use annal_schema::{ErrorCode, Event};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};

use crate::journal::{JournalMsg, StorageSlot};
use crate::key_custody::{KeyCustodyMsg, StreamKeys};

/// Most bytes of decrypted events the hot cache keeps (by record size), oldest evicted first.
/// A newest-200 query of ~650-byte events needs ~130 KiB; this keeps tens of thousands.
pub const HOT_CACHE_MAX_BYTES: usize = 16 * 1024 * 1024;

/// Most chunk handles kept open for reads by location (each is one file descriptor).
pub const OPEN_CHUNKS_MAX: usize = 16;

/// Longest the query actor waits for key custody or the journal, in milliseconds.
const CHILD_CALL_DEADLINE_MS: u64 = crate::config::CONTROL_DEADLINE_MS;

/// What the Query actor can be asked.
pub enum QueryMsg {
    /// Serve one validated `history_query` page, which the gate allowed.
    Query {
        /// The gate's proof: no read without it.
        grant: ReadGrant,
        /// The request.
        request: QueryRequest,
        /// The page below this sequence (exclusive; `None`: the first page).
        before_sequence: Option<u64>,
        /// The page, or the contract's error code.
        reply: RpcReplyPort<Result<QueryPage, ErrorCode>>,
    },
    /// Events the writer just appended, with their locations (in sequence order).
    Appended(Vec<(RecordLocation, Event)>),
}

/// One page of a `history_query` answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryPage {
    /// The contract's response.
    pub response: QueryResponse,
    /// Older matching events remain (below the first one returned).
    pub has_more: bool,
}

/// What the Query actor starts with.
pub struct QueryArgs {
    /// The store's storage slot.
    pub storage: StorageSlot,
    /// Key custody (the history, session-id and index keys).
    pub keys: ActorRef<KeyCustodyMsg>,
    /// The journal (retention and the owner's state).
    pub journal: ActorRef<JournalMsg>,
    /// The clock (the retention cutoff).
    pub clock: Arc<dyn Clock>,
}

/// The index and what reading needs, once loaded.
struct Loaded {
    /// The purpose keys.
    keys: StreamKeys,
    /// Every record's entry.
    index: Index,
    /// The load found a corrupt or unreadable chunk: reads fail closed.
    corrupt: bool,
}

/// The Query actor's state.
pub struct QueryState {
    /// The arguments.
    args: QueryArgs,
    /// The index, once loaded.
    loaded: Option<Loaded>,
    /// Recently written events by sequence, oldest first, within [`HOT_CACHE_MAX_BYTES`].
    hot: VecDeque<(u64, Event, usize)>,
    /// Bytes in `hot`.
    hot_bytes: usize,
    /// Open chunk handles, for reads by location.
    chunks: HashMap<ChunkId, ChunkHandle<History>>,
}

/// The Query actor.
pub struct QueryActor;

impl QueryState {
    fn remember(&mut self, location: RecordLocation, event: Event) {
        // Before the index is loaded nothing needs noting: the load reads the chunk files, which
        // already hold every record appended so far. After it, an entry it already read is
        // refused as out of order and ignored.
        if let Some(loaded) = self.loaded.as_mut() {
            let _ = loaded.index.push(IndexEntry::of(&event, location));
        }
        let size = usize::try_from(location.len).unwrap_or(usize::MAX);
        self.hot.push_back((location.sequence, event, size));
        self.hot_bytes += size;
        while self.hot_bytes > HOT_CACHE_MAX_BYTES {
            match self.hot.pop_front() {
                Some((_, _, bytes)) => self.hot_bytes -= bytes,
                None => break,
            }
        }
    }

    /// The store's storage, once the writer or the supervisor opened it.
    fn storage(&self) -> Result<Arc<dyn annal_engine::storage::Storage>, ErrorCode> {
        self.args
            .storage
            .get()
            .cloned()
            .ok_or(ErrorCode::HistoryStorageUnavailable)
    }

    /// Loads the keys and the index (once).
    async fn load(&mut self) -> Result<(), ErrorCode> {
        if self.loaded.is_some() {
            return Ok(());
        }
        let storage = self.storage()?;
        let keys = match ractor::call_t!(
            self.args.keys,
            |reply| KeyCustodyMsg::Open {
                create: false,
                reply
            },
            CHILD_CALL_DEADLINE_MS
        ) {
            Ok(Ok(keys)) => keys,
            Ok(Err(error)) => {
                return Err(key_code(&error));
            }
            Err(_) => return Err(ErrorCode::HistoryKeyUnavailable),
        };
        let (index, report) = load_index(&storage, &keys.history, &keys.index)
            .map_err(|_| ErrorCode::HistoryStorageUnavailable)?;
        self.loaded = Some(Loaded {
            keys,
            index,
            corrupt: report.has_corruption(),
        });
        Ok(())
    }

    /// The event at `location`: from the hot cache, else read from its chunk.
    fn event(&mut self, location: &RecordLocation) -> Result<Event, ErrorCode> {
        if let Ok(at) = self
            .hot
            .binary_search_by_key(&location.sequence, |(sequence, _, _)| *sequence)
            && let Some((_, event, _)) = self.hot.get(at)
        {
            return Ok(event.clone());
        }
        let loaded = self
            .loaded
            .as_ref()
            .ok_or(ErrorCode::HistoryStorageUnavailable)?;
        if !self.chunks.contains_key(&location.chunk_id) {
            if self.chunks.len() >= OPEN_CHUNKS_MAX {
                self.chunks.clear();
            }
            let handle = StoreReader::<History>::new(self.storage()?)
                .open_chunk(&loaded.keys.history, location.chunk_id)
                .map_err(|_| ErrorCode::HistoryStorageCorrupt)?;
            self.chunks.insert(location.chunk_id, handle);
        }
        let handle = self
            .chunks
            .get(&location.chunk_id)
            .ok_or(ErrorCode::HistoryStorageUnavailable)?;
        // A record that no longer reads as the index says is damage: fail closed.
        handle
            .read_at(location)
            .map(|record| record.event)
            .map_err(|_| ErrorCode::HistoryStorageCorrupt)
    }

    async fn query(
        &mut self,
        grant: &ReadGrant,
        request: &QueryRequest,
        before_sequence: Option<u64>,
    ) -> Result<QueryPage, ErrorCode> {
        if grant.operation() != Operation::Query {
            return Err(ErrorCode::InvalidHistoryQuery);
        }
        self.load().await?;
        let retention_days = ractor::call_t!(
            self.args.journal,
            |reply| JournalMsg::Retention { reply },
            CHILD_CALL_DEADLINE_MS
        )
        .map_err(|_| ErrorCode::HistoryStorageUnavailable)?;
        let loaded = self
            .loaded
            .as_ref()
            .ok_or(ErrorCode::HistoryStorageUnavailable)?;
        if loaded.corrupt {
            return Err(ErrorCode::HistoryStorageCorrupt);
        }
        let cutoff = RetentionCutoff::new(self.args.clock.now_since_epoch(), retention_days);
        let page = plan_page(
            request,
            &loaded.index,
            &loaded.keys.session,
            cutoff,
            before_sequence,
        );
        let mut events = Vec::with_capacity(page.locations.len());
        for location in &page.locations {
            events.push(self.event(location)?);
        }
        Ok(QueryPage {
            response: QueryResponse { events },
            has_more: page.has_more,
        })
    }
}

/// The contract's code for a key failure.
fn key_code(error: &KeyError) -> ErrorCode {
    ErrorCode::for_failing_health(error.category()).unwrap_or(ErrorCode::HistoryKeyUnavailable)
}

impl Actor for QueryActor {
    type Msg = QueryMsg;
    type State = QueryState;
    type Arguments = QueryArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: QueryArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(QueryState {
            args,
            loaded: None,
            hot: VecDeque::new(),
            hot_bytes: 0,
            chunks: HashMap::new(),
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            QueryMsg::Query {
                grant,
                request,
                before_sequence,
                reply,
            } => {
                let answer = state.query(&grant, &request, before_sequence).await;
                let _ = reply.send(answer);
            }
            QueryMsg::Appended(records) => {
                for (location, event) in records {
                    state.remember(location, event);
                }
            }
        }
        Ok(())
    }
}
