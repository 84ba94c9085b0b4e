//! The Journal actor: owns the engine journal's writer and the state projection.
//!
//! It is a child of its own, apart from the Writer, so a failing writer never takes the journal
//! down with it: every supervision signal (the writer's failure, its restarts, the supervisor
//! giving up) is journaled, and status, health and the restart history are read from this
//! projection. Replaying the persisted journal after a restart gives the same projection, hence
//! the same health.

use std::sync::{Arc, OnceLock};

use annal_engine::clock::Clock;
use annal_engine::journal::{Journal, JournalEntry, JournalEvent, Outbox, State, Widenings};
use annal_engine::storage::Storage;
use annal_engine::store::{StoreReader, StoreWriter, WriterConfig};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};

use crate::key_custody::StreamKeys;

/// The store's storage, opened once (it holds the writer lock) and shared by the writer and the
/// journal; set when the store exists or is created.
pub type StorageSlot = Arc<OnceLock<Arc<dyn Storage>>>;

/// The journal could not take the events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the engine journal could not be written")]
pub struct JournalUnavailable;

/// An append the journal could not make durable, with the projection it left: a narrowing
/// stays in effect, a widening is withdrawn (`Widenings`), so the sender adopts it.
#[derive(Debug, Clone, thiserror::Error)]
#[error("the engine journal could not be written")]
pub struct JournalFailed {
    /// The projection after the failure.
    pub projection: State,
}

/// What the journal can be asked.
pub enum JournalMsg {
    /// Open the journal writer with `keys` (the store's storage is in the slot) and replay it.
    /// Replies with the projection.
    Open {
        /// The purpose keys (the journal keys and the key reference are used).
        keys: StreamKeys,
        /// The replayed projection.
        reply: RpcReplyPort<Result<State, JournalUnavailable>>,
    },
    /// Append `events` and apply them; with `durable`, sync before replying (a commit: if it
    /// fails, what widens is withdrawn, `Widenings`).
    Append {
        /// What happened.
        events: Vec<JournalEvent>,
        /// Whether the reply waits for the sync.
        durable: bool,
        /// The projection after them, or after the failure.
        reply: RpcReplyPort<Result<State, JournalFailed>>,
    },
    /// Append `events`, apply them and sync before replying (an audit record or a policy
    /// change that must be durable before anything depends on it; if it fails, what widens is
    /// withdrawn, `Widenings`). Replies without the projection: a sender that keeps a copy of
    /// part of it reads it again after a failure.
    Commit {
        /// What happened.
        events: Vec<JournalEvent>,
        /// `Ok` once durable.
        reply: RpcReplyPort<Result<(), JournalUnavailable>>,
    },
    /// Append `events` and apply them; durable with the next tick. Never fails the sender.
    Record(Vec<JournalEvent>),
    /// What `history_status` reads from the projection (its flags and health), without
    /// copying the whole of it.
    Status {
        /// Whether the embedder admits history.
        admitted: bool,
        /// Drops counted on the capture path and not yet journaled.
        pending_drops: u64,
        /// Where it goes.
        reply: RpcReplyPort<annal_engine::journal::StatusReading>,
    },
    /// The query-visible retention in days (what a query needs of the projection, without
    /// copying the whole of it).
    Retention {
        /// Where it goes.
        reply: RpcReplyPort<u32>,
    },
    /// The history sequences reported lost ([`annal_engine::journal::State::lost`]), for a
    /// reader opening (without copying the whole projection).
    Lost {
        /// Where it goes.
        reply: RpcReplyPort<Vec<std::ops::RangeInclusive<u64>>>,
    },
    /// The owner's audit trail: every gated call's records paired, filtered
    /// (`annal_engine::policy::views::audit_entries`), read from the journal's own records.
    Audit {
        /// Which entries.
        filter: annal_engine::policy::views::AuditFilter,
        /// The entries, oldest first.
        reply:
            RpcReplyPort<Result<Vec<annal_engine::policy::views::AuditEntry>, JournalUnavailable>>,
    },
    /// The policy part of the projection (the gate's copy at first use, the owner's grants
    /// view), without copying the rest of it.
    Policy {
        /// Where it goes.
        reply: RpcReplyPort<annal_engine::policy::PolicyState>,
    },
    /// The policy as the owner's grants view reads it: refused while the journal is not open
    /// (its key or storage failing), so no view shows "no grants" for "cannot read them".
    OwnerPolicy {
        /// Where it goes.
        reply: RpcReplyPort<Result<annal_engine::policy::PolicyState, JournalUnavailable>>,
    },
    /// Group commit of what was recorded.
    Tick,
    /// Makes every [`JournalMsg::Commit`] appended since the last one durable with one sync
    /// (sent by the journal to itself when the first of them arrives, so every commit already
    /// in the mailbox joins the group), then answers each.
    SyncCommits,
    /// Test-only: panic inside the handler, as a bug would.
    #[cfg(feature = "testing")]
    InjectPanic,
}

/// What the journal starts with (also on a restart).
pub struct JournalArgs {
    /// The shared storage slot.
    pub storage: StorageSlot,
    /// The clock (event times).
    pub clock: Arc<dyn Clock>,
    /// How often to sync what was recorded.
    pub sync_interval: std::time::Duration,
    /// Events recorded while no journal actor ran (the supervisor kept them).
    pub pending: Vec<JournalEvent>,
}

/// The journal's state.
pub struct JournalState {
    /// The shared storage slot.
    storage: StorageSlot,
    /// The clock.
    clock: Arc<dyn Clock>,
    /// The writer, once open.
    writer: Option<StoreWriter<Journal>>,
    /// The journal's keys, once open (the owner's audit view reads the records with them).
    keys: Option<annal_engine::keys::JournalKeys>,
    /// The projection of everything journaled (and held).
    projection: State,
    /// Events applied but not durable yet: held (the journal was not open, or an append
    /// failed) or appended and waiting for a sync; what a fault loses is appended again.
    outbox: Outbox,
    /// This actor, for arming the sync timer.
    myself: ActorRef<JournalMsg>,
    /// How long after the first unsynced append the sync runs.
    sync_interval: std::time::Duration,
    /// Whether a sync tick is armed (an idle journal has none).
    tick_armed: bool,
    /// Commits appended and waiting for the group's sync ([`JournalMsg::SyncCommits`]), each
    /// with what it widens (withdrawn if the group fails).
    waiting: Vec<(CommitReply, Widenings)>,
}

/// Where a [`JournalMsg::Commit`] is answered.
type CommitReply = RpcReplyPort<Result<(), JournalUnavailable>>;

/// The Journal actor.
pub struct JournalActor;

impl JournalState {
    /// Applies `events` and appends them (with any held ones first).
    fn record(&mut self, events: Vec<JournalEvent>) -> Result<(), JournalUnavailable> {
        for event in &events {
            self.projection.apply(event);
        }
        self.outbox.hold(events);
        self.flush_held()
    }

    /// A commit: applies `events`, appends them and syncs. When that fails, what they widen
    /// is withdrawn and undone, and what they narrow stays in effect, held for the next append
    /// (`Widenings`): the caller is told the change failed, and it never happens later.
    fn commit(&mut self, events: Vec<JournalEvent>) -> Result<(), JournalUnavailable> {
        let mut widenings = Widenings::default();
        for event in &events {
            widenings.note(&self.projection, event);
            self.projection.apply(event);
        }
        self.outbox.hold(events);
        let result = self.flush_held().and_then(|()| self.sync());
        if result.is_err() {
            if !widenings.is_empty() {
                widenings.withdraw(&mut self.projection, &mut self.outbox);
            }
            // What stays held (a narrowing, the undo) is appended again on the tick, not only
            // with the next event, which may never come before a crash.
            self.arm_tick();
        }
        result
    }

    /// A [`JournalMsg::Commit`]: applies `events` and appends them now, and answers once the
    /// group's sync made them durable ([`JournalState::sync_commits`]). Commits that arrive
    /// together share one sync; none is answered before its own records are durable.
    fn commit_in_group(&mut self, events: Vec<JournalEvent>, reply: CommitReply) {
        let mut widenings = Widenings::default();
        for event in &events {
            widenings.note(&self.projection, event);
            self.projection.apply(event);
        }
        self.outbox.hold(events);
        self.waiting.push((reply, widenings));
        // A failed append has already failed the whole group (`fail_waiting`).
        if self.flush_held().is_ok() && self.waiting.len() == 1 {
            let _ = self.myself.cast(JournalMsg::SyncCommits);
        }
    }

    /// Syncs what the waiting commits appended and answers them (all `Ok`, or all failed).
    fn sync_commits(&mut self) {
        if self.waiting.is_empty() {
            return;
        }
        let _span = crate::telemetry::span::journal_commit(self.waiting.len()).entered();
        // A failed sync has already failed the whole group (`fail_waiting`).
        if self.sync().is_ok() {
            for (reply, _) in self.waiting.drain(..) {
                let _ = reply.send(Ok(()));
            }
        }
    }

    /// A write or sync failed while commits were waiting: each is answered as failed, and
    /// what it widens is withdrawn (newest first), as for a lone commit (`Widenings`). A
    /// record that reaches the disk later stays harmless: the caller was told it failed, and
    /// nothing ran on it.
    fn fail_waiting(&mut self) {
        if self.waiting.is_empty() {
            return;
        }
        for (reply, widenings) in self.waiting.drain(..).rev() {
            if !widenings.is_empty() {
                widenings.withdraw(&mut self.projection, &mut self.outbox);
            }
            let _ = reply.send(Err(JournalUnavailable));
        }
        self.arm_tick();
    }

    /// Arms the sync tick unless one is armed.
    fn arm_tick(&mut self) {
        if !self.tick_armed {
            self.tick_armed = true;
            self.myself
                .send_after(self.sync_interval, || JournalMsg::Tick);
        }
    }

    /// Appends what the outbox holds. A failure fails every waiting commit too.
    fn flush_held(&mut self) -> Result<(), JournalUnavailable> {
        let result = self.append_held();
        if result.is_err() {
            self.fail_waiting();
        }
        result
    }

    fn append_held(&mut self) -> Result<(), JournalUnavailable> {
        if self.outbox.held().is_empty() {
            return Ok(());
        }
        let now = self.clock.now_ms();
        let Some(writer) = self.writer.as_mut() else {
            return Err(JournalUnavailable);
        };
        let entries: Vec<JournalEntry> = self
            .outbox
            .held()
            .iter()
            .cloned()
            .map(|event| JournalEntry {
                time_ms: now,
                event,
            })
            .collect();
        let first = writer.next_sequence().map_or(u64::MAX, |s| s.get());
        match writer.append(entries) {
            Ok(receipt) => self
                .outbox
                .appended(receipt.records.iter().map(|r| r.sequence)),
            Err(error) => {
                self.outbox
                    .append_failed(first, error.is_refused(), error.lost());
                return Err(JournalUnavailable);
            }
        }
        self.arm_tick();
        Ok(())
    }

    /// Syncs what was appended. A failure fails every waiting commit too.
    fn sync(&mut self) -> Result<(), JournalUnavailable> {
        let result = self.sync_appended();
        if result.is_err() {
            self.fail_waiting();
        }
        result
    }

    fn sync_appended(&mut self) -> Result<(), JournalUnavailable> {
        if !self.outbox.has_unsynced() {
            return Ok(());
        }
        let writer = self.writer.as_mut().ok_or(JournalUnavailable)?;
        // The sync blocks for the disk's fdatasync: the worker thread is handed over to the
        // runtime's other work meanwhile (the engine's runtime is multi-threaded), so a group
        // commit never holds up the calls and the writer that run beside it; commits that
        // arrive during it wait in the mailbox and form the next group.
        match tokio::task::block_in_place(|| writer.sync()) {
            Ok(_) => {
                self.outbox.synced();
                Ok(())
            }
            Err(error) => {
                self.outbox.sync_failed(error.lost());
                Err(JournalUnavailable)
            }
        }
    }

    /// The audit trail on disk and held (appended records are read back whether synced or not).
    fn audit(
        &mut self,
        filter: &annal_engine::policy::views::AuditFilter,
    ) -> Result<Vec<annal_engine::policy::views::AuditEntry>, JournalUnavailable> {
        self.flush_held()?;
        let keys = self.keys.as_ref().ok_or(JournalUnavailable)?;
        let storage = self.storage.get().cloned().ok_or(JournalUnavailable)?;
        let report = StoreReader::<Journal>::new(storage)
            .read(keys)
            .map_err(|_| JournalUnavailable)?;
        let policy = report.records().filter_map(|r| match &r.event.event {
            JournalEvent::Policy(event) => Some(event),
            _ => None,
        });
        Ok(annal_engine::policy::views::audit_entries(policy, filter))
    }

    fn open(&mut self, keys: &StreamKeys) -> Result<State, JournalUnavailable> {
        if self.writer.is_some() {
            return Ok(self.projection.clone());
        }
        let storage = self.storage.get().cloned().ok_or(JournalUnavailable)?;
        let report = StoreReader::<Journal>::new(Arc::clone(&storage))
            .read(&keys.journal)
            .map_err(|_| JournalUnavailable)?;
        let mut projection = State::replay(report.records().map(|r| &r.event.event));
        // What was held before the journal could be read comes after what it holds.
        for event in self.outbox.held() {
            projection.apply(event);
        }
        // The writer learns the journal's tip from the read above instead of reading it again.
        let writer = StoreWriter::<Journal>::open_after_read(
            storage,
            keys.journal.clone(),
            WriterConfig::new(keys.reference.clone(), std::num::NonZeroU64::MIN),
            Arc::clone(&self.clock),
            &report,
        )
        .map_err(|_| JournalUnavailable)?;
        self.writer = Some(writer);
        self.keys = Some(keys.journal.clone());
        self.projection = projection;
        self.flush_held()?;
        self.sync()?;
        Ok(self.projection.clone())
    }
}

impl Actor for JournalActor {
    type Msg = JournalMsg;
    type State = JournalState;
    type Arguments = JournalArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: JournalArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let mut state = JournalState {
            storage: args.storage,
            clock: args.clock,
            writer: None,
            keys: None,
            projection: State::default(),
            outbox: Outbox::default(),
            myself: myself.clone(),
            sync_interval: args.sync_interval,
            tick_armed: false,
            waiting: Vec::new(),
        };
        let _ = state.record(args.pending);
        Ok(state)
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            #[cfg(feature = "testing")]
            JournalMsg::InjectPanic => panic!("injected journal panic (test)"),
            JournalMsg::Open { keys, reply } => {
                let _ = reply.send(state.open(&keys));
            }
            JournalMsg::Append {
                events,
                durable,
                reply,
            } => {
                let result = if durable {
                    state.commit(events)
                } else {
                    state.record(events)
                };
                let _ = reply.send(match result {
                    Ok(()) => Ok(state.projection.clone()),
                    Err(JournalUnavailable) => Err(JournalFailed {
                        projection: state.projection.clone(),
                    }),
                });
            }
            JournalMsg::Commit { events, reply } => state.commit_in_group(events, reply),
            JournalMsg::SyncCommits => state.sync_commits(),
            JournalMsg::Record(events) => {
                let _ = state.record(events);
            }
            JournalMsg::Status {
                admitted,
                pending_drops,
                reply,
            } => {
                let _ = reply.send(state.projection.status_reading(admitted, pending_drops));
            }
            JournalMsg::Retention { reply } => {
                let _ = reply.send(state.projection.retention_days);
            }
            JournalMsg::Lost { reply } => {
                let _ = reply.send(state.projection.lost.clone());
            }
            JournalMsg::Audit { filter, reply } => {
                let _ = reply.send(state.audit(&filter));
            }
            JournalMsg::Policy { reply } => {
                let _ = reply.send(state.projection.policy.clone());
            }
            JournalMsg::OwnerPolicy { reply } => {
                let _ = reply.send(if state.writer.is_some() {
                    Ok(state.projection.policy.clone())
                } else {
                    Err(JournalUnavailable)
                });
            }
            JournalMsg::Tick => {
                state.tick_armed = false;
                let _ = state.flush_held();
                let _ = state.sync();
            }
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let _ = state.flush_held();
        let _ = state.sync();
        state.sync_commits();
        Ok(())
    }
}
