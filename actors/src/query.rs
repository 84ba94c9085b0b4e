//! The Query actor: serves `history_query` pages through the engine's reader
//! (`annal_engine::query::QueryService`: the lazily loaded index, the hot cache of decrypted
//! events, reads by location), once the gate's grant says it may.
//!
//! It never blocks capture or the writer: the writer hands it every event it appends (moved, not
//! copied) with its location, which the reader indexes and caches; an older record is read from
//! its chunk by offset, authenticated and parsed, only when a page returns it. The reader is
//! opened on the first query (the seals, then the newest index files; older chunks load when a
//! query reaches them), so start-up does not wait for it. Every answer goes through the engine's
//! one planner. A store whose index load found corruption answers `history_storage_corrupt`
//! (fail closed) until it is repaired. An owner's read may carry the owner's filters
//! (`annal_engine::query::OwnerFilter`); a filter on any other grant is refused
//! (`invalid_history_query`).

use std::sync::Arc;

use annal_engine::clock::Clock;
use annal_engine::keys::KeyError;
use annal_engine::policy::{Operation, ReadGrant};
use annal_engine::query::{OwnerFilter, QueryService, ReaderKeys, RetentionCutoff};
use annal_engine::store::RecordLocation;
use annal_schema::tools::{QueryRequest, QueryResponse};
use annal_schema::{ErrorCode, Event};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};

use crate::journal::{JournalMsg, StorageSlot};
use crate::key_custody::KeyCustodyMsg;

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
        /// The owner's filters (refused on any grant but the owner's; boxed: most reads carry
        /// none, and the message stays small).
        filter: Box<OwnerFilter>,
        /// The page below this sequence (exclusive; `None`: the first page).
        before_sequence: Option<u64>,
        /// The page, or the contract's error code.
        reply: RpcReplyPort<Result<QueryPage, ErrorCode>>,
    },
    /// Events the writer just appended, with their locations (in sequence order).
    Appended(Vec<(RecordLocation, Event)>),
    /// Records the writer reports lost (a failed append or sync): forget them, so no page
    /// returns an event the history reports dropped.
    Lost(std::ops::RangeInclusive<u64>),
    /// The writer is about to remove these pruned chunks' files: forget them (now, and in a
    /// reader opened later in this actor's life) and let every index-file write still running
    /// finish, then answer, so no page reads a removed file and no index file comes back.
    Pruned {
        /// The chunks.
        chunks: Vec<annal_engine::profile::ChunkId>,
        /// Answered once they are forgotten.
        reply: RpcReplyPort<()>,
    },
    /// Test-only: panic inside the handler, as a bug would.
    #[cfg(feature = "testing")]
    InjectPanic,
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

/// The Query actor's state.
pub struct QueryState {
    /// The arguments.
    args: QueryArgs,
    /// The reader, once opened (on the first query).
    reader: Option<QueryService>,
    /// Chunks pruned in this actor's life, forgotten by every reader it opens.
    pruned: std::collections::BTreeSet<annal_engine::profile::ChunkId>,
    /// The index-file writes still running ([`write_index_files`]): a stop waits for them, so
    /// no thread of this engine holds the store (and its lock) once the stop returns.
    index_writes: Vec<tokio::sync::oneshot::Receiver<()>>,
}

/// The Query actor.
pub struct QueryActor;

impl QueryState {
    /// Opens the reader (once): the keys from custody, then the seals and the index.
    /// `growing`: the chunk the writer appends to, when known (the first append opens it).
    async fn reader(
        &mut self,
        growing: Option<annal_engine::profile::ChunkId>,
    ) -> Result<&mut QueryService, ErrorCode> {
        if self.reader.is_none() {
            let storage = self
                .args
                .storage
                .get()
                .cloned()
                .ok_or(ErrorCode::HistoryStorageUnavailable)?;
            let keys = match ractor::call_t!(
                self.args.keys,
                |reply| KeyCustodyMsg::Open {
                    create: false,
                    reply
                },
                CHILD_CALL_DEADLINE_MS
            ) {
                Ok(Ok(keys)) => keys,
                Ok(Err(error)) => return Err(key_code(&error)),
                Err(_) => return Err(ErrorCode::HistoryKeyUnavailable),
            };
            let keys = ReaderKeys {
                history: keys.history,
                session: keys.session,
                index: keys.index,
                seal: keys.seal,
            };
            // What was reported lost, in any life, on the journal's word (the writer journals a
            // range before it tells this actor): a failed sync may have left it on disk. No
            // answer, no reader: a page must not return what the history reports dropped.
            let journaled = ractor::call_t!(
                self.args.journal,
                |reply| JournalMsg::Lost { reply },
                CHILD_CALL_DEADLINE_MS
            )
            .map_err(|_| ErrorCode::HistoryStorageUnavailable)?;
            let mut reader = QueryService::open(storage, keys, growing)
                .map_err(|_| ErrorCode::HistoryStorageUnavailable)?;
            reader.forget_chunks(&self.pruned);
            for lost in &journaled {
                reader.forget_lost(lost);
            }
            self.reader = Some(reader);
        }
        self.reader
            .as_mut()
            .ok_or(ErrorCode::HistoryStorageUnavailable)
    }

    async fn query(
        &mut self,
        grant: &ReadGrant,
        request: &QueryRequest,
        filter: &OwnerFilter,
        before_sequence: Option<u64>,
    ) -> Result<QueryPage, ErrorCode> {
        if grant.operation() != Operation::Query || !filter.permitted(grant) {
            return Err(ErrorCode::InvalidHistoryQuery);
        }
        let retention_days = ractor::call_t!(
            self.args.journal,
            |reply| JournalMsg::Retention { reply },
            CHILD_CALL_DEADLINE_MS
        )
        .map_err(|_| ErrorCode::HistoryStorageUnavailable)?;
        let cutoff = RetentionCutoff::new(self.args.clock.now_since_epoch(), retention_days);
        let page =
            self.reader(None)
                .await?
                .page_filtered(request, filter, cutoff, before_sequence)?;
        Ok(QueryPage {
            response: QueryResponse {
                events: page.events,
            },
            has_more: page.has_more,
        })
    }
}

/// Nice value of the thread that writes index files (Linux: 0 is the default, 19 the lowest
/// priority). Index files are derived (a lost one is rebuilt at the next load) and no commit
/// waits for them, but encoding a full chunk's index takes milliseconds of CPU: at a lower
/// priority that work yields the core to the writer, the ingress and the capturing threads
/// rather than stretching the next commit.
pub const INDEX_WRITER_NICE: i32 = 10;

/// Writes the index files of chunks the writer closed, unsynced
/// (`index::write_index_file_unsynced`): derived files, so a failed or lost write is left for
/// the next load to redo, and the writer's group commits never wait behind them. They are
/// written on a thread of their own at [`INDEX_WRITER_NICE`] (on Linux the nice value is per
/// thread, so no other thread's priority changes). The receiver reports the end (a clean stop
/// waits for it); `None` when there was nothing to write or no thread could start.
fn write_index_files(
    reader: &QueryService,
    closed: Vec<annal_engine::index::ChunkIndex>,
) -> Option<tokio::sync::oneshot::Receiver<()>> {
    if closed.is_empty() {
        return None;
    }
    let (storage, key) = reader.index_writer();
    let (done, written) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("annal-index".into())
        .spawn(move || {
            lower_this_threads_priority();
            for index in &closed {
                let _ =
                    annal_engine::index::write_index_file_unsynced(storage.as_ref(), &key, index);
            }
            // The storage (with the store's lock) goes before the end is reported, so a stop
            // that waited for this leaves nothing holding the store.
            drop((storage, key));
            let _ = done.send(());
        })
        .ok()?;
    Some(written)
}

/// Moves the calling thread (only it) to [`INDEX_WRITER_NICE`]. A refusal changes nothing but
/// the priority.
fn lower_this_threads_priority() {
    let _ = rustix::process::setpriority_process(None, INDEX_WRITER_NICE);
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
            reader: None,
            pruned: std::collections::BTreeSet::new(),
            index_writes: Vec::new(),
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            #[cfg(feature = "testing")]
            QueryMsg::InjectPanic => panic!("injected query panic (test)"),
            QueryMsg::Query {
                grant,
                request,
                filter,
                before_sequence,
                reply,
            } => {
                let answer = state
                    .query(&grant, &request, &filter, before_sequence)
                    .await;
                let _ = reply.send(answer);
            }
            QueryMsg::Appended(records) => {
                // The first append opens the reader (the store and its keys are open then), so
                // the hot cache holds what is written from then on. Should it fail, the next
                // query tries again and the records are read from disk.
                let growing = records.first().map(|(location, _)| location.chunk_id);
                if let Ok(reader) = state.reader(growing).await {
                    let closed: Vec<_> = records
                        .into_iter()
                        .filter_map(|(location, event)| reader.appended(location, event))
                        .collect();
                    // The write finishes on its own; a stop waits for those still running.
                    let started = write_index_files(reader, closed);
                    state.index_writes.retain_mut(|write| {
                        matches!(
                            write.try_recv(),
                            Err(tokio::sync::oneshot::error::TryRecvError::Empty)
                        )
                    });
                    state.index_writes.extend(started);
                }
            }
            QueryMsg::Lost(lost) => {
                // A reader opened later reads them from the journal, which has them first.
                if let Some(reader) = state.reader.as_mut() {
                    reader.forget_lost(&lost);
                }
            }
            QueryMsg::Pruned { chunks, reply } => {
                state.pruned.extend(chunks);
                if let Some(reader) = state.reader.as_mut() {
                    reader.forget_chunks(&state.pruned);
                }
                // The writer removes the chunks' index files once this answers: a write still
                // running (a chunk that closed just before it was pruned) would put its file
                // back after the removal, encrypted metadata of pruned events left on disk.
                for write in state.index_writes.drain(..) {
                    let _ = write.await;
                }
                let _ = reply.send(());
            }
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // A clean stop closes the writer's chunk: its index file is due, so the next open
        // reads that file instead of scanning the chunk. Written before the stop completes, as
        // is every earlier write still running.
        if let Some(reader) = state.reader.as_mut() {
            let closed: Vec<_> = reader.closed_chunk_index().into_iter().collect();
            state.index_writes.extend(write_index_files(reader, closed));
        }
        for write in state.index_writes.drain(..) {
            let _ = write.await;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{INDEX_WRITER_NICE, lower_this_threads_priority};
    use rustix::process::getpriority_process;

    #[test]
    fn the_index_writer_lowers_its_own_priority_and_no_other_threads() {
        let before = getpriority_process(None).unwrap();
        let inside = std::thread::spawn(|| {
            lower_this_threads_priority();
            getpriority_process(None).unwrap()
        })
        .join()
        .unwrap();
        // A process already below that priority cannot be raised to it: it stays where it is.
        assert_eq!(inside, INDEX_WRITER_NICE.max(before));
        assert_eq!(
            getpriority_process(None).unwrap(),
            before,
            "the caller was lowered too"
        );
    }
}
