//! The Writer actor: the interpreter of the engine's history state machine
//! (`annal_engine::history`). It owns the history stream's writer, group commit, the seal jobs
//! and the timers, asks the Journal actor for everything the journal records, and carries out
//! what the rules decide (`docs/actors.md`, "The writer as interpreter").
//!
//! Life of one captured event from here on: the Ingress hands the writer a batch of drained
//! items; the rules turn each into a v0 `EventDraft` (`history::State::drafts`: the keyed
//! session id, the action id from the engine's seed, one `health{events_dropped}` event before
//! the first event after any drops); the writer reserves sequences in the journal when the
//! batch would pass the reservation (`history::AppendPlan::reservation`, durable before the
//! history write, so a sequence is never reused), appends the batch through
//! `StoreWriter<History>`, hands the outcome back to the rules (what a failure lost is
//! reported by the next marker), and syncs on the next tick (group commit) or at once for a
//! flush or control operation.
//!
//! At open it reads the contract's on/off state beside the journal (`state.json` and the newest
//! unread lifecycle `control` event): a disable or pause another implementation wrote wins, is
//! journaled with its source, and annal's answer is written back to both places
//! (`docs/design.md`, "One truth about on and off"; `history::State::observe_contract`). It
//! records the sequences a crashed predecessor skipped, and a clean stop releases the rest of
//! its reservation, so a clean restart leaves no gap ("No gap without a cause").

use std::sync::Arc;

use tracing::Instrument;

use annal_engine::capture::{CaptureControl, Captured, Drained};
use annal_engine::clock::Clock;
use annal_engine::health::{Signal, SignalKind};
use annal_engine::history::{self, CheckpointSync, Effect};
use annal_engine::journal::{CallerKind, JournalEvent};
use annal_engine::storage::Access;
use annal_engine::store::{
    AppendError, AppendReceipt, History, StoreWriter, open_store, write_state_mirror,
};
use annal_schema::tools::{STORAGE_PROFILE_ID, StatusResponse};
use annal_schema::{ControlOperation, EventDraft, HealthCategory, Payload};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};

use crate::config::EngineConfig;
use crate::journal::{JournalMsg, StorageSlot};
use crate::key_custody::{KeyCustodyMsg, StreamKeys};
use prune::StoreBytes;
pub use prune::StoreUsage;
use seal_job::SealWrite;

mod flush;
mod open;
mod prune;
mod seal_job;

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
    /// Make everything received so far durable (a shutdown's or a restart's sync: no record).
    Sync {
        /// The status after the sync, or why it failed.
        reply: StatusReply,
    },
    /// The owner's or embedder's `flush`: while history is open for writing, the contract's
    /// `control` flush event (and its journal record), as the reference writes one; then
    /// everything received so far is made durable. On a store that is not enabled, the sync
    /// alone.
    Flush {
        /// The status after the sync, or why it failed.
        reply: StatusReply,
    },
    /// The contract's status.
    Status {
        /// Where the status goes.
        reply: RpcReplyPort<StatusResponse>,
    },
    /// The store's encrypted bytes as annal counts them.
    Usage {
        /// Where the usage goes.
        reply: RpcReplyPort<StoreUsage>,
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
    /// The owner's flush (`record`: the contract's [`WriterMsg::Flush`]) or a sync alone.
    pub(crate) fn flush(record: bool, reply: StatusReply) -> Self {
        if record {
            Self::Flush { reply }
        } else {
            Self::Sync { reply }
        }
    }

    /// The status reply port this message carries, if it is one that answers with a status
    /// (for [`hand_on`] to answer a message that never arrived).
    pub(crate) fn status_reply(self) -> Option<StatusReply> {
        match self {
            Self::Control { reply, .. }
            | Self::Set { reply, .. }
            | Self::Sync { reply }
            | Self::Flush { reply } => Some(reply),
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
    /// The highest sequence the journal durably holds as lost (`flush::in_flight_base`).
    lost_durable_through: u64,
    /// Seal jobs (a seal file written on a blocking thread, two syncs and a rename, then its
    /// checkpoint stored through key custody: all off the capture path), each waiting for the
    /// one before; each answers what it did. Awaited at stop.
    seal_writes: Vec<SealWrite>,
    /// Where the newest seal job will hand the checkpoint's standing to the next one; `None`
    /// until this writer's first job (which compares the checkpoint with the chain on disk).
    checkpoint_tail: Option<tokio::sync::oneshot::Receiver<CheckpointSync>>,
}

/// The Writer actor.
pub struct WriterActor;

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
                self.rules.adopt(projection);
                Ok(())
            }
            Ok(Err(failed)) => {
                // What the failure left in effect: a narrowing stays, a widening is withdrawn.
                self.rules.adopt(failed.projection);
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
    /// (`history::State::check_quota`). Pruning (`WriterState::prune`) runs first.
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

    /// The contract's status, from the journal's current projection (health included: a fold
    /// over the persisted signals and the live drop count).
    async fn status(&mut self) -> StatusResponse {
        // Read from the directories, as the reference reads them (the running count adds only
        // records, not the headers of chunks created since).
        if let Some(storage) = self.storage.get() {
            self.bytes = StoreBytes::read(storage.as_ref());
        } else if let Ok(storage) = open_store(&self.config.layout, Access::Read) {
            // A contract store annal has not adopted (the reference's own): its chunks count
            // all the same, as the reference reports them.
            self.bytes = StoreBytes::read(&storage);
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
        if !self.keep_in_flight_bound(&plan).await {
            self.rules.not_appended(&plan);
            return;
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

    /// Drops an earlier life counted with no marker: the marker the history owes them
    /// (`history::State::owed_drops`), written alone as this writer opens.
    async fn mark_owed_drops(&mut self) {
        let Some(owed) = self.rules.owed_drops() else {
            return;
        };
        if let Some(marker) = self.drop_marker(owed) {
            self.append_history_counted(vec![marker], owed).await;
        }
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

    /// Drops no event followed, at a clean stop (`history::State::trailing_drops`): a marker
    /// written alone, or the drops journaled without one.
    async fn mark_trailing_drops(&mut self) {
        match self.rules.trailing_drops() {
            history::TrailingDrops::None => {}
            history::TrailingDrops::Mark(count) => match self.drop_marker(count) {
                Some(marker) => self.append_history(vec![marker]).await,
                None => {
                    let recorded = self.rules.record_drop_total(count);
                    self.carry_out([recorded]);
                }
            },
            history::TrailingDrops::Record(recorded) => self.carry_out([recorded]),
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
        rules.set_boot(args.config.boot);
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
            lost_durable_through: 0,
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
            state.rules.show_mirror(mirror);
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
                let started = std::time::Instant::now();
                let span = crate::telemetry::span::writer_commit(items.len());
                let drafts = state.drafts(items);
                state.append_history(drafts).instrument(span).await;
                state.config.telemetry.committed(started.elapsed());
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
            WriterMsg::Flush { reply } => {
                let result = state.flush().await;
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
            WriterMsg::Usage { reply } => {
                let _ = reply.send(StoreUsage {
                    history_bytes: state.bytes.history,
                    journal_bytes: state.bytes.journal,
                });
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
