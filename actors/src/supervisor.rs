//! The Supervisor: starts the children, carries out the engine's restart plan when one fails,
//! and turns every supervision event into a signal for the journal.
//!
//! ractor's default stops a supervisor when any child ends; this one overrides it. What to do
//! about a failed child is the engine's pure `supervision::plan` (OTP's `rest_for_one` over
//! each child's declared dependencies, and the sliding-window restart intensity): which running
//! dependents to stop on purpose, which children to start again in start order, which stay down.
//! This actor only carries that out, with no rule of its own per child. A child it stopped on
//! purpose is told apart from one that failed by its actor id, so its end starts nothing. The
//! children, in start order (`Child::ALL`): KeyCustody, Journal, Query, PolicyGate, Writer,
//! Ingress. Once no writer or no ingress can come back, nothing would take what capture
//! admits: capture closes, and what the queue holds is counted dropped. Shutdown stops the
//! children in reverse: the ingress closes and drains the capture queue, the writer syncs,
//! the journal drains.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use annal_engine::capture::{CaptureControl, CaptureDrain};
use annal_engine::clock::Clock;
use annal_engine::health::{Child, FailureCategory, Signal, SignalKind};
use annal_engine::journal::{CallerKind, JournalEvent};
use annal_engine::keys::KeyProvider;
use annal_engine::storage::Storage;
use annal_engine::supervision::{self, Decision};
use annal_schema::tools::StatusResponse;
use annal_schema::{ControlOperation, HealthCategory};
use ractor::{
    Actor, ActorCell, ActorId, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent,
};

use crate::children::Children;
use crate::config::EngineConfig;
use crate::gate::{GateActor, GateArgs, GateMsg, PolicyChange};
use crate::ingress::{IngressActor, IngressArgs, IngressMsg};
use crate::journal::{JournalActor, JournalArgs, JournalMsg, StorageSlot};
use crate::key_custody::{KeyCustodyActor, KeyCustodyArgs, KeyCustodyMsg};
use crate::query::{QueryActor, QueryArgs, QueryMsg};
use crate::writer::{
    ControlError, Setting, StatusReply, WriterActor, WriterArgs, WriterMsg, hand_on, status_from,
};
use annal_engine::policy::{Admission, Operation, Principal};

mod lifecycle;

/// Longest the supervisor waits for a child's answer to a routed request, in milliseconds.
const CHILD_CALL_DEADLINE_MS: u64 = crate::config::CONTROL_DEADLINE_MS;

/// What the supervisor can be asked.
pub enum SupervisorMsg {
    /// An owner's control operation, durable before the reply.
    Control {
        /// Which operation.
        operation: ControlOperation,
        /// Who asked.
        caller: CallerKind,
        /// The status after it.
        reply: StatusReply,
    },
    /// The owner changes a setting; durable before the reply.
    Set {
        /// Which setting, and its new value.
        setting: Setting,
        /// Who asked.
        caller: CallerKind,
        /// The status after it.
        reply: StatusReply,
    },
    /// Everything captured before this request, durable before the reply.
    Flush {
        /// The contract's flush (its `control` event while history is enabled), or a sync
        /// alone (no record).
        record: bool,
        /// The status after the flush.
        reply: StatusReply,
    },
    /// The contract's status.
    Status {
        /// The status.
        reply: RpcReplyPort<StatusResponse>,
    },
    /// The tools `principal` may call now.
    ToolsFor {
        /// Who asks.
        principal: Principal,
        /// The operations, in listing order.
        reply: RpcReplyPort<Vec<Operation>>,
    },
    /// An owner's change to the policy, durable before the reply.
    Policy {
        /// The change.
        change: PolicyChange,
        /// `Ok` once durable.
        reply: RpcReplyPort<Result<(), ControlError>>,
    },
    /// The ingress found the capture queue with no writer to drain it: once the writer was
    /// given up on, what it holds is counted as dropped.
    Undrained,
    /// Drain, sync and stop every child (reverse start order).
    Shutdown {
        /// Replies when the children stopped.
        reply: RpcReplyPort<()>,
    },
    /// Test-only: how often `child` was restarted after a failure in this engine's life.
    #[cfg(feature = "testing")]
    Restarts {
        /// Which child.
        child: Child,
        /// The count.
        reply: RpcReplyPort<usize>,
    },
    /// Test-only: make `child` fail the way `failure` says.
    #[cfg(feature = "testing")]
    InjectFailure {
        /// Which child.
        child: Child,
        /// How it fails.
        failure: InjectedFailure,
    },
    /// Test-only: the writer runs its periodic rotation check now.
    #[cfg(feature = "testing")]
    CheckRotationNow,
}

/// Test-only: how an injected child failure happens.
#[cfg(feature = "testing")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InjectedFailure {
    /// The child panics inside its handler, as a bug would.
    Panic,
    /// The child stops without the supervisor having asked it to.
    Stop,
}

/// What the supervisor starts with.
pub struct SupervisorArgs {
    /// The engine's configuration.
    pub config: EngineConfig,
    /// The clock.
    pub clock: Arc<dyn Clock>,
    /// The credential store.
    pub provider: Arc<dyn KeyProvider>,
    /// The capture admission switch.
    pub capture: CaptureControl,
    /// The capture queue's consumer side.
    pub drain: CaptureDrain,
    /// The action-id seed.
    pub action_seed: [u8; 32],
    /// The store's storage when it exists: opened by `Engine::start` (which refuses a store
    /// another writer holds), or injected by a test (a faulty one).
    pub storage: Option<Arc<dyn Storage>>,
    /// Names the children uniquely, so several engines can run in one process.
    pub instance: String,
}

/// The supervisor's state.
pub struct SupervisorState {
    /// The arguments children are (re)started with.
    config: EngineConfig,
    /// The clock.
    clock: Arc<dyn Clock>,
    /// The capture admission switch.
    capture: CaptureControl,
    /// The capture queue's consumer side, lent to every ingress generation.
    drain: Arc<Mutex<CaptureDrain>>,
    /// The action-id seed.
    action_seed: [u8; 32],
    /// The store's storage, opened once and shared by the writer and the journal.
    storage: StorageSlot,
    /// The children's names (the instance name is their prefix).
    children: Children,
    /// The key custody child, while one runs.
    keys: Option<ActorRef<KeyCustodyMsg>>,
    /// The journal child, while one runs.
    journal: Option<ActorRef<JournalMsg>>,
    /// The query child, while one runs.
    query: Option<ActorRef<QueryMsg>>,
    /// The policy gate child, while one runs.
    gate: Option<ActorRef<GateMsg>>,
    /// The writer child, while one runs.
    writer: Option<ActorRef<WriterMsg>>,
    /// The ingress child.
    ingress: Option<ActorRef<IngressMsg>>,
    /// Restart times of each child (ms since the epoch), for the intensity window.
    restarts: HashMap<Child, Vec<u64>>,
    /// Journal events (signals, drops lost with no writer) raised while no journal could take
    /// them; the next journal generation starts with them.
    unjournaled: Vec<JournalEvent>,
    /// Children given up on (restart intensity exceeded, or a child they require is down):
    /// they stay down for the engine's life.
    down: Vec<Child>,
    /// Children the supervisor stopped on purpose (dependents of a failed child): their end
    /// is not a failure.
    stopped_on_purpose: HashSet<ActorId>,
    /// The last status the writer gave, for answering while it restarts.
    last_status: Option<StatusResponse>,
    /// The credential store (for restarting key custody).
    provider: Arc<dyn KeyProvider>,
    /// Set once shutdown began: child exits are then expected.
    stopping: bool,
}

/// The Supervisor actor.
pub struct SupervisorActor;

impl SupervisorState {
    fn signal(&mut self, kind: SignalKind) {
        let signal = Signal {
            at_ms: self.clock.now_ms(),
            kind,
        };
        self.record(JournalEvent::SupervisorSignalled(signal));
    }

    /// Hands `event` to the journal (durable with its next tick), or keeps it for the next
    /// journal generation while none runs.
    fn record(&mut self, event: JournalEvent) {
        self.record_all(vec![event]);
    }

    /// [`SupervisorState::record`] of several events in one message.
    fn record_all(&mut self, events: Vec<JournalEvent>) {
        match &self.journal {
            Some(journal) => {
                if let Err(ractor::MessagingErr::SendErr(JournalMsg::Record(events))) =
                    journal.cast(JournalMsg::Record(events))
                {
                    self.unjournaled.extend(events);
                }
            }
            None => self.unjournaled.extend(events),
        }
    }

    /// Whether no writer or no ingress can come back (`writer_stopped`): from then on nothing
    /// will take what reaches the capture queue, so the supervisor counts it as dropped
    /// ([`SupervisorState::discard_undrainable`]).
    fn undrainable(&self) -> bool {
        self.down
            .iter()
            .any(|child| matches!(child, Child::Writer | Child::Ingress))
    }

    /// Once the writer was given up on: takes everything the capture queue holds (completions
    /// of admitted starts keep arriving) and the drops pending, and journals them as dropped,
    /// so the lifetime total is exact and survives a restart. Their history marker waits for
    /// the next writer to open ([`SupervisorState::record_lost`]).
    fn discard_undrainable(&mut self) {
        if !self.undrainable() {
            return;
        }
        let capacity = self.config.capture_capacity_events;
        let lost = self
            .drain
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .discard(capacity);
        self.record_lost(lost);
    }

    /// The shutdown's end of [`SupervisorState::discard_undrainable`]: closes the queue and
    /// takes what is left until nothing more can arrive (a producer inside a capture call
    /// keeps it unsettled), within `deadline`.
    async fn discard_undrainable_for_good(&mut self, deadline: Duration) {
        if !self.undrainable() {
            return;
        }
        let capacity = self.config.capture_capacity_events;
        let _ = tokio::time::timeout(deadline, async {
            loop {
                let (lost, round) = self
                    .drain
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .discard_final(capacity);
                self.record_lost(lost);
                if round.settled {
                    break;
                }
                if round.appended == 0 {
                    tokio::task::yield_now().await;
                }
            }
        })
        .await;
    }

    /// Journals `count` events lost with no writer to mark them (nothing when 0): in the
    /// lifetime total, and observed without a marker, which the next writer writes.
    fn record_lost(&mut self, count: u64) {
        if count > 0 {
            // One message: the total and its owed marker are journaled together or not at all.
            let owed = JournalEvent::drops_owed_a_marker(count, self.clock.now_ms());
            self.record_all(owed.to_vec());
        }
    }

    /// Drops journaled by the supervisor but held for want of a journal.
    fn unjournaled_drops(&self) -> u64 {
        self.unjournaled
            .iter()
            .map(|event| match event {
                JournalEvent::DropsRecorded { count } => *count,
                _ => 0,
            })
            .sum()
    }

    /// Whether agents may be admitted at all, and whether they need grants.
    fn admission(&self) -> Admission {
        Admission {
            admitted: self.config.admitted,
            unrestricted: self.config.unrestricted,
        }
    }

    /// The contract's status: the writer's, else what the journal and the last status say.
    async fn status(&mut self) -> StatusResponse {
        let status = match &self.writer {
            Some(writer) => {
                ask(
                    writer,
                    |reply| WriterMsg::Status { reply },
                    CHILD_CALL_DEADLINE_MS,
                )
                .await
            }
            None => None,
        };
        let status = match status {
            Some(status) => {
                self.last_status = Some(status.clone());
                status
            }
            None => self.fallback_status().await,
        };
        self.config.telemetry.status(&status);
        status
    }

    /// Asks the writer to apply an owner's change (it answers once the change is durable) and
    /// keeps the status it returns as the last one seen; no writer is `Unavailable`.
    async fn control_through_writer(
        &mut self,
        make: impl FnOnce(StatusReply) -> WriterMsg,
    ) -> Result<StatusResponse, ControlError> {
        let Some(writer) = &self.writer else {
            return Err(ControlError::Unavailable);
        };
        let result = ask(writer, make, CHILD_CALL_DEADLINE_MS)
            .await
            .unwrap_or(Err(ControlError::Unavailable));
        if let Ok(status) = &result {
            self.last_status = Some(status.clone());
        }
        result
    }

    /// A child ended unexpectedly: signal it, then carry out the engine's restart plan for it
    /// (`supervision::plan`): stop its running dependents on purpose, start it (on a restart)
    /// and its dependents again in start order, and mark down what cannot run.
    async fn child_ended(&mut self, myself: &ActorRef<SupervisorMsg>, child: Child) {
        let _ = self.take(child);
        self.signal(SignalKind::ChildFailed {
            child,
            category: FailureCategory::for_crash(child),
        });
        let now = self.clock.now_ms();
        let history = self.restarts.get(&child).map_or(&[][..], Vec::as_slice);
        let plan = supervision::plan(child, history, now, &self.config.restart_policy, &self.down);
        for dependent in &plan.stop {
            self.stop_on_purpose(*dependent).await;
        }
        if plan.decision == Decision::Restart {
            self.restarts.entry(child).or_default().push(now);
        }
        for &starting in &plan.start {
            let started = self.spawn(myself, starting).await;
            if starting == child && started {
                self.config.telemetry.restarted(child);
                self.signal(SignalKind::ChildRestarted { child });
            } else if !started {
                self.give_up(starting);
            }
        }
        for &down in &plan.down {
            if down == child {
                self.give_up(down);
            } else {
                // A dependent that requires a child that is down: stopped, not failed.
                self.down.push(down);
                self.signal(SignalKind::ChildStopped { child: down });
            }
        }
        if self.undrainable() {
            // No writer or no ingress came back (`writer_stopped`): nothing would take what
            // capture admits. Nothing new is admitted; what the queue holds, and the
            // completions still to come, are dropped.
            self.capture.set_accepting(false);
            if let Some(writer) = &self.writer {
                // The writer owns admission (enabled, paused, quota): it must not open it again.
                let _ = writer.cast(WriterMsg::Undrained);
            }
            self.discard_undrainable();
        }
    }

    /// `child` stays down for the engine's life (`RestartLimitReached`).
    fn give_up(&mut self, child: Child) {
        self.down.push(child);
        self.signal(SignalKind::RestartLimitReached { child });
    }

    /// The status while no writer answers: from the journal's projection (its health folds
    /// the persisted signals, the writer's failure and restart limit included), else the last
    /// one seen with the writer stopped.
    async fn fallback_status(&mut self) -> StatusResponse {
        self.discard_undrainable();
        let pending = self.capture.pending_drops();
        let admitted = self.config.admitted;
        if let Some(journal) = &self.journal
            && let Some(reading) = ask(
                journal,
                |reply| JournalMsg::Status {
                    admitted,
                    pending_drops: pending,
                    reply,
                },
                CHILD_CALL_DEADLINE_MS,
            )
            .await
        {
            let bytes_used = self.last_status.as_ref().map_or(0, |s| s.bytes_used);
            return status_from(
                &self.config,
                reading,
                bytes_used,
                pending + self.unjournaled_drops(),
            );
        }
        let mut status = self.last_status.clone().unwrap_or(StatusResponse {
            supported: true,
            admitted: self.config.admitted,
            enabled: false,
            paused: false,
            encrypted: true,
            profile: annal_schema::tools::STORAGE_PROFILE_ID.to_owned(),
            retention_days: annal_schema::tools::DEFAULT_RETENTION_DAYS,
            quota_bytes: annal_schema::tools::DEFAULT_QUOTA_BYTES,
            bytes_used: 0,
            dropped_events: 0,
            health: HealthCategory::WriterStopped,
        });
        status.dropped_events += pending + self.unjournaled_drops();
        status.health = if self.config.admitted {
            // The most severe of the parts that are down (the journal that would fold them is
            // one of them).
            self.down
                .iter()
                .map(|child| child.down_category())
                .chain(std::iter::once(HealthCategory::WriterStopped))
                .min_by_key(|category| annal_engine::health::rank(*category))
                .unwrap_or(HealthCategory::WriterStopped)
        } else {
            HealthCategory::NotAdmitted
        };
        status
    }
}

/// Sends `make(reply)` to `actor` and waits at most `deadline_ms` for the answer.
async fn ask<M: ractor::Message, T: Send + 'static>(
    actor: &ActorRef<M>,
    make: impl FnOnce(RpcReplyPort<T>) -> M,
    deadline_ms: u64,
) -> Option<T> {
    ractor::call_t!(actor, make, deadline_ms).ok()
}

/// Starts `actor` linked to the supervisor under `name` (its failures come back as supervision
/// events); `None` when it failed to start.
async fn spawn_child<A: Actor>(
    myself: &ActorRef<SupervisorMsg>,
    name: String,
    actor: A,
    args: A::Arguments,
) -> Option<ActorRef<A::Msg>> {
    Actor::spawn_linked(Some(name), actor, args, myself.get_cell())
        .await
        .ok()
        .map(|(child, _)| child)
}

impl Actor for SupervisorActor {
    type Msg = SupervisorMsg;
    type State = SupervisorState;
    type Arguments = SupervisorArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: SupervisorArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        // The store's storage, opened by `Engine::start` when the store exists (or injected);
        // otherwise the writer creates and opens it on enable. Both the writer and the journal
        // use this one, which holds the writer lock for the engine's whole life.
        let storage: StorageSlot = Arc::new(OnceLock::new());
        if let Some(opened) = args.storage {
            let _ = storage.set(opened);
        }
        let mut state = SupervisorState {
            config: args.config,
            clock: args.clock,
            capture: args.capture,
            drain: Arc::new(Mutex::new(args.drain)),
            action_seed: args.action_seed,
            storage,
            children: Children::new(&args.instance),
            keys: None,
            journal: None,
            query: None,
            gate: None,
            writer: None,
            ingress: None,
            restarts: HashMap::new(),
            unjournaled: Vec::new(),
            down: Vec::new(),
            stopped_on_purpose: HashSet::new(),
            last_status: None,
            provider: args.provider,
            stopping: false,
        };
        for child in Child::ALL {
            state.spawn(&myself, child).await;
        }
        Ok(state)
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            SupervisorMsg::Control {
                operation,
                caller,
                reply,
            } => {
                let result = state
                    .control_through_writer(|reply| WriterMsg::Control {
                        operation,
                        caller,
                        reply,
                    })
                    .await;
                let _ = reply.send(result);
            }
            SupervisorMsg::Set {
                setting,
                caller,
                reply,
            } => {
                let result = state
                    .control_through_writer(|reply| WriterMsg::Set {
                        setting,
                        caller,
                        reply,
                    })
                    .await;
                let _ = reply.send(result);
            }
            SupervisorMsg::Flush { record, reply } => {
                // Handed on with the caller's reply port: the writer answers the caller
                // itself after its sync (one hand-off back, not three), and the supervisor
                // serves other messages meanwhile. A child that is gone drops the port, which
                // the caller reads as unavailable.
                match (&state.ingress, &state.writer) {
                    (Some(ingress), _) => {
                        hand_on(
                            ingress,
                            IngressMsg::Flush { record, reply },
                            IngressMsg::status_reply,
                        );
                    }
                    (None, Some(writer)) => {
                        hand_on(
                            writer,
                            WriterMsg::flush(record, reply),
                            WriterMsg::status_reply,
                        );
                    }
                    (None, None) => {
                        let _ = reply.send(Err(ControlError::Unavailable));
                    }
                }
            }
            SupervisorMsg::Status { reply } => {
                let status = state.status().await;
                let _ = reply.send(status);
            }
            SupervisorMsg::ToolsFor { principal, reply } => {
                let admission = state.admission();
                let tools = match (&state.gate, &state.journal) {
                    (Some(gate), Some(journal)) => ask(
                        gate,
                        |reply| GateMsg::ToolsFor {
                            principal,
                            admission,
                            journal: journal.clone(),
                            reply,
                        },
                        CHILD_CALL_DEADLINE_MS,
                    )
                    .await
                    .unwrap_or_default(),
                    _ => Vec::new(),
                };
                let _ = reply.send(tools);
            }
            SupervisorMsg::Policy { change, reply } => {
                let result = match (&state.gate, &state.journal) {
                    (Some(gate), Some(journal)) => ask(
                        gate,
                        |reply| GateMsg::Change {
                            change,
                            journal: journal.clone(),
                            reply,
                        },
                        CHILD_CALL_DEADLINE_MS,
                    )
                    .await
                    .map_or(Err(ControlError::Unavailable), |r| {
                        r.map_err(|_| ControlError::Unavailable)
                    }),
                    _ => Err(ControlError::Unavailable),
                };
                let _ = reply.send(result);
            }
            SupervisorMsg::Undrained => state.discard_undrainable(),
            SupervisorMsg::Shutdown { reply } => {
                state.stopping = true;
                let deadline = annal_engine::clock::millis(state.config.shutdown_deadline);
                if let Some(ingress) = state.ingress.take() {
                    let _ = ask(&ingress, |reply| IngressMsg::Close { reply }, deadline).await;
                    let _ = ingress
                        .stop_and_wait(None, Some(state.config.shutdown_deadline))
                        .await;
                }
                state
                    .discard_undrainable_for_good(state.config.shutdown_deadline)
                    .await;
                if let Some(writer) = state.writer.take() {
                    let _ = ask(&writer, |reply| WriterMsg::Sync { reply }, deadline).await;
                    let _ = writer
                        .stop_and_wait(None, Some(state.config.shutdown_deadline))
                        .await;
                }
                if let Some(gate) = state.gate.take() {
                    let _ = gate
                        .stop_and_wait(None, Some(state.config.shutdown_deadline))
                        .await;
                }
                if let Some(query) = state.query.take() {
                    let _ = query
                        .stop_and_wait(None, Some(state.config.shutdown_deadline))
                        .await;
                }
                if let Some(journal) = state.journal.take() {
                    // Drained, not stopped: ractor takes a stop before what waits in the
                    // mailbox, and what waits there is records the others sent on their way
                    // out (drop totals, signals, what the supervisor took off the queue), which
                    // the journal's `post_stop` then makes durable. Stopped only if the drain
                    // does not end within the deadline.
                    if journal
                        .drain_and_wait(Some(state.config.shutdown_deadline))
                        .await
                        .is_err()
                    {
                        let _ = journal
                            .stop_and_wait(None, Some(state.config.shutdown_deadline))
                            .await;
                    }
                }
                if let Some(keys) = state.keys.take() {
                    let _ = keys
                        .stop_and_wait(None, Some(Duration::from_millis(deadline)))
                        .await;
                }
                let _ = reply.send(());
            }
            #[cfg(feature = "testing")]
            SupervisorMsg::InjectFailure { child, failure } => state.inject(child, failure),
            #[cfg(feature = "testing")]
            SupervisorMsg::Restarts { child, reply } => {
                let _ = reply.send(state.restarts.get(&child).map_or(0, Vec::len));
            }
            #[cfg(feature = "testing")]
            SupervisorMsg::CheckRotationNow => {
                if let Some(writer) = &state.writer {
                    let _ = writer.cast(WriterMsg::RotationCheck);
                }
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<Self::Msg>,
        event: SupervisionEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // Never stop the supervisor because a child ended (ractor's default would).
        if state.stopping {
            return Ok(());
        }
        match event {
            SupervisionEvent::ActorFailed(cell, _)
            | SupervisionEvent::ActorTerminated(cell, _, _) => {
                if state.stopped_on_purpose.remove(&cell.get_id()) {
                    return Ok(());
                }
                if let Some(child) = state.which(&cell) {
                    state.child_ended(&myself, child).await;
                }
            }
            _ => {}
        }
        Ok(())
    }
}
