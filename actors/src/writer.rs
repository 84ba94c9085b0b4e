//! The Writer actor: owns the store's two writers (the history stream and the engine journal),
//! the state projection, and group commit.
//!
//! Life of one captured event from here on: the Ingress hands the writer a batch of drained
//! items; the writer turns each into a v0 `EventDraft` (the keyed session id derived here, the
//! action id from the engine's seed, the time formatted once), puts one `health{events_dropped}`
//! event before the first event after any drops, reserves sequences in the journal when the
//! batch would pass the reservation (durable before the history write, so a sequence is never
//! reused), appends the batch through `StoreWriter<History>`, and syncs on the next tick (group
//! commit) or at once for a flush or control operation.

use std::collections::HashMap;
use std::sync::Arc;

use annal_engine::capture::{
    CaptureControl, Captured, CapturedItem, Drained, SessionLabel, action_id,
};
use annal_engine::clock::Clock;
use annal_engine::health::{KeyFault, Signal, SignalKind, StorageFault};
use annal_engine::journal::{
    CallerKind, Command, Journal, JournalEntry, JournalEvent, State as Projection, decide,
};
use annal_engine::keys::{KeyError, SessionIdKey};
use annal_engine::storage::{Access, FsStorage, Storage};
use annal_engine::store::{
    AppendError, History, StateMirror, StoreReader, StoreWriter, WriterConfig, create_store,
    open_store, read_state_mirror, write_state_mirror,
};
use annal_schema::tools::{STORAGE_PROFILE_ID, StatusResponse};
use annal_schema::{
    ControlOperation, EventDraft, EventTime, HealthCategory, OpaqueId, Payload, SessionPhase,
    Subject,
};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};

use crate::config::EngineConfig;
use crate::key_custody::{KeyCustodyMsg, StreamKeys};

/// How many sequences the writer reserves in the journal at a time. The reservation is made
/// durable before any history record uses one of its sequences, so after a crash the next
/// generation starts above it: sequences are never reused, at the cost of a gap of at most
/// this many numbers per restart (gaps are valid evidence in the contract).
pub const SEQUENCE_RESERVE_BLOCK: u64 = 4096;

/// Most raw-label -> keyed-id entries the writer caches (deriving one is an HMAC, ~1 us).
pub const SESSION_ID_CACHE_ENTRIES: usize = 1024;

/// Most signals the writer holds while the journal is not open (a store whose key is not
/// loaded yet); the oldest are folded into health but no longer kept for journaling.
pub const MAX_UNJOURNALED_SIGNALS: usize = 256;

/// What the writer can be asked.
pub enum WriterMsg {
    /// A batch drained from the capture queue.
    Batch(Vec<Drained<Captured>>),
    /// The owner's control operation; replies after it is durable.
    Control {
        /// Which operation.
        operation: ControlOperation,
        /// Who asked.
        caller: CallerKind,
        /// The status after it, or why it failed.
        reply: RpcReplyPort<Result<StatusResponse, ControlError>>,
    },
    /// Make everything received so far durable.
    Sync {
        /// The status after the sync, or why it failed.
        reply: RpcReplyPort<Result<StatusResponse, ControlError>>,
    },
    /// The contract's status.
    Status {
        /// Where the status goes.
        reply: RpcReplyPort<StatusResponse>,
    },
    /// A supervision fact to journal and fold into health.
    Signal(Signal),
    /// Group commit and rotation by age.
    Tick,
    /// Test-only: panic inside the handler, as a bug would.
    #[cfg(feature = "testing")]
    InjectPanic,
}

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
    /// The engine did not answer in time or is shutting down.
    #[error("the engine did not answer in time")]
    Unavailable,
}

/// What the writer starts with (also on a restart).
pub struct WriterArgs {
    /// The engine's configuration.
    pub config: EngineConfig,
    /// The clock.
    pub clock: Arc<dyn Clock>,
    /// The key custody actor.
    pub keys: ActorRef<KeyCustodyMsg>,
    /// The capture admission switch.
    pub capture: CaptureControl,
    /// The seed action ids are derived from (drawn once per engine).
    pub action_seed: [u8; 32],
    /// Supervision signals the supervisor could not deliver while the writer was down.
    pub pending_signals: Vec<Signal>,
    /// The storage, when the supervisor already holds it (a test's fault-injecting one).
    pub storage: Option<Arc<dyn Storage>>,
}

/// The writers that exist once the key is loaded.
struct Open {
    /// The store's storage, holding the writer lock.
    storage: Arc<dyn Storage>,
    /// The purpose keys.
    keys: StreamKeys,
    /// The history stream.
    history: StoreWriter<History>,
    /// The engine journal.
    journal: StoreWriter<Journal>,
    /// Sequences reserved in the journal so far (durable).
    reserved_through: u64,
    /// History records appended since the last sync.
    history_dirty: bool,
    /// Journal records appended since the last sync.
    journal_dirty: bool,
}

/// The writer's state.
pub struct WriterState {
    /// The arguments, kept for status and for reopening.
    config: EngineConfig,
    /// The clock.
    clock: Arc<dyn Clock>,
    /// The key custody actor.
    keys: ActorRef<KeyCustodyMsg>,
    /// The capture admission switch.
    capture: CaptureControl,
    /// The action-id seed.
    action_seed: [u8; 32],
    /// The writers, once open.
    open: Option<Open>,
    /// The storage when it exists but the key is not loaded yet (a disabled store).
    storage: Option<Arc<dyn Storage>>,
    /// The state projection (replayed from the journal).
    projection: Projection,
    /// Signals recorded while the journal was not open; journaled as soon as it is.
    unjournaled: Vec<Signal>,
    /// Events lost by this writer (a failed batch) not yet reported by a drop marker.
    lost_unreported: u64,
    /// Raw label -> keyed session id.
    session_ids: HashMap<SessionLabel, OpaqueId>,
    /// Encrypted bytes in the store, as far as this writer knows.
    bytes_used: u64,
    /// The last key failure, when the key could not be loaded.
    key_fault: Option<HealthCategory>,
}

/// The Writer actor.
pub struct WriterActor;

impl WriterState {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.clock.now_since_epoch().as_millis()).unwrap_or(u64::MAX)
    }

    fn signal(&mut self, kind: SignalKind) {
        let signal = Signal {
            at_ms: self.now_ms(),
            kind,
        };
        self.record_signal(signal);
    }

    /// Folds `signal` into the projection (health) and journals it (durable with the next
    /// sync), or holds it until the journal opens.
    fn record_signal(&mut self, signal: Signal) {
        let event = JournalEvent::SupervisorSignalled(signal);
        if self.open.is_some() {
            if self.journal(vec![event]).is_err() {
                // Not journaled, but still shown.
                self.projection
                    .apply(&JournalEvent::SupervisorSignalled(signal));
            }
        } else {
            self.projection.apply(&event);
            if self.unjournaled.len() >= MAX_UNJOURNALED_SIGNALS {
                self.unjournaled.remove(0);
            }
            self.unjournaled.push(signal);
        }
    }

    /// Whether capture may admit new events now: the owner's and the embedder's choices and a
    /// loaded key. A storage fault does not close capture: it keeps admitting, the writer keeps
    /// trying, and what cannot be written is counted as dropped until the disk recovers (that
    /// next successful write is also what clears the fault).
    fn accepting(&self) -> bool {
        self.config.admitted
            && self.projection.enabled
            && !self.projection.paused
            && self.open.is_some()
    }

    fn health(&self) -> HealthCategory {
        self.projection.health(
            self.config.admitted,
            self.capture.pending_drops() + self.lost_unreported,
        )
    }

    fn update_capture(&self) {
        self.capture.set_accepting(self.accepting());
    }

    fn status(&self) -> StatusResponse {
        StatusResponse {
            supported: true,
            admitted: self.config.admitted,
            enabled: self.projection.enabled,
            paused: self.projection.paused,
            encrypted: true,
            profile: STORAGE_PROFILE_ID.to_owned(),
            retention_days: self.projection.retention_days,
            quota_bytes: self.projection.quota_bytes,
            bytes_used: self.bytes_used,
            dropped_events: self.projection.dropped_total
                + self.capture.pending_drops()
                + self.lost_unreported,
            health: self.health(),
        }
    }

    fn session_id(
        session: &SessionLabel,
        key: &SessionIdKey,
        cache: &mut HashMap<SessionLabel, OpaqueId>,
    ) -> OpaqueId {
        if let Some(id) = cache.get(session) {
            return id.clone();
        }
        if cache.len() >= SESSION_ID_CACHE_ENTRIES {
            cache.clear();
        }
        let id = key.session_id(session.as_str());
        cache.insert(session.clone(), id.clone());
        id
    }

    /// Opens the store (creating it when `create`), loads the key (creating it when `create`),
    /// opens both writers and replays the journal. Key and storage failures become signals.
    async fn open_writers(&mut self, create: bool) -> Result<(), ControlError> {
        if self.open.is_some() {
            return Ok(());
        }
        if self.storage.is_none() {
            if create {
                match create_store(&self.config.layout) {
                    Ok(()) | Err(annal_engine::store::CreateStoreError::AlreadyExists { .. }) => {}
                    Err(_) => return Err(self.storage_fault(HealthCategory::StorageUnavailable)),
                }
            }
            match open_store(&self.config.layout, Access::Write) {
                Ok(storage) => self.storage = Some(Arc::new(storage) as Arc<dyn Storage>),
                Err(_) if !create => return Ok(()),
                Err(_) => return Err(self.storage_fault(HealthCategory::StorageUnavailable)),
            }
        }
        let Some(storage) = self.storage.clone() else {
            return Ok(());
        };
        let keys = match ractor::call_t!(
            self.keys,
            |reply| KeyCustodyMsg::Open { create, reply },
            u64::try_from(self.config.key_call_deadline.as_millis())
                .unwrap_or(u64::MAX)
                .saturating_add(1_000)
        ) {
            Ok(Ok(keys)) => keys,
            Ok(Err(KeyError::NotFound)) if !create => return Ok(()),
            Ok(Err(error)) => {
                let category = error.category();
                self.key_fault = Some(category);
                let fault = KeyFault::from_health(category).unwrap_or(KeyFault::KeyUnavailable);
                self.signal(SignalKind::KeyFailed { category: fault });
                return Err(ControlError::Key(category));
            }
            Err(_) => {
                self.key_fault = Some(HealthCategory::KeyUnavailable);
                self.signal(SignalKind::KeyFailed {
                    category: KeyFault::KeyUnavailable,
                });
                return Err(ControlError::Key(HealthCategory::KeyUnavailable));
            }
        };
        if self.key_fault.take().is_some() {
            self.signal(SignalKind::KeyRecovered);
        }
        // The journal first: its projection holds the sequence floor of the history stream.
        let journal_report = StoreReader::<Journal>::new(Arc::clone(&storage))
            .read(&keys.journal)
            .map_err(|_| self.storage_fault(HealthCategory::StorageUnavailable))?;
        let projection = Projection::replay(journal_report.records().map(|r| &r.event.event));
        let writer_config = |floor: Option<u64>| {
            let mut config = WriterConfig::new(keys.reference.clone(), std::num::NonZeroU64::MIN);
            config.sequence_floor = floor.and_then(annal_schema::Sequence::new);
            config
        };
        let journal = StoreWriter::<Journal>::open(
            Arc::clone(&storage),
            keys.journal.clone(),
            writer_config(None),
            Arc::clone(&self.clock),
        )
        .map_err(|_| self.storage_fault(HealthCategory::StorageUnavailable))?;
        let history = StoreWriter::<History>::open(
            Arc::clone(&storage),
            keys.history.clone(),
            writer_config(projection.history_high_water),
            Arc::clone(&self.clock),
        )
        .map_err(|_| self.storage_fault(HealthCategory::StorageUnavailable))?;
        let reserved_through = history.high_water().map_or(0, |s| s.get());
        self.bytes_used = store_bytes(storage.as_ref());
        self.projection = projection;
        self.open = Some(Open {
            storage,
            keys,
            history,
            journal,
            reserved_through,
            history_dirty: false,
            journal_dirty: false,
        });
        // Signals raised before the journal was readable: journaled now, in order.
        for signal in std::mem::take(&mut self.unjournaled) {
            self.record_signal(signal);
        }
        Ok(())
    }

    fn storage_fault(&mut self, category: HealthCategory) -> ControlError {
        let category = if category == HealthCategory::StorageCorrupt {
            StorageFault::StorageCorrupt
        } else {
            StorageFault::StorageUnavailable
        };
        self.signal(SignalKind::StorageFailed { category });
        ControlError::Storage
    }

    /// Journals `events` and applies them to the projection.
    fn journal(&mut self, events: Vec<JournalEvent>) -> Result<(), ControlError> {
        let now = self.now_ms();
        let Some(open) = self.open.as_mut() else {
            return Err(ControlError::Storage);
        };
        let entries = events
            .iter()
            .cloned()
            .map(|event| JournalEntry {
                time_ms: now,
                event,
            })
            .collect();
        if open.journal.append(entries).is_err() {
            // No signal from here: signals themselves are journaled through this function, and
            // a disk that refuses the journal would refuse that one too. Callers signal.
            return Err(ControlError::Storage);
        }
        open.journal_dirty = true;
        for event in &events {
            self.projection.apply(event);
        }
        Ok(())
    }

    /// A v0 draft of `payload` for the history stream, now.
    fn draft(&self, subject: &str, payload: Payload) -> Option<EventDraft> {
        Some(EventDraft {
            subject: Subject::new(subject).ok()?,
            time: EventTime::from_unix(self.clock.now_since_epoch()).ok()?,
            session_id: None,
            action_id: None,
            platform: self.config.platform,
            capability: None,
            application: None,
            payload,
        })
    }

    /// Turns drained items into history drafts (and the journal's drop records).
    fn drafts(&mut self, batch: Vec<Drained<Captured>>) -> (Vec<EventDraft>, u64) {
        let mut drafts = Vec::with_capacity(batch.len() + 1);
        let mut dropped = 0u64;
        let platform = self.config.platform;
        let session_key = self.open.as_ref().map(|o| Arc::clone(&o.keys.session));
        let mut lost_before = std::mem::take(&mut self.lost_unreported);
        for item in batch {
            let captured = match item {
                Drained::Dropped { count } => {
                    dropped += count;
                    continue;
                }
                Drained::Captured(captured) => captured,
            };
            let marker = dropped + lost_before;
            if marker > 0 {
                if let Some(draft) = self.draft(
                    "writer",
                    Payload::Health {
                        category: HealthCategory::EventsDropped,
                        count: marker,
                    },
                ) {
                    drafts.push(draft);
                }
                lost_before = 0;
                dropped = 0;
            }
            let Ok(time) = EventTime::from_unix(captured.at) else {
                lost_before += 1;
                continue;
            };
            let session = |label: Option<&SessionLabel>,
                           cache: &mut HashMap<SessionLabel, OpaqueId>| {
                match (label, &session_key) {
                    (Some(label), Some(key)) => Some(Self::session_id(label, key, cache)),
                    _ => None,
                }
            };
            let draft = match captured.item {
                CapturedItem::ActionStarted { action, context } => {
                    let id = action_id(&self.action_seed, action);
                    EventDraft {
                        subject: Subject::for_action(&id),
                        time,
                        session_id: session(context.session.as_ref(), &mut self.session_ids),
                        action_id: Some(id),
                        platform,
                        capability: Some(context.capability.clone()),
                        application: context.application.clone(),
                        payload: Payload::ActionStarted,
                    }
                }
                CapturedItem::ActionCompleted {
                    action,
                    context,
                    outcome,
                } => {
                    let id = action_id(&self.action_seed, action);
                    EventDraft {
                        subject: Subject::for_action(&id),
                        time,
                        session_id: session(context.session.as_ref(), &mut self.session_ids),
                        action_id: Some(id),
                        platform,
                        capability: Some(context.capability.clone()),
                        application: context.application.clone(),
                        payload: Payload::ActionCompleted(outcome),
                    }
                }
                CapturedItem::SessionStarted { session: label } => {
                    let Ok(subject) = Subject::new("session") else {
                        continue;
                    };
                    EventDraft {
                        subject,
                        time,
                        session_id: session(Some(&label), &mut self.session_ids),
                        action_id: None,
                        platform,
                        capability: None,
                        application: None,
                        payload: Payload::Session {
                            phase: SessionPhase::Started,
                        },
                    }
                }
                CapturedItem::SessionEnded { session: label } => {
                    let Ok(subject) = Subject::new("session") else {
                        continue;
                    };
                    EventDraft {
                        subject,
                        time,
                        session_id: session(Some(&label), &mut self.session_ids),
                        action_id: None,
                        platform,
                        capability: None,
                        application: None,
                        payload: Payload::Session {
                            phase: SessionPhase::Ended,
                        },
                    }
                }
            };
            drafts.push(draft);
        }
        // Drops with no event after them yet: reported before the next event.
        self.lost_unreported = lost_before + dropped;
        let total_dropped = drafts
            .iter()
            .filter_map(|d| match d.payload {
                Payload::Health {
                    category: HealthCategory::EventsDropped,
                    count,
                } => Some(count),
                _ => None,
            })
            .sum();
        (drafts, total_dropped)
    }

    /// Appends history drafts, reserving sequences first. A failure is a signal and the
    /// batch's events are counted as lost (reported by the next drop marker).
    fn append_history(&mut self, drafts: Vec<EventDraft>, marked_drops: u64) {
        if drafts.is_empty() {
            return;
        }
        let count = drafts.len() as u64;
        let markers = drafts
            .iter()
            .filter(|d| {
                matches!(
                    d.payload,
                    Payload::Health {
                        category: HealthCategory::EventsDropped,
                        ..
                    }
                )
            })
            .count() as u64;
        // If this batch is lost, its events and the drops its markers reported are reported
        // again by the next marker.
        let lost_if_failed = count - markers + marked_drops;
        let now_ms = self.now_ms();
        let Some(open) = self.open.as_mut() else {
            self.lost_unreported += lost_if_failed;
            return;
        };
        let next_last = open.history.high_water().map_or(0, |s| s.get()) + count;
        if next_last > open.reserved_through {
            let reserve = next_last + SEQUENCE_RESERVE_BLOCK;
            let entry = JournalEntry {
                time_ms: now_ms,
                event: JournalEvent::SequenceMarked {
                    high_water: reserve,
                },
            };
            // Durable before any history record uses one of these sequences.
            let reserved = open
                .journal
                .append(vec![entry])
                .and_then(|_| open.journal.sync());
            if reserved.is_err() {
                self.lost_unreported += lost_if_failed;
                let _ = self.storage_fault(HealthCategory::StorageUnavailable);
                return;
            }
            open.reserved_through = reserve;
            self.projection.apply(&JournalEvent::SequenceMarked {
                high_water: reserve,
            });
        }
        let Some(open) = self.open.as_mut() else {
            return;
        };
        match open.history.append(drafts) {
            Ok(receipt) => {
                open.history_dirty = true;
                self.bytes_used += receipt.records.iter().map(|r| r.len).sum::<u64>();
                if marked_drops > 0
                    && self
                        .journal(vec![JournalEvent::DropsRecorded {
                            count: marked_drops,
                        }])
                        .is_err()
                {
                    // The marker is in the history stream; only the lifetime total in the
                    // journal missed it: counted again with the next marker.
                    self.lost_unreported += marked_drops;
                    let _ = self.storage_fault(HealthCategory::StorageUnavailable);
                }
                self.clear_storage_fault();
            }
            Err(error) => {
                self.lost_unreported += lost_if_failed;
                self.append_failed(&error);
            }
        }
    }

    fn append_failed(&mut self, error: &AppendError) {
        let category = error
            .health_category()
            .unwrap_or(HealthCategory::StorageUnavailable);
        let _ = self.storage_fault(category);
    }

    fn clear_storage_fault(&mut self) {
        let failing = self
            .projection
            .signals
            .iter()
            .rev()
            .find_map(|s| match s.kind {
                SignalKind::StorageFailed { .. } => Some(true),
                SignalKind::StorageRecovered => Some(false),
                _ => None,
            });
        if failing == Some(true) {
            self.signal(SignalKind::StorageRecovered);
        }
    }

    /// Group commit: syncs what was appended. A failed sync is a signal (never retried).
    fn sync(&mut self) -> Result<(), ControlError> {
        let Some(open) = self.open.as_mut() else {
            return Ok(());
        };
        let mut failed = None;
        let mut lost = 0u64;
        if open.history_dirty {
            match open.history.sync() {
                Ok(_) => open.history_dirty = false,
                Err(error) => {
                    open.history_dirty = false;
                    // What the failed sync covered can never be acknowledged and, after a failed
                    // fsync, is most likely gone: it is reported as dropped, never lost silently.
                    lost = error.lost().map_or(0, |range| range.clone().count() as u64);
                    failed = Some(error);
                }
            }
        }
        if open.journal_dirty {
            match open.journal.sync() {
                Ok(_) => open.journal_dirty = false,
                Err(error) => {
                    open.journal_dirty = false;
                    failed = Some(error);
                }
            }
        }
        self.lost_unreported += lost;
        match failed {
            None => Ok(()),
            Some(error) => {
                self.append_failed(&error);
                Err(ControlError::Storage)
            }
        }
    }

    fn mirror_state(&self) {
        if let Some(open) = self.open.as_ref() {
            let _ = write_state_mirror(
                open.storage.as_ref(),
                StateMirror {
                    enabled: self.projection.enabled,
                    paused: self.projection.paused,
                },
            );
        }
    }

    async fn control(
        &mut self,
        operation: ControlOperation,
        caller: CallerKind,
    ) -> Result<StatusResponse, ControlError> {
        let command = match operation {
            ControlOperation::Enable => Command::Enable,
            ControlOperation::Disable => Command::Disable,
            ControlOperation::Pause => Command::Pause,
            ControlOperation::Resume => Command::Resume,
            ControlOperation::Flush => Command::Flush,
            _ => return Err(ControlError::Refused),
        };
        self.open_writers(operation == ControlOperation::Enable)
            .await?;
        let events =
            decide(&self.projection, command, caller).map_err(|_| ControlError::Refused)?;
        let applied = !events.is_empty();
        if let Err(error) = self.journal(events) {
            let _ = self.storage_fault(HealthCategory::StorageUnavailable);
            return Err(error);
        }
        // The contract's v0 control event, in the history stream too.
        if (applied || operation == ControlOperation::Flush)
            && let Some(draft) = self.draft("control", Payload::Control { operation })
        {
            self.append_history(vec![draft], 0);
        }
        self.sync()?;
        self.mirror_state();
        self.update_capture();
        Ok(self.status())
    }
}

/// Bytes of every chunk file in the store (history and journal).
fn store_bytes(storage: &dyn Storage) -> u64 {
    use annal_engine::storage::Area;
    [Area::Chunks, Area::Journal]
        .into_iter()
        .filter_map(|area| storage.list(area).ok().map(|entries| (area, entries)))
        .flat_map(|(area, entries)| {
            entries
                .into_iter()
                .filter_map(move |e| e.file_name().map(|name| (area, name)))
        })
        .filter_map(|(area, name)| storage.open_read(area, &name).ok().map(|f| f.len()))
        .sum()
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
        let storage = match args.storage {
            Some(storage) => Some(storage),
            None => open_store(&args.config.layout, Access::Write)
                .ok()
                .map(|s: FsStorage| Arc::new(s) as Arc<dyn Storage>),
        };
        let mirror = storage
            .as_ref()
            .and_then(|s| read_state_mirror(s.as_ref()).ok().flatten());
        let mut state = WriterState {
            config: args.config,
            clock: args.clock,
            keys: args.keys,
            capture: args.capture,
            action_seed: args.action_seed,
            open: None,
            storage,
            projection: Projection::default(),
            unjournaled: Vec::new(),
            lost_unreported: 0,
            session_ids: HashMap::new(),
            bytes_used: 0,
            key_fault: None,
        };
        // A store the owner enabled is reopened at start; a never-enabled one stays closed until
        // `enable` (opt-in: no key is created before it).
        if state.storage.is_some() {
            let _ = state.open_writers(false).await;
            if state.open.is_none() {
                // The key is not readable: show the mirror's enabled/paused so status still says
                // what the owner chose (never authoritative).
                if let Some(mirror) = mirror {
                    state.projection.enabled = mirror.enabled;
                    state.projection.paused = mirror.paused;
                }
            }
        }
        for signal in args.pending_signals {
            state.record_signal(signal);
        }
        let _ = state.sync();
        state.update_capture();
        myself.send_interval(state.config.sync_interval, || WriterMsg::Tick);
        Ok(state)
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            WriterMsg::Batch(batch) => {
                let (drafts, marked) = state.drafts(batch);
                state.append_history(drafts, marked);
                state.update_capture();
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
            WriterMsg::Sync { reply } => {
                let result = state.sync().map(|()| state.status());
                state.update_capture();
                let _ = reply.send(result);
            }
            WriterMsg::Status { reply } => {
                let _ = reply.send(state.status());
            }
            WriterMsg::Signal(signal) => {
                state.record_signal(signal);
                state.update_capture();
            }
            WriterMsg::Tick => {
                let _ = state.sync();
                if let Some(open) = state.open.as_mut()
                    && let Err(error) = open.history.rotate_if_due()
                {
                    state.append_failed(&error);
                }
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
        // A clean stop makes everything durable; capture stays closed until a new writer opens.
        let _ = state.sync();
        state.capture.set_accepting(false);
        Ok(())
    }
}
