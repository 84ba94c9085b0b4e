//! The Writer actor: owns the history stream's writer, group commit, drop markers and sequence
//! reservation; asks the Journal actor for everything the journal records.
//!
//! Life of one captured event from here on: the Ingress hands the writer a batch of drained
//! items; the writer turns each into a v0 `EventDraft` (the keyed session id derived here, the
//! action id from the engine's seed, the time formatted once), puts one `health{events_dropped}`
//! event before the first event after any drops, reserves sequences in the journal when the
//! batch would pass the reservation (durable before the history write, so a sequence is never
//! reused), appends the batch through `StoreWriter<History>`, and syncs on the next tick (group
//! commit) or at once for a flush or control operation.
//!
//! At open it reads the contract's on/off state beside the journal (`state.json` and the newest
//! unread lifecycle `control` event): a disable or pause another implementation wrote wins, is
//! journaled with its source, and annal's answer is written back to both places
//! (`docs/design.md`, "One truth about on and off"). It records the sequences a crashed
//! predecessor skipped, and a clean stop releases the rest of its reservation, so a clean
//! restart leaves no gap ("No gap without a cause").

use std::sync::Arc;

use annal_engine::capture::{CaptureControl, Captured, Drained};
use annal_engine::clock::Clock;
use annal_engine::health::{Signal, SignalKind};
use annal_engine::history::{self, CheckpointOutcome, CheckpointSync, Effect};
use annal_engine::journal::{CallerKind, JournalEvent};
use annal_engine::keys::KeyError;
use annal_engine::storage::{Access, Storage};
use annal_engine::store::{
    AppendError, AppendReceipt, ControlRead, History, OpenState, StoreWriter, WriterConfig,
    create_store, open_store, read_state_mirror, write_state_mirror,
};
use annal_schema::tools::{STORAGE_PROFILE_ID, StatusResponse};
use annal_schema::{ControlOperation, EventDraft, HealthCategory, Payload};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};

use crate::config::EngineConfig;
use crate::journal::{JournalMsg, StorageSlot};
use crate::key_custody::{KeyCustodyMsg, StreamKeys};

pub use annal_engine::history::SEQUENCE_RESERVE_BLOCK;

pub use annal_engine::history::SESSION_ID_CACHE_ENTRIES;

/// How often the writer checks whether an idle chunk reached its age limit, in seconds. Far
/// below `CHUNK_MAX_AGE_SECS`; the only timer an idle writer keeps.
pub const ROTATION_CHECK_SECS: u64 = 60;

/// Longest the writer waits for the journal or key custody, in milliseconds.
const CHILD_CALL_DEADLINE_MS: u64 = crate::config::CONTROL_DEADLINE_MS;

/// What the writer can be asked.
pub enum WriterMsg {
    /// A batch drained from the capture queue; the reply says it was appended (or counted as
    /// lost), so the ingress knows no batch vanished with a failing writer.
    Batch {
        /// The drained items, in queue order.
        items: Vec<Drained<Captured>>,
        /// Acknowledges the batch.
        reply: RpcReplyPort<()>,
    },
    /// The owner's control operation; replies after it is durable.
    Control {
        /// Which operation.
        operation: ControlOperation,
        /// Who asked.
        caller: CallerKind,
        /// The status after it, or why it failed.
        reply: StatusReply,
    },
    /// The owner changes a setting; replies after it is durable.
    Set {
        /// Which setting, and its new value.
        setting: Setting,
        /// Who asked.
        caller: CallerKind,
        /// The status after it, or why it failed.
        reply: StatusReply,
    },
    /// Make everything received so far durable.
    Sync {
        /// The status after the sync, or why it failed.
        reply: StatusReply,
    },
    /// The contract's status.
    Status {
        /// Where the status goes.
        reply: RpcReplyPort<StatusResponse>,
    },
    /// A read returned events: append the contract's `access` event (not part of that read's
    /// answer).
    Access {
        /// Who read.
        operation: annal_schema::AccessOperation,
        /// How many events the read returned (>= 1).
        returned_events: annal_schema::ReturnedEvents,
    },
    /// Group commit: sync what is unsynced (armed by the first unsynced append).
    Tick,
    /// Close an idle chunk that reached its age limit.
    RotationCheck,
    /// Nothing will drain the capture queue for the rest of the engine's life (the supervisor
    /// gave up on the ingress): capture closes and is never opened again.
    Undrained,
    /// Test-only: panic inside the handler, as a bug would.
    #[cfg(feature = "testing")]
    InjectPanic,
}

/// Where a flush, a sync or a control operation sends the status after it (or why it failed).
pub type StatusReply = RpcReplyPort<Result<StatusResponse, ControlError>>;

impl WriterMsg {
    /// The status reply port this message carries, if it is one that answers with a status
    /// (for [`hand_on`] to answer a message that never arrived).
    pub(crate) fn status_reply(self) -> Option<StatusReply> {
        match self {
            Self::Control { reply, .. } | Self::Set { reply, .. } | Self::Sync { reply } => {
                Some(reply)
            }
            _ => None,
        }
    }
}

pub use annal_engine::history::Setting;

/// Why a control operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ControlError {
    /// The key could not be loaded or created (its fixed category).
    #[error("the history key is not available ({0})")]
    Key(HealthCategory),
    /// The store could not be read or written.
    #[error("the history store is unavailable")]
    Storage,
    /// The operation is not allowed in this state (for example pause while disabled).
    #[error("the operation is not allowed now")]
    Refused,
    /// A setting's value is outside its bounds (nothing was changed; it is never clamped).
    #[error("the value is outside the setting's bounds")]
    OutOfBounds,
    /// The engine did not answer in time or is shutting down.
    #[error("the engine did not answer in time")]
    Unavailable,
}

/// Sends `message`, which carries a caller's reply port, on to `actor`, which answers the
/// caller itself. If `actor` is gone the message comes back and `reply_of` takes its port out to
/// answer [`ControlError::Unavailable`]; a port that cannot be taken back is dropped, which the
/// caller reads as unavailable too.
pub(crate) fn hand_on<M: ractor::Message>(
    actor: &ActorRef<M>,
    message: M,
    reply_of: impl FnOnce(M) -> Option<StatusReply>,
) {
    if let Err(ractor::MessagingErr::SendErr(message)) = actor.send_message(message)
        && let Some(reply) = reply_of(message)
    {
        let _ = reply.send(Err(ControlError::Unavailable));
    }
}

/// What the writer starts with (also on a restart).
pub struct WriterArgs {
    /// The engine's configuration.
    pub config: EngineConfig,
    /// The clock.
    pub clock: Arc<dyn Clock>,
    /// The key custody actor.
    pub keys: ActorRef<KeyCustodyMsg>,
    /// The journal actor.
    pub journal: ActorRef<JournalMsg>,
    /// The capture admission switch.
    pub capture: CaptureControl,
    /// The seed action ids are derived from (drawn once per engine).
    pub action_seed: [u8; 32],
    /// The store's storage, shared with the journal (set once the store exists).
    pub storage: StorageSlot,
    /// The query actor, told of every appended event (its index and hot cache).
    pub query: Option<ActorRef<crate::query::QueryMsg>>,
    /// Nothing drains the capture queue for the rest of the engine's life (the ingress was
    /// given up on): capture is never opened.
    pub undrained: bool,
}

/// The history writer, once the key is loaded.
struct Open {
    /// The purpose keys.
    keys: StreamKeys,
    /// The history stream.
    history: StoreWriter<History>,
    /// When the oldest history record not yet synced was appended (`None`: all synced). The
    /// group-commit tick syncs once that is `sync_interval` old, so a flush's sync in between
    /// moves the deadline instead of leaving a second, early sync behind it.
    unsynced_since: Option<tokio::time::Instant>,
    /// Which sealed chunks retention and eviction may prune, and which are recorded pruned but
    /// not yet removed (`store::prune`).
    pruner: annal_engine::store::Pruner,
}

/// The writer's state.
pub struct WriterState {
    /// The engine's configuration.
    config: EngineConfig,
    /// The clock.
    clock: Arc<dyn Clock>,
    /// The key custody actor.
    keys: ActorRef<KeyCustodyMsg>,
    /// The journal actor.
    journal: ActorRef<JournalMsg>,
    /// The capture admission switch.
    capture: CaptureControl,
    /// Builds history drafts: the channel's action ids, the session ids derived so far.
    drafter: history::Drafter,
    /// The store's storage slot.
    storage: StorageSlot,
    /// The query actor, told of every appended event.
    query: Option<ActorRef<crate::query::QueryMsg>>,
    /// The history writer, once open.
    open: Option<Open>,
    /// The writer's rules and what they know between messages: the journal's projection as
    /// of the writer's last exchange with it, drops not yet reported, the sequence
    /// reservation, store and key failures (`annal_engine::history`).
    rules: history::State,
    /// Encrypted bytes in the store, as far as this writer knows: the history's chunks (the
    /// contract's `bytes_used`) and annal's journal chunks; the quota counts both.
    bytes: StoreBytes,
    /// This actor, for arming the group-commit timer.
    myself: ActorRef<WriterMsg>,
    /// Whether a group-commit tick is armed (an idle writer has none).
    tick_armed: bool,
    /// Seal jobs (a seal file written on a blocking thread, two syncs and a rename, then its
    /// checkpoint stored through key custody: all off the capture path), each waiting for the
    /// one before; each answers what it did. Awaited at stop.
    seal_writes: Vec<SealWrite>,
    /// Where the newest seal job will hand the checkpoint's standing to the next one; `None`
    /// until this writer's first job (which compares the checkpoint with the chain on disk).
    checkpoint_tail: Option<tokio::sync::oneshot::Receiver<CheckpointSync>>,
}

/// A seal job in flight, with the seal it writes: when it ends, the pruner learns from it
/// whether the chunk is sealed (no need to read the file back).
struct SealWrite {
    /// The chunk and the seal the job writes; `None` for a job that only compares the
    /// checkpoint.
    sealing: Option<(annal_engine::profile::ChunkId, annal_engine::seal::Seal)>,
    /// The job.
    task: tokio::task::JoinHandle<SealOutcome>,
}

/// What one seal job did.
#[derive(Debug)]
struct SealOutcome {
    /// Its seal file could not be written (the chunk stays unsealed; `verify` reports it).
    seal_failed: bool,
    /// What became of the checkpoint.
    checkpoint: CheckpointOutcome,
}

/// What a seal job needs besides its seal.
struct SealJob {
    /// The store's storage.
    storage: Arc<dyn Storage>,
    /// The seal key.
    key: Arc<annal_engine::seal::SealKey>,
    /// Key custody, which keeps the checkpoint.
    keys: ActorRef<KeyCustodyMsg>,
    /// How long a key custody call may take, in milliseconds.
    deadline_ms: u64,
    /// The chunk and its prepared seal; `None` for a job that only compares the checkpoint.
    seal: Option<(annal_engine::store::ClosedChunk, annal_engine::seal::Seal)>,
}

impl SealJob {
    /// Waits for the job before, writes the seal (if any) and then keeps the checkpoint: the
    /// first job of a writer's life compares it with every verified seal on disk
    /// (`seal::reconcile`), later ones store their seal's checkpoint. Hands the checkpoint's
    /// standing on through `done`.
    async fn run(
        self,
        prior: Option<tokio::sync::oneshot::Receiver<CheckpointSync>>,
        done: tokio::sync::oneshot::Sender<CheckpointSync>,
    ) -> SealOutcome {
        use annal_engine::seal::{Checkpoint, CheckpointError, Reconciled};
        let mut sync = match prior {
            Some(prior) => prior.await.unwrap_or(CheckpointSync::Unchecked),
            None => CheckpointSync::Unchecked,
        };
        let sealing = self.seal.is_some();
        let checkpoint = self.seal.as_ref().map(|(_, seal)| Checkpoint::of(seal));
        let check = sync == CheckpointSync::Unchecked;
        let (storage, key, seal) = (self.storage, self.key, self.seal);
        let (written, chain) = tokio::task::spawn_blocking(move || {
            let written = seal.as_ref().is_none_or(|(chunk, seal)| {
                annal_engine::seal::write_seal(storage.as_ref(), chunk, seal, &key).is_ok()
            });
            // Read after the write, so the chain ends with this job's seal.
            let chain = (written && check)
                .then(|| annal_engine::seal::read_seals(storage.as_ref(), &key).ok())
                .flatten()
                .map(|reads| {
                    reads
                        .iter()
                        .filter_map(|read| read.seal.as_ref().ok())
                        .map(Checkpoint::of)
                        .collect::<Vec<_>>()
                });
            (written, chain)
        })
        .await
        .unwrap_or((false, None));
        let deadline = self.deadline_ms;
        let outcome = match (written, sync) {
            (false, _) | (true, CheckpointSync::Frozen) => CheckpointOutcome::Untouched,
            (true, CheckpointSync::Unchecked) => match chain {
                None => CheckpointOutcome::Failed(HealthCategory::StorageUnavailable),
                Some(chain) => match ractor::call_t!(
                    self.keys,
                    |reply| KeyCustodyMsg::ReconcileCheckpoint { chain, reply },
                    deadline
                ) {
                    Ok(Ok(Reconciled::RolledBack { .. })) => {
                        sync = CheckpointSync::Frozen;
                        CheckpointOutcome::RolledBack
                    }
                    Ok(Ok(_)) => {
                        sync = CheckpointSync::Following;
                        CheckpointOutcome::Verified
                    }
                    Ok(Err(error)) => CheckpointOutcome::Failed(error.category()),
                    Err(_) => CheckpointOutcome::Failed(HealthCategory::KeyUnavailable),
                },
            },
            (true, CheckpointSync::Following) => match checkpoint {
                None => CheckpointOutcome::Untouched,
                Some(checkpoint) => match ractor::call_t!(
                    self.keys,
                    |reply| KeyCustodyMsg::StoreCheckpoint { checkpoint, reply },
                    deadline
                ) {
                    Ok(Ok(())) => CheckpointOutcome::Kept,
                    // Moved ahead of or away from this writer's chain since it compared them:
                    // another history's writer. Never follow it.
                    Ok(Err(
                        CheckpointError::WouldGoBack { .. } | CheckpointError::Diverged { .. },
                    )) => {
                        sync = CheckpointSync::Frozen;
                        CheckpointOutcome::RolledBack
                    }
                    Ok(Err(error)) => CheckpointOutcome::Failed(error.category()),
                    Err(_) => CheckpointOutcome::Failed(HealthCategory::KeyUnavailable),
                },
            },
        };
        let _ = done.send(sync);
        SealOutcome {
            seal_failed: sealing && !written,
            checkpoint: outcome,
        }
    }
}

/// The Writer actor.
pub struct WriterActor;

/// Encrypted bytes of the store's chunk files, by stream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct StoreBytes {
    /// The history's chunks (`computer-history/chunks/`): what the reference counts as
    /// `bytes_used`, and what the contract's status reports.
    history: u64,
    /// annal's journal chunks (the sidecar's `engine/journal/`).
    journal: u64,
}

impl StoreBytes {
    /// Both, read from the directories.
    fn read(storage: &dyn Storage) -> Self {
        use annal_engine::storage::Area;
        let of = |area: Area| -> u64 {
            storage
                .list(area)
                .ok()
                .into_iter()
                .flatten()
                .filter_map(|entry| entry.file_name())
                .filter_map(|name| storage.open_read(area, &name).ok().map(|f| f.len()))
                .sum()
        };
        Self {
            history: of(Area::Chunks),
            journal: of(Area::Journal),
        }
    }

    /// What the quota counts: history and journal chunks (`docs/design.md`, "Pruning").
    fn total(self) -> u64 {
        self.history.saturating_add(self.journal)
    }
}

impl WriterState {
    /// Journals a signal (never blocks the writer on it).
    fn signal(&self, kind: SignalKind) {
        let signal = Signal {
            at_ms: self.clock.now_ms(),
            kind,
        };
        let _ = self
            .journal
            .cast(JournalMsg::Record(vec![JournalEvent::SupervisorSignalled(
                signal,
            )]));
    }

    /// Appends `events` to the journal and waits for it (and its sync, when `durable`).
    async fn journal(
        &mut self,
        events: Vec<JournalEvent>,
        durable: bool,
    ) -> Result<(), ControlError> {
        let answer = ractor::call_t!(
            self.journal,
            |reply| JournalMsg::Append {
                events,
                durable,
                reply
            },
            CHILD_CALL_DEADLINE_MS
        );
        match answer {
            Ok(Ok(projection)) => {
                self.rules.projection = projection;
                Ok(())
            }
            Ok(Err(failed)) => {
                // What the failure left in effect: a narrowing stays, a widening is withdrawn.
                self.rules.projection = failed.projection;
                Err(self.storage_fault(HealthCategory::StorageUnavailable))
            }
            Err(_) => Err(self.storage_fault(HealthCategory::StorageUnavailable)),
        }
    }

    /// Carries out what the rules decided, in order.
    fn carry_out(&mut self, effects: impl IntoIterator<Item = Effect>) {
        for effect in effects {
            match effect {
                Effect::Record(events) => {
                    let _ = self.journal.cast(JournalMsg::Record(events));
                }
                Effect::Signal(kind) => self.signal(kind),
                Effect::ForgetLost(range) => {
                    if let Some(query) = &self.query {
                        let _ = query.cast(crate::query::QueryMsg::Lost(range));
                    }
                }
            }
        }
    }

    fn storage_fault(&mut self, category: HealthCategory) -> ControlError {
        let signal = self.rules.storage_fault(category);
        self.carry_out([signal]);
        ControlError::Storage
    }

    /// Compares the bytes in the store with the quota, and signals when that changes
    /// (`history::State::check_quota`). Pruning ([`WriterState::prune`]) runs first.
    fn check_quota(&mut self) {
        let changed = self.rules.check_quota(self.bytes.total());
        self.carry_out(changed);
    }

    /// Opens or closes capture admission as the rules say (`history::State::accepting`).
    fn update_capture(&self) {
        self.capture.set_accepting(self.rules.accepting());
    }

    /// The oldest event time a query may return now: what physical retention prunes below.
    fn retention_cutoff(&self) -> annal_engine::query::RetentionCutoff {
        self.rules.retention_cutoff(self.clock.now_since_epoch())
    }

    /// The store's use against its quota, when the owner chose `evict_oldest`.
    fn eviction(&self) -> Option<annal_engine::store::Eviction> {
        self.rules.eviction(self.bytes.total())
    }

    /// Tells the pruner of chunks just closed (their seals are being written).
    fn note_closed(&mut self, closed: &[annal_engine::store::ClosedChunk]) {
        if let Some(open) = self.open.as_mut() {
            for chunk in closed {
                open.pruner.closed(chunk);
            }
        }
    }

    /// One pruning pass (`store::prune`): what retention and, with `evict_oldest` at the quota,
    /// eviction take is recorded in the journal, durably, and only then removed. A pass with
    /// nothing due touches no file. The caller checks the quota after it.
    async fn prune(&mut self) {
        let Some(storage) = self.storage.get().cloned() else {
            return;
        };
        let (cutoff, eviction) = (self.retention_cutoff(), self.eviction());
        let Some(open) = self.open.as_ref() else {
            return;
        };
        let current = open.history.current_chunk();
        if open.pruner.due(current, cutoff, eviction) {
            let mut plan = self
                .open
                .as_ref()
                .map(|o| o.pruner.plan(current, cutoff, eviction));
            let waited = plan
                .as_ref()
                .zip(self.open.as_ref())
                .is_some_and(|(plan, o)| o.pruner.needs_awaited(plan, current, cutoff, eviction));
            if waited {
                // The seals being written would change the plan: let them finish (two syncs
                // and a checkpoint each), then plan again.
                self.reap_seal_writes(true).await;
                plan = self
                    .open
                    .as_ref()
                    .map(|o| o.pruner.plan(current, cutoff, eviction));
            }
            let plan = match (self.open.as_mut(), plan) {
                (Some(open), Some(plan)) => {
                    let plan = open.pruner.confirm_on_disk(storage.as_ref(), plan);
                    let (history, index) = (&open.keys.history, &open.keys.index);
                    open.pruner.confirm_latest_times(plan, cutoff, |chunk| {
                        annal_engine::index::latest_event_time(
                            storage.as_ref(),
                            history,
                            index,
                            chunk.chunk_id,
                            chunk.len_bytes,
                        )
                    })
                }
                _ => return,
            };
            // The records durable first: a file goes only once the journal says why.
            if !plan.is_empty()
                && self.journal(plan.events(), true).await.is_ok()
                && let Some(open) = self.open.as_mut()
            {
                open.pruner.recorded(plan);
            }
        }
        self.remove_pruned(&storage).await;
    }

    /// Removes the files of the chunks recorded as pruned. The Query actor drops them from its
    /// index first (and answers), so no query plans a read of a file about to go. A removal
    /// that fails is a storage signal; the chunk stays recorded and a later pass removes it.
    async fn remove_pruned(&mut self, storage: &Arc<dyn Storage>) {
        let pending = match self.open.as_ref() {
            Some(open) => open.pruner.pending(),
            None => return,
        };
        if pending.is_empty() {
            return;
        }
        if let Some(query) = &self.query {
            let _ = ractor::call_t!(
                query,
                |reply| crate::query::QueryMsg::Pruned {
                    chunks: pending,
                    reply
                },
                CHILD_CALL_DEADLINE_MS
            );
        }
        let removed = match self.open.as_mut() {
            Some(open) => open.pruner.remove_recorded(storage.as_ref()),
            None => return,
        };
        self.bytes = StoreBytes::read(storage.as_ref());
        if removed.is_err() {
            let _ = self.storage_fault(HealthCategory::StorageUnavailable);
        }
    }

    /// The contract's status, from the journal's current projection (health included: a fold
    /// over the persisted signals and the live drop count).
    async fn status(&mut self) -> StatusResponse {
        // Read from the directories, as the reference reads them (the running count adds only
        // records, not the headers of chunks created since).
        if let Some(storage) = self.storage.get() {
            self.bytes = StoreBytes::read(storage.as_ref());
        }
        let admitted = self.config.admitted;
        let pending_drops = self.capture.pending_drops() + self.rules.lost_unreported();
        let reading = ractor::call_t!(
            self.journal,
            |reply| JournalMsg::Status {
                admitted,
                pending_drops,
                reply
            },
            CHILD_CALL_DEADLINE_MS
        )
        .unwrap_or_else(|_| {
            self.rules
                .projection
                .status_reading(admitted, pending_drops)
        });
        status_from(&self.config, reading, self.bytes.history, pending_drops)
    }

    /// Opens the store (creating it when `create`), loads the key (creating it when `create`),
    /// opens the journal (which replays its projection) and the history writer above the
    /// journal's sequence floor. Key and storage failures become signals.
    async fn open_writers(&mut self, create: bool) -> Result<(), ControlError> {
        if self.open.is_some() {
            return Ok(());
        }
        if self.storage.get().is_none() {
            if create {
                match create_store(&self.config.layout) {
                    Ok(()) | Err(annal_engine::store::CreateStoreError::AlreadyExists { .. }) => {}
                    Err(_) => return Err(self.storage_fault(HealthCategory::StorageUnavailable)),
                }
            }
            match open_store(&self.config.layout, Access::Write) {
                Ok(storage) => {
                    let _ = self.storage.set(Arc::new(storage));
                }
                Err(_) if !create => return Ok(()),
                Err(_) => return Err(self.storage_fault(HealthCategory::StorageUnavailable)),
            }
        }
        let Some(storage) = self.storage.get().cloned() else {
            return Ok(());
        };
        let keys = match ractor::call_t!(
            self.keys,
            |reply| KeyCustodyMsg::Open { create, reply },
            annal_engine::clock::millis(self.config.key_call_deadline).saturating_add(1_000)
        ) {
            Ok(Ok(keys)) => keys,
            Ok(Err(KeyError::NotFound)) if !create => return Ok(()),
            Ok(Err(error)) => return Err(self.key_fault(error.category())),
            Err(_) => return Err(self.key_fault(HealthCategory::KeyUnavailable)),
        };
        let recovered = self.rules.key_ok();
        self.carry_out(recovered);
        // The journal first: its projection holds the sequence floor of the history stream.
        let projection = match ractor::call_t!(
            self.journal,
            |reply| JournalMsg::Open {
                keys: keys.clone(),
                reply
            },
            CHILD_CALL_DEADLINE_MS
        ) {
            Ok(Ok(projection)) => projection,
            _ => return Err(self.storage_fault(HealthCategory::StorageUnavailable)),
        };
        if projection.health_fold.key_load_ends_a_failure() {
            // The key loaded: a key failure an earlier generation or process signalled is over
            // (its `key_failing` ended with it).
            self.signal(SignalKind::KeyRecovered);
        }
        let mut config = WriterConfig::new(keys.reference.clone(), std::num::NonZeroU64::MIN);
        config.sequence_floor = projection
            .history_high_water
            .and_then(annal_schema::Sequence::new);
        config.chunk_size_limit_bytes =
            annal_engine::store::chunk_size_limit_for_quota(projection.quota_bytes);
        // The seals first: a chunk a verified seal vouches for is not read (after a clean
        // stop, none is), and the newest one is the chain's tip. A seal that does not verify
        // vouches for nothing and is never linked to (verify reports it).
        let seals =
            annal_engine::seal::read_seals(storage.as_ref(), &keys.seal).unwrap_or_default();
        let sealed = annal_engine::seal::vouched_chunks(&seals);
        let last_seal = annal_engine::seal::chain_tip(&seals).cloned();
        let history = match StoreWriter::<History>::open_skipping_sealed(
            Arc::clone(&storage),
            keys.history.clone(),
            config,
            Arc::clone(&self.clock),
            &sealed,
        ) {
            Ok(history) => history,
            Err(_) => return Err(self.storage_fault(HealthCategory::StorageUnavailable)),
        };
        // A crash's torn tails, once each (readers leave them out whether recorded or not).
        // (A tear outside the journal's bounds is not recorded: the journal would refuse it.)
        let tears = history::tears_to_record(&projection, history.torn_tails_at_open());
        if !tears.is_empty() {
            let _ = self.journal.cast(JournalMsg::Record(tears));
        }
        let reserved_through = history.high_water().map_or(0, |s| s.get());
        // A crash's last chunks, complete but never closed: sealed now, so they become
        // prunable and no later open reads them. Only those no seal file names (a mismatched
        // seal is verify's to report) and whose records follow the chain's tip (so the chain
        // stays in sequence order); the rest stay unsealed, as before.
        let leftovers =
            history::leftovers_to_seal(history.unsealed_at_open(), &seals, last_seal.as_ref());
        // What may be pruned; a chunk recorded pruned in an earlier life and still present (a
        // crash between its record and its removal) is removed by the pass below. A crash's
        // torn chunks are never sealed: what the open read of them lets retention and eviction
        // take them all the same (module `store::prune`). A pruner that cannot be built prunes
        // nothing in this life.
        let pruner = annal_engine::store::Pruner::at_open(
            &storage,
            &seals,
            &projection.pruned,
            &keys.journal,
        )
        .map(|mut pruner| {
            for torn in history
                .torn_tails_at_open()
                .iter()
                .filter_map(|t| t.prunable)
            {
                pruner.add_torn(torn, &seals);
            }
            pruner
        })
        .unwrap_or_default();
        self.bytes = StoreBytes::read(storage.as_ref());
        let journal_floor = projection.history_high_water;
        let open_state = history.open_state();
        self.rules.projection = projection;
        self.rules.opened(reserved_through);
        self.rules.set_chain_tip(last_seal);
        self.open = Some(Open {
            keys,
            history,
            unsynced_since: None,
            pruner,
        });
        if !leftovers.is_empty() {
            self.seal(&leftovers).await;
        }
        self.record_skip(journal_floor, open_state);
        self.reconcile_contract(open_state.newest_control).await;
        self.prune().await;
        self.check_quota();
        self.mark_owed_drops().await;
        Ok(())
    }

    /// The sequences this writer skips: above what the store holds and through the journal's
    /// mark, which only a writer that did not stop cleanly leaves above it (a clean stop
    /// releases the rest of its reservation, [`WriterState::release_sequences`]). Recorded
    /// once, so a reader tells this gap from drops (`State::skipped`).
    fn record_skip(&mut self, journal_floor: Option<u64>, open_state: OpenState) {
        let stored = open_state.stored_high_water.map(|s| s.get());
        let skipped = self.rules.record_skip(journal_floor, stored);
        self.carry_out(skipped);
    }

    /// One truth about on and off (`docs/design.md`): reads the contract's state beside the
    /// journal, `state.json` and the newest lifecycle `control` event of the history stream
    /// not read before (`newest`, from the chunks this open read), and journals what it says
    /// (`history::State::observe_contract`). Then writes the answer back to whichever place
    /// says otherwise (`history::State::contract_answer`).
    async fn reconcile_contract(&mut self, newest: Option<ControlRead>) {
        let Some(storage) = self.storage.get().cloned() else {
            return;
        };
        let file = read_state_mirror(storage.as_ref()).ok().flatten();
        let observed = self.rules.observe_contract(newest, file);
        // Durable before capture opens. A failure leaves the narrowing in effect all the same
        // (an observation never widens): the journal keeps it and appends it again.
        if !observed.events.is_empty() {
            let _ = self.journal(observed.events.clone(), true).await;
        }
        let answer = self.rules.contract_answer(&observed);
        if answer.write_state_file {
            self.mirror_state();
        }
        if let Some(operation) = answer.control_event {
            if let Some(draft) = self.draft("control", Payload::Control { operation }) {
                self.append_history(vec![draft]).await;
            }
            let _ = self.sync();
        }
    }

    /// A clean stop releases the rest of the reservation
    /// (`history::State::release_sequences`). A release that fails leaves the reservation (and
    /// the next open records the skip).
    async fn release_sequences(&mut self) {
        let Some(high_water) = self.open.as_ref().and_then(|o| o.history.high_water()) else {
            return;
        };
        let events = self.rules.release_sequences(high_water.get());
        if !events.is_empty() {
            let _ = self.journal(events, true).await;
        }
    }

    fn key_fault(&mut self, category: HealthCategory) -> ControlError {
        let signal = self.rules.key_fault(category);
        self.carry_out([signal]);
        ControlError::Key(category)
    }

    /// The history's `health{events_dropped, count}` marker, now.
    fn drop_marker(&self, count: u64) -> Option<EventDraft> {
        self.drafter
            .drop_marker(count, self.clock.now_since_epoch())
    }

    /// A v0 draft of `payload` for the history stream, now.
    fn draft(&self, subject: &str, payload: Payload) -> Option<EventDraft> {
        self.drafter
            .draft(subject, payload, self.clock.now_since_epoch())
    }

    /// Turns drained items into history drafts (`history::State::drafts`).
    fn drafts(&mut self, batch: Vec<Drained<Captured>>) -> Vec<EventDraft> {
        let key = self.open.as_ref().map(|o| Arc::clone(&o.keys.session));
        let now = self.clock.now_since_epoch();
        self.rules
            .drafts(&mut self.drafter, batch, key.as_deref(), now)
    }

    /// Appends history drafts, reserving sequences first. A failure is a signal, and what it
    /// lost is counted (reported by the next drop marker): `history::BatchMarkers::lost`.
    async fn append_history(&mut self, drafts: Vec<EventDraft>) {
        self.append_history_counted(drafts, 0).await;
    }

    /// [`WriterState::append_history`] where `counted` of the drops the batch's markers
    /// report are in the lifetime total already (owed a marker, [`WriterState::mark_owed_drops`]):
    /// once their marker is written they are signalled marked, not counted again; while it
    /// is not, they stay owed (not reported again by the next marker).
    async fn append_history_counted(&mut self, drafts: Vec<EventDraft>, counted: u64) {
        let next_sequence = self
            .open
            .as_ref()
            .and_then(|open| open.history.next_sequence())
            .map(|s| s.get());
        let Some(plan) = self.rules.plan_append(&drafts, counted, next_sequence) else {
            return;
        };
        if self.open.is_none() {
            self.rules.not_appended(&plan);
            return;
        }
        if let Some(reservation) = plan.reservation() {
            // Durable before any history record uses one of these sequences.
            if self.journal(vec![reservation], true).await.is_err() {
                self.rules.not_appended(&plan);
                return;
            }
            self.rules.reserved(&plan);
        }
        let Some(open) = self.open.as_mut() else {
            return;
        };
        match open.history.append(drafts) {
            Ok(AppendReceipt {
                records,
                events,
                recovered,
                recovered_events,
                closed,
                ..
            }) => {
                open.unsynced_since
                    .get_or_insert_with(tokio::time::Instant::now);
                // A failed append's durable part (reported now) counts and is indexed too,
                // before this batch (its sequences are lower).
                let written: u64 = recovered.iter().chain(&records).map(|r| r.len).sum();
                if let Some(query) = &self.query {
                    let appended = recovered
                        .into_iter()
                        .zip(recovered_events)
                        .chain(records.into_iter().zip(events))
                        .collect();
                    let _ = query.cast(crate::query::QueryMsg::Appended(appended));
                }
                if !self.tick_armed {
                    self.arm_tick(self.config.sync_interval);
                }
                self.bytes.history += written;
                self.seal(&closed).await;
                self.prune().await;
                self.check_quota();
                let effects = self.rules.appended(&plan);
                self.carry_out(effects);
            }
            Err(error) => {
                let effects = self.rules.append_failed(
                    &plan,
                    error.is_refused(),
                    error.lost().cloned(),
                    error.health_category(),
                );
                self.carry_out(effects);
            }
        }
    }

    /// Drops an earlier life counted with no marker (what the supervisor took off the queue
    /// once it gave up on the writer: `State::unmarked_drops`): the marker the history owes
    /// them, written alone as this writer opens, before any event it takes. Nothing while
    /// history is disabled; a marker that fails stays owed, for the next open.
    async fn mark_owed_drops(&mut self) {
        let owed = self.rules.projection.unmarked_drops();
        if owed == 0 || !self.rules.projection.enabled {
            return;
        }
        if let Some(marker) = self.drop_marker(owed) {
            self.append_history_counted(vec![marker], owed).await;
        }
    }

    /// Seals the chunks just closed (synced at rotation): each seal is prepared here, in order
    /// (the next one chains to it); a seal job writes its file on a blocking thread and then
    /// stores its checkpoint through key custody (seal first, checkpoint after: a crash between
    /// leaves the checkpoint behind, which `verify` accepts). Jobs run one after another, in
    /// ordinal order. A seal that cannot be written is a storage signal; the chunk stays
    /// readable and `verify` reports it as unsealed.
    async fn seal(&mut self, closed: &[annal_engine::store::ClosedChunk]) {
        // Awaited by the pruner until its seal job answers.
        self.note_closed(closed);
        let Some(storage) = self.storage.get().cloned() else {
            return;
        };
        if let Some(open) = self.open.as_mut() {
            let plan = self.rules.chain_seals(closed);
            for &chunk in &plan.unsealable {
                // Never sealed, so never pruned.
                open.pruner.seal_found(chunk, None);
            }
            let key = Arc::clone(&open.keys.seal);
            for seal in plan.jobs {
                self.chain_seal_job(Arc::clone(&storage), Arc::clone(&key), Some(seal));
            }
            self.carry_out(plan.effects);
        }
        self.reap_seal_writes(false).await;
    }

    /// Starts a seal job after the newest one (`seal`: `None` for a job that only compares the
    /// checkpoint with the chain).
    fn chain_seal_job(
        &mut self,
        storage: Arc<dyn Storage>,
        key: Arc<annal_engine::seal::SealKey>,
        seal: Option<(annal_engine::store::ClosedChunk, annal_engine::seal::Seal)>,
    ) {
        let job = SealJob {
            storage,
            key,
            keys: self.keys.clone(),
            deadline_ms: annal_engine::clock::millis(self.config.key_call_deadline)
                .saturating_add(1_000),
            seal,
        };
        let sealing = job
            .seal
            .as_ref()
            .map(|(chunk, seal)| (chunk.chunk_id, seal.clone()));
        let (done, tail) = tokio::sync::oneshot::channel();
        let prior = self.checkpoint_tail.replace(tail);
        self.seal_writes.push(SealWrite {
            sealing,
            task: tokio::spawn(async move { job.run(prior, done).await }),
        });
    }

    /// Collects the seal jobs that finished (all of them, waiting, when `all`) and signals what
    /// they found: a seal not written is a storage fault (its chunk stays unsealed, which
    /// `verify` reports); a checkpoint that could not be kept is a key fault with the credential
    /// store's category (a later job tries again); a seal chain older than the checkpoint is
    /// `storage_corrupt`. The first call of an open writer's life (its first tick, or its stop)
    /// starts the job comparing the checkpoint with the chain on disk if no seal job did, so a
    /// checkpoint a crash lost is mended, and a rolled-back directory found, in every writer's
    /// life, not only at its next seal.
    async fn reap_seal_writes(&mut self, all: bool) {
        if self.checkpoint_tail.is_none()
            && let (Some(storage), Some(open)) = (self.storage.get().cloned(), self.open.as_ref())
        {
            let key = Arc::clone(&open.keys.seal);
            self.chain_seal_job(storage, key, None);
        }
        let mut seal_failed = false;
        let mut outcomes = Vec::new();
        let mut still_running = Vec::new();
        for write in std::mem::take(&mut self.seal_writes) {
            if !(all || write.task.is_finished()) {
                still_running.push(write);
                continue;
            }
            let outcome = write.task.await.ok();
            // The pruner learns what the job did: its seal written (and synced), or not.
            if let (Some((chunk, seal)), Some(open)) = (&write.sealing, self.open.as_mut()) {
                let written = outcome.as_ref().is_some_and(|o| !o.seal_failed);
                open.pruner.seal_found(*chunk, written.then_some(seal));
            }
            match outcome {
                Some(outcome) => outcomes.push(outcome),
                None => seal_failed = true,
            }
        }
        self.seal_writes = still_running;
        let mut checkpoints = Vec::with_capacity(outcomes.len());
        for outcome in outcomes {
            seal_failed |= outcome.seal_failed;
            checkpoints.push(outcome.checkpoint);
        }
        let effects = self.rules.seal_jobs_ended(&checkpoints, seal_failed);
        self.carry_out(effects);
    }

    fn append_failed(&mut self, error: &AppendError) {
        let category = error
            .health_category()
            .unwrap_or(HealthCategory::StorageUnavailable);
        let _ = self.storage_fault(category);
    }

    /// After a sync: closes the chunk if it is nearly full, now that closing it costs no sync
    /// (`StoreWriter::rotate_if_nearly_full`), so the next append's rotation does not sit on a
    /// commit's path.
    async fn rotate_early(&mut self) {
        let rotated = self
            .open
            .as_mut()
            .map(|open| open.history.rotate_if_nearly_full());
        self.rotated(rotated).await;
    }

    /// Seals a chunk a rotation outside an append closed, or records why the rotation failed.
    async fn rotated(
        &mut self,
        rotated: Option<Result<Option<annal_engine::store::ClosedChunk>, AppendError>>,
    ) {
        match rotated {
            Some(Ok(Some(closed))) => {
                let closed = [closed];
                self.seal(&closed).await;
            }
            Some(Err(error)) => {
                // A closing sync that failed (rotation by age): what it covered is lost.
                self.records_lost_to(&error);
                self.append_failed(&error);
            }
            _ => {}
        }
    }

    /// Counts every record `error` reports lost as dropped (one event each) and has the Query
    /// actor forget them (`history::State::records_lost`).
    fn records_lost_to(&mut self, error: &AppendError) {
        let effects = self.rules.records_lost_to(error.lost().cloned());
        self.carry_out(effects);
    }

    /// Drops no event followed (their marker waits for the next event, and at a stop none is
    /// to come): the marker is written alone, and its drops join the lifetime total with it.
    /// With history disabled nothing is written: the drops are journaled without a marker,
    /// so the total stays exact across the restart.
    async fn mark_trailing_drops(&mut self) {
        let count = self.rules.take_lost_unreported();
        if count == 0 {
            return;
        }
        match self.drop_marker(count) {
            Some(marker) if self.rules.projection.enabled && self.open.is_some() => {
                self.append_history(vec![marker]).await;
            }
            _ => {
                let recorded = self.rules.record_drop_total(count);
                self.carry_out([recorded]);
            }
        }
    }

    /// Group commit: syncs what was appended. A failed sync is a signal (never retried), and
    /// what it covered is reported as dropped.
    fn sync(&mut self) -> Result<(), ControlError> {
        let Some(open) = self.open.as_mut() else {
            return Ok(());
        };
        if open.unsynced_since.take().is_none() {
            return Ok(());
        }
        match open.history.sync() {
            Ok(_) => Ok(()),
            Err(error) => {
                // What the failed sync covered can never be acknowledged and, after a failed
                // fsync, is most likely gone: it is reported as dropped, never lost silently.
                self.records_lost_to(&error);
                self.append_failed(&error);
                Err(ControlError::Storage)
            }
        }
    }

    /// Arms the group-commit tick to fire `after` from now.
    fn arm_tick(&mut self, after: std::time::Duration) {
        self.tick_armed = true;
        self.myself.send_after(after, || WriterMsg::Tick);
    }

    /// The group-commit tick: syncs once the oldest unsynced record is `sync_interval` old;
    /// if a flush synced since the tick was armed, re-arms it for the younger records' own
    /// deadline. Whether everything appended is synced now.
    fn commit_tick(&mut self) -> bool {
        self.tick_armed = false;
        let age = self
            .open
            .as_ref()
            .and_then(|open| open.unsynced_since)
            .map(|since| since.elapsed());
        match history::commit_tick(age, self.config.sync_interval) {
            history::Tick::Synced => true,
            history::Tick::Rearm(left) => {
                self.arm_tick(left);
                false
            }
            history::Tick::Sync => self.sync().is_ok(),
        }
    }

    /// Writes the contract's `state.json` from the projection.
    fn mirror_state(&self) {
        if let Some(storage) = self.storage.get() {
            let _ = write_state_mirror(storage.as_ref(), self.rules.state_mirror());
        }
    }

    /// An owner's setting: journaled and synced, then applied (the chunk size follows the
    /// quota; a shorter retention or a smaller quota prunes at once).
    async fn set(
        &mut self,
        setting: Setting,
        caller: CallerKind,
    ) -> Result<StatusResponse, ControlError> {
        // Bounds were checked by `Engine::set` before sending; the journal's rules check again.
        let events = self
            .rules
            .decide_setting(setting, caller)
            .map_err(|_| ControlError::Refused)?;
        // What the journal left in effect, even when the commit failed: a smaller quota or a
        // shorter retention applies at once, a larger one (or another mode) only once
        // durable.
        let journaled = self.journal(events, true).await;
        let chunk_size_limit = self.rules.chunk_size_limit_bytes();
        if let Some(open) = self.open.as_mut() {
            open.history.set_chunk_size_limit(chunk_size_limit);
        }
        if journaled.is_ok() {
            self.prune().await;
        }
        // The handler updates capture after this, success or not.
        self.check_quota();
        journaled?;
        Ok(self.status().await)
    }

    async fn control(
        &mut self,
        operation: ControlOperation,
        caller: CallerKind,
    ) -> Result<StatusResponse, ControlError> {
        if history::control_command(operation).is_none() {
            return Err(ControlError::Refused);
        }
        self.open_writers(operation == ControlOperation::Enable)
            .await?;
        // A store that was never enabled has nothing to pause or flush.
        let plan = self
            .rules
            .decide_control(operation, caller)
            .map_err(|_| ControlError::Refused)?;
        if let Err(error) = self.journal(plan.events, true).await {
            // A failed `disable` or `pause` is in effect all the same (a failed `enable` or
            // `resume` is not): the caller's handler closes capture; the mirror follows too.
            self.mirror_state();
            return Err(error);
        }
        // The contract's two places, in the order that leaves the narrower answer after a crash
        // between them (as the reference orders them): a narrowing writes `state.json` first,
        // a widening its `control` event first. The next open reads both, and the narrower
        // wins (`reconcile_contract`).
        let narrowing = plan.narrowing;
        if narrowing {
            self.mirror_state();
        }
        if plan.writes_control_event
            && let Some(draft) = self.draft("control", Payload::Control { operation })
        {
            self.append_history(vec![draft]).await;
        }
        let synced = self.sync();
        if !narrowing {
            self.mirror_state();
        }
        synced?;
        self.update_capture();
        Ok(self.status().await)
    }
}

/// The contract's 11-field status from the journal's reading and the live readings.
pub(crate) fn status_from(
    config: &EngineConfig,
    reading: annal_engine::journal::StatusReading,
    bytes_used: u64,
    pending_drops: u64,
) -> StatusResponse {
    StatusResponse {
        supported: true,
        admitted: config.admitted,
        enabled: reading.flags.enabled,
        paused: reading.flags.paused,
        encrypted: true,
        profile: STORAGE_PROFILE_ID.to_owned(),
        retention_days: reading.flags.retention_days,
        quota_bytes: reading.flags.quota_bytes,
        bytes_used,
        dropped_events: reading.flags.dropped_events + pending_drops,
        health: reading.health,
    }
}

impl Actor for WriterActor {
    type Msg = WriterMsg;
    type State = WriterState;
    type Arguments = WriterArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: WriterArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let drafter = history::Drafter::new(args.config.platform, args.action_seed);
        let mut rules = history::State::default();
        rules.admit(args.config.admitted, !args.undrained);
        let mut state = WriterState {
            config: args.config,
            clock: args.clock,
            keys: args.keys,
            journal: args.journal,
            capture: args.capture,
            drafter,
            storage: args.storage,
            query: args.query,
            open: None,
            rules,
            bytes: StoreBytes::default(),
            myself: myself.clone(),
            tick_armed: false,
            seal_writes: Vec::new(),
            checkpoint_tail: None,
        };
        // A store the owner enabled is reopened at start; a never-enabled one stays closed until
        // `enable` (opt-in: no key is created before it).
        if state.storage.get().is_some() || open_store(&state.config.layout, Access::Read).is_ok() {
            let _ = state.open_writers(false).await;
        }
        if state.open.is_none()
            && let Some(storage) = state.storage.get()
            && let Ok(Some(mirror)) = annal_engine::store::read_state_mirror(storage.as_ref())
        {
            // The key is not readable: show the mirror's enabled/paused so status still says
            // what the owner chose (never authoritative).
            state.rules.projection.enabled = mirror.enabled;
            state.rules.projection.paused = mirror.paused;
        }
        state.update_capture();
        myself.send_interval(std::time::Duration::from_secs(ROTATION_CHECK_SECS), || {
            WriterMsg::RotationCheck
        });
        Ok(state)
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            WriterMsg::Batch { items, reply } => {
                let drafts = state.drafts(items);
                state.append_history(drafts).await;
                state.update_capture();
                let _ = reply.send(());
            }
            WriterMsg::Control {
                operation,
                caller,
                reply,
            } => {
                let result = state.control(operation, caller).await;
                state.update_capture();
                let _ = reply.send(result);
            }
            WriterMsg::Set {
                setting,
                caller,
                reply,
            } => {
                let result = state.set(setting, caller).await;
                state.update_capture();
                let _ = reply.send(result);
            }
            WriterMsg::Sync { reply } => {
                let result = match state.sync() {
                    Ok(()) => Ok(state.status().await),
                    Err(error) => Err(error),
                };
                state.update_capture();
                let synced = result.is_ok();
                let _ = reply.send(result);
                if synced {
                    state.rotate_early().await;
                }
            }
            WriterMsg::Status { reply } => {
                let status = state.status().await;
                let _ = reply.send(status);
            }
            WriterMsg::Access {
                operation,
                returned_events,
            } => {
                if let Some(draft) = state.draft(
                    "access",
                    Payload::Access {
                        operation,
                        returned_events,
                    },
                ) {
                    state.append_history(vec![draft]).await;
                }
            }
            WriterMsg::Tick => {
                if state.commit_tick() {
                    state.rotate_early().await;
                }
                state.reap_seal_writes(false).await;
                state.update_capture();
            }
            WriterMsg::RotationCheck => {
                let rotated = state.open.as_mut().map(|open| open.history.rotate_if_due());
                state.rotated(rotated).await;
                // Retention by the clock: an idle store prunes too.
                state.prune().await;
                state.check_quota();
                state.update_capture();
            }
            WriterMsg::Undrained => {
                state.rules.undrained();
                state.update_capture();
            }
            #[cfg(feature = "testing")]
            WriterMsg::InjectPanic => {
                panic!("injected writer panic (test)");
            }
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // A clean stop makes everything durable and closes and seals the current chunk, so the
        // next open reads no chunk of this generation (the seals being written included);
        // capture stays closed until a new writer opens.
        state.mark_trailing_drops().await;
        let _ = state.sync();
        let closed = state.open.as_mut().map(|open| open.history.close());
        match closed {
            Some(Ok(Some(closed))) => state.seal(&[closed]).await,
            Some(Err(error)) => state.append_failed(&error),
            Some(Ok(None)) | None => {}
        }
        state.reap_seal_writes(true).await;
        // Last: nothing more is handed out in this writer's life.
        state.release_sequences().await;
        state.capture.set_accepting(false);
        Ok(())
    }
}
