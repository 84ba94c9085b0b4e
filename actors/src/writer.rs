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

use std::collections::HashMap;
use std::sync::Arc;

use annal_engine::capture::{
    CaptureControl, Captured, CapturedItem, Drained, SessionLabel, action_id,
};
use annal_engine::clock::Clock;
use annal_engine::health::{KeyFault, Signal, SignalKind, StorageFault};
use annal_engine::journal::{CallerKind, Command, JournalEvent, State as Projection, decide};
use annal_engine::keys::{KeyError, SessionIdKey};
use annal_engine::storage::{Access, Storage};
use annal_engine::store::{
    AppendError, AppendReceipt, History, StateMirror, StoreWriter, WriterConfig, create_store,
    open_store, write_state_mirror,
};
use annal_schema::tools::{STORAGE_PROFILE_ID, StatusResponse};
use annal_schema::{
    ControlOperation, EventDraft, EventTime, HealthCategory, OpaqueId, Payload, SessionPhase,
    Subject,
};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};

use crate::config::EngineConfig;
use crate::journal::{JournalMsg, StorageSlot};
use crate::key_custody::{KeyCustodyMsg, StreamKeys};

/// How many sequences the writer reserves in the journal at a time. The reservation is made
/// durable before any history record uses one of its sequences, so after a crash the next
/// generation starts above it: sequences are never reused, at the cost of a gap of at most
/// this many numbers per restart (gaps are valid evidence in the contract).
pub const SEQUENCE_RESERVE_BLOCK: u64 = 4096;

/// Most raw-label -> keyed-id entries the writer caches (deriving one is an HMAC, ~1 us).
pub const SESSION_ID_CACHE_ENTRIES: usize = 1024;

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
        reply: RpcReplyPort<Result<StatusResponse, ControlError>>,
    },
    /// The owner sets the quota (and what capture does at it); replies after it is durable.
    SetQuota {
        /// The quota, in bytes (`journal::QUOTA_MIN_BYTES..=QUOTA_MAX_BYTES`).
        bytes: u64,
        /// What capture does at the quota.
        on_quota: annal_engine::journal::OnQuota,
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
}

/// The history writer, once the key is loaded.
struct Open {
    /// The purpose keys.
    keys: StreamKeys,
    /// The history stream.
    history: StoreWriter<History>,
    /// Sequences reserved in the journal so far (durable there).
    reserved_through: u64,
    /// The newest seal (the chain's tip): the next closed chunk's seal links to it.
    last_seal: Option<annal_engine::seal::Seal>,
    /// History records appended since the last sync.
    dirty: bool,
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
    /// The action-id seed.
    action_seed: [u8; 32],
    /// The store's storage slot.
    storage: StorageSlot,
    /// The query actor, told of every appended event.
    query: Option<ActorRef<crate::query::QueryMsg>>,
    /// The history writer, once open.
    open: Option<Open>,
    /// The journal's projection as of the writer's last exchange with it (enabled, paused:
    /// what capture admission needs). Status reads the journal's own, current one.
    projection: Projection,
    /// Whether the last store operation failed (so the next success signals recovery).
    storage_failing: bool,
    /// Whether the last key load failed (so the next success signals recovery).
    key_failing: bool,
    /// Events lost by this writer (a failed batch or sync) not yet reported by a drop marker.
    lost_unreported: u64,
    /// Raw label -> keyed session id.
    session_ids: HashMap<SessionLabel, OpaqueId>,
    /// Encrypted bytes in the store, as far as this writer knows.
    bytes_used: u64,
    /// This actor, for arming the group-commit timer.
    myself: ActorRef<WriterMsg>,
    /// Whether a group-commit tick is armed (an idle writer has none).
    tick_armed: bool,
    /// The store is at its quota: capture admits nothing new (reads, control and access
    /// records still go through: they are the headroom above the quota).
    at_quota: bool,
    /// Seal files being written on blocking threads (two syncs and a rename each, kept off the
    /// capture path); each answers whether its seal was written. Awaited at stop.
    seal_writes: Vec<tokio::task::JoinHandle<bool>>,
}

/// The Writer actor.
pub struct WriterActor;

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
                self.projection = projection;
                Ok(())
            }
            _ => Err(self.storage_fault(HealthCategory::StorageUnavailable)),
        }
    }

    fn storage_fault(&mut self, category: HealthCategory) -> ControlError {
        let category = if category == HealthCategory::StorageCorrupt {
            StorageFault::StorageCorrupt
        } else {
            StorageFault::StorageUnavailable
        };
        self.storage_failing = true;
        self.signal(SignalKind::StorageFailed { category });
        ControlError::Storage
    }

    fn storage_ok(&mut self) {
        if std::mem::take(&mut self.storage_failing) {
            self.signal(SignalKind::StorageRecovered);
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
            && !self.at_quota
    }

    /// Compares the bytes in the store with the quota, and signals when that changes. At the
    /// quota capture stops (`quota_reached`); it resumes once the quota is raised. (Eviction of
    /// the oldest sealed chunks, `on_quota = evict_oldest`, is not implemented yet: that choice
    /// stops capture too.)
    fn check_quota(&mut self) {
        let at = self.open.is_some() && self.bytes_used >= self.projection.quota_bytes;
        if at != self.at_quota {
            self.at_quota = at;
            self.signal(if at {
                SignalKind::QuotaReached
            } else {
                SignalKind::QuotaCleared
            });
        }
    }

    fn update_capture(&self) {
        self.capture.set_accepting(self.accepting());
    }

    /// The contract's status, from the journal's current projection (health included: a fold
    /// over the persisted signals and the live drop count).
    async fn status(&mut self) -> StatusResponse {
        let admitted = self.config.admitted;
        let pending_drops = self.capture.pending_drops() + self.lost_unreported;
        let reading = ractor::call_t!(
            self.journal,
            |reply| JournalMsg::Status {
                admitted,
                pending_drops,
                reply
            },
            CHILD_CALL_DEADLINE_MS
        )
        .unwrap_or_else(|_| self.projection.status_reading(admitted, pending_drops));
        status_from(&self.config, reading, self.bytes_used, pending_drops)
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
        if std::mem::take(&mut self.key_failing) {
            self.signal(SignalKind::KeyRecovered);
        }
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
        let mut config = WriterConfig::new(keys.reference.clone(), std::num::NonZeroU64::MIN);
        config.sequence_floor = projection
            .history_high_water
            .and_then(annal_schema::Sequence::new);
        let history = match StoreWriter::<History>::open(
            Arc::clone(&storage),
            keys.history.clone(),
            config,
            Arc::clone(&self.clock),
        ) {
            Ok(history) => history,
            Err(_) => return Err(self.storage_fault(HealthCategory::StorageUnavailable)),
        };
        // A crash's torn tails, once each (readers leave them out whether recorded or not).
        // (A tear outside the journal's bounds is not recorded: the journal would refuse it.)
        let tears: Vec<JournalEvent> = history
            .torn_tails_at_open()
            .iter()
            .filter(|tear| !projection.torn_tails.contains(&tear.chunk_id))
            .map(|tear| JournalEvent::TornTailRecorded {
                chunk: tear.chunk_id,
                bytes_left_out: tear.bytes_left_out,
            })
            .filter(|event| event.check_bounds().is_ok())
            .collect();
        if !tears.is_empty() {
            let _ = self.journal.cast(JournalMsg::Record(tears));
        }
        let reserved_through = history.high_water().map_or(0, |s| s.get());
        // The chain's tip: a seal that does not verify is never linked to (verify reports it).
        let last_seal = annal_engine::seal::read_seals(storage.as_ref(), &keys.seal)
            .ok()
            .and_then(|seals| annal_engine::seal::chain_tip(&seals).cloned());
        self.bytes_used = store_bytes(storage.as_ref());
        self.projection = projection;
        self.at_quota = false;
        self.open = Some(Open {
            keys,
            history,
            reserved_through,
            last_seal,
            dirty: false,
        });
        self.check_quota();
        Ok(())
    }

    fn key_fault(&mut self, category: HealthCategory) -> ControlError {
        self.key_failing = true;
        let fault = KeyFault::from_health(category).unwrap_or(KeyFault::KeyUnavailable);
        self.signal(SignalKind::KeyFailed { category: fault });
        ControlError::Key(category)
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

    /// The keyed session id of `label` (when there is a label and a key).
    fn keyed_session(
        &mut self,
        label: Option<&SessionLabel>,
        key: Option<&SessionIdKey>,
    ) -> Option<OpaqueId> {
        Some(Self::session_id(label?, key?, &mut self.session_ids))
    }

    /// The draft of an action's start or completion: the same identity fields, another payload.
    fn action_draft(
        &mut self,
        time: EventTime,
        action: u64,
        context: &annal_engine::capture::ActionContext,
        key: Option<&SessionIdKey>,
        payload: Payload,
    ) -> Option<EventDraft> {
        let id = action_id(&self.action_seed, action);
        Some(EventDraft {
            subject: Subject::for_action(&id),
            time,
            session_id: self.keyed_session(context.session.as_ref(), key),
            action_id: Some(id),
            platform: self.config.platform,
            capability: Some(context.capability.clone()),
            application: context.application.clone(),
            payload,
        })
    }

    /// The draft of a session's start or end.
    fn session_draft(
        &mut self,
        time: EventTime,
        label: &SessionLabel,
        key: Option<&SessionIdKey>,
        phase: SessionPhase,
    ) -> Option<EventDraft> {
        Some(EventDraft {
            subject: Subject::new("session").ok()?,
            time,
            session_id: self.keyed_session(Some(label), key),
            action_id: None,
            platform: self.config.platform,
            capability: None,
            application: None,
            payload: Payload::Session { phase },
        })
    }

    /// Turns drained items into history drafts (and the journal's drop records).
    fn drafts(&mut self, batch: Vec<Drained<Captured>>) -> Vec<EventDraft> {
        let mut drafts = Vec::with_capacity(batch.len() + 1);
        let mut dropped = 0u64;
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
            let key = session_key.as_deref();
            let draft = match captured.item {
                CapturedItem::ActionStarted { action, context } => {
                    self.action_draft(time, action, &context, key, Payload::ActionStarted)
                }
                CapturedItem::ActionCompleted {
                    action,
                    context,
                    outcome,
                } => self.action_draft(
                    time,
                    action,
                    &context,
                    key,
                    Payload::ActionCompleted(outcome),
                ),
                CapturedItem::SessionStarted { session } => {
                    self.session_draft(time, &session, key, SessionPhase::Started)
                }
                CapturedItem::SessionEnded { session } => {
                    self.session_draft(time, &session, key, SessionPhase::Ended)
                }
            };
            let Some(draft) = draft else { continue };
            drafts.push(draft);
        }
        // Drops with no event after them yet: reported before the next event.
        self.lost_unreported = lost_before + dropped;
        drafts
    }

    /// Appends history drafts, reserving sequences first. A failure is a signal and the
    /// batch's events are counted as lost (reported by the next drop marker).
    async fn append_history(&mut self, drafts: Vec<EventDraft>) {
        if drafts.is_empty() {
            return;
        }
        let count = drafts.len() as u64;
        // The drop markers among them, and the drops they report.
        let (markers, marked_drops) =
            drafts
                .iter()
                .fold((0u64, 0u64), |(markers, drops), d| match d.payload {
                    Payload::Health {
                        category: HealthCategory::EventsDropped,
                        count,
                    } => (markers + 1, drops + count),
                    _ => (markers, drops),
                });
        // If this batch is lost, its events and the drops its markers reported are reported
        // again by the next marker.
        let lost_if_failed = count - markers + marked_drops;
        let Some(open) = self.open.as_ref() else {
            self.lost_unreported += lost_if_failed;
            return;
        };
        let next_last = open.history.high_water().map_or(0, |s| s.get()) + count;
        if next_last > open.reserved_through {
            let reserve = next_last + SEQUENCE_RESERVE_BLOCK;
            // Durable before any history record uses one of these sequences.
            let reserved = self
                .journal(
                    vec![JournalEvent::SequenceMarked {
                        high_water: reserve,
                    }],
                    true,
                )
                .await;
            if reserved.is_err() {
                self.lost_unreported += lost_if_failed;
                return;
            }
            if let Some(open) = self.open.as_mut() {
                open.reserved_through = reserve;
            }
        }
        let Some(open) = self.open.as_mut() else {
            return;
        };
        match open.history.append(drafts) {
            Ok(AppendReceipt {
                records,
                events,
                closed,
                ..
            }) => {
                open.dirty = true;
                let written: u64 = records.iter().map(|r| r.len).sum();
                if let Some(query) = &self.query {
                    let appended = records.into_iter().zip(events).collect();
                    let _ = query.cast(crate::query::QueryMsg::Appended(appended));
                }
                if !self.tick_armed {
                    self.tick_armed = true;
                    self.myself
                        .send_after(self.config.sync_interval, || WriterMsg::Tick);
                }
                self.bytes_used += written;
                self.seal(&closed).await;
                self.check_quota();
                if marked_drops > 0 {
                    // The lifetime total, durable with the journal's next tick.
                    let recorded = JournalEvent::DropsRecorded {
                        count: marked_drops,
                    };
                    self.projection.apply(&recorded);
                    let _ = self.journal.cast(JournalMsg::Record(vec![recorded]));
                }
                self.storage_ok();
            }
            Err(error) => {
                self.lost_unreported += lost_if_failed;
                self.append_failed(&error);
            }
        }
    }

    /// Seals the chunks just closed (synced at rotation): each seal is prepared here, in order
    /// (the next one chains to it), and its file written on a blocking thread. A seal that
    /// cannot be written is a storage signal; the chunk stays readable and `verify` reports it
    /// as unsealed.
    async fn seal(&mut self, closed: &[annal_engine::store::ClosedChunk]) {
        let Some(storage) = self.storage.get().cloned() else {
            return;
        };
        let mut failed = false;
        if let Some(open) = self.open.as_mut() {
            for chunk in closed {
                match annal_engine::seal::prepare_seal(chunk, open.last_seal.as_ref()) {
                    Ok(seal) => {
                        open.last_seal = Some(seal.clone());
                        let (storage, key, chunk) = (
                            Arc::clone(&storage),
                            Arc::clone(&open.keys.seal),
                            chunk.clone(),
                        );
                        self.seal_writes.push(tokio::task::spawn_blocking(move || {
                            annal_engine::seal::write_seal(storage.as_ref(), &chunk, &seal, &key)
                                .is_ok()
                        }));
                    }
                    Err(_) => failed = true,
                }
            }
        }
        if failed {
            let _ = self.storage_fault(HealthCategory::StorageUnavailable);
        }
        self.reap_seal_writes(false).await;
    }

    /// Collects the seal writes that finished (all of them, waiting, when `all`); a failed one
    /// is a storage fault (its chunk stays unsealed, which `verify` reports).
    async fn reap_seal_writes(&mut self, all: bool) {
        let mut failed = false;
        let mut still_running = Vec::new();
        for write in std::mem::take(&mut self.seal_writes) {
            if all || write.is_finished() {
                failed |= !write.await.unwrap_or(false);
            } else {
                still_running.push(write);
            }
        }
        self.seal_writes = still_running;
        if failed {
            let _ = self.storage_fault(HealthCategory::StorageUnavailable);
        }
    }

    fn append_failed(&mut self, error: &AppendError) {
        let category = error
            .health_category()
            .unwrap_or(HealthCategory::StorageUnavailable);
        let _ = self.storage_fault(category);
    }

    /// Group commit: syncs what was appended. A failed sync is a signal (never retried), and
    /// what it covered is reported as dropped.
    fn sync(&mut self) -> Result<(), ControlError> {
        let Some(open) = self.open.as_mut() else {
            return Ok(());
        };
        if !open.dirty {
            return Ok(());
        }
        open.dirty = false;
        match open.history.sync() {
            Ok(_) => Ok(()),
            Err(error) => {
                // What the failed sync covered can never be acknowledged and, after a failed
                // fsync, is most likely gone: it is reported as dropped, never lost silently.
                self.lost_unreported +=
                    error.lost().map_or(0, |range| range.clone().count() as u64);
                self.append_failed(&error);
                Err(ControlError::Storage)
            }
        }
    }

    fn mirror_state(&self) {
        if let Some(storage) = self.storage.get() {
            let _ = write_state_mirror(
                storage.as_ref(),
                StateMirror {
                    enabled: self.projection.enabled,
                    paused: self.projection.paused,
                },
            );
        }
    }

    async fn set_quota(
        &mut self,
        bytes: u64,
        on_quota: annal_engine::journal::OnQuota,
        caller: CallerKind,
    ) -> Result<StatusResponse, ControlError> {
        if self.open.is_none() {
            return Err(ControlError::Refused);
        }
        let events = decide(
            &self.projection,
            Command::SetQuota { bytes, on_quota },
            caller,
        )
        .map_err(|_| ControlError::Refused)?;
        self.journal(events, true).await?;
        self.check_quota();
        self.update_capture();
        Ok(self.status().await)
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
        if self.open.is_none() {
            // A store that was never enabled has nothing to pause or flush.
            return Err(ControlError::Refused);
        }
        let events =
            decide(&self.projection, command, caller).map_err(|_| ControlError::Refused)?;
        let applied = !events.is_empty();
        self.journal(events, true).await?;
        // The contract's v0 control event, in the history stream too.
        if (applied || operation == ControlOperation::Flush)
            && let Some(draft) = self.draft("control", Payload::Control { operation })
        {
            self.append_history(vec![draft]).await;
        }
        self.sync()?;
        self.mirror_state();
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
        let mut state = WriterState {
            config: args.config,
            clock: args.clock,
            keys: args.keys,
            journal: args.journal,
            capture: args.capture,
            action_seed: args.action_seed,
            storage: args.storage,
            query: args.query,
            open: None,
            projection: Projection::default(),
            storage_failing: false,
            key_failing: false,
            lost_unreported: 0,
            session_ids: HashMap::new(),
            bytes_used: 0,
            myself: myself.clone(),
            tick_armed: false,
            at_quota: false,
            seal_writes: Vec::new(),
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
            state.projection.enabled = mirror.enabled;
            state.projection.paused = mirror.paused;
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
            WriterMsg::SetQuota {
                bytes,
                on_quota,
                caller,
                reply,
            } => {
                let result = state.set_quota(bytes, on_quota, caller).await;
                state.update_capture();
                let _ = reply.send(result);
            }
            WriterMsg::Sync { reply } => {
                let result = match state.sync() {
                    Ok(()) => Ok(state.status().await),
                    Err(error) => Err(error),
                };
                state.update_capture();
                let _ = reply.send(result);
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
                state.tick_armed = false;
                let _ = state.sync();
                state.reap_seal_writes(false).await;
                state.update_capture();
            }
            WriterMsg::RotationCheck => {
                let rotated = state.open.as_mut().map(|open| open.history.rotate_if_due());
                match rotated {
                    Some(Ok(Some(closed))) => state.seal(&[closed]).await,
                    Some(Err(error)) => state.append_failed(&error),
                    _ => {}
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
        // A clean stop makes everything durable (the seals being written included); capture
        // stays closed until a new writer opens.
        let _ = state.sync();
        state.reap_seal_writes(true).await;
        state.capture.set_accepting(false);
        Ok(())
    }
}
