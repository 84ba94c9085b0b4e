//! The Ingress actor: drains the capture queue into the writer in batches.
//!
//! The capture path never wakes anyone, so this side notices new events by itself: every
//! `drain_tick` it takes up to [`INGRESS_BATCH_MAX_EVENTS`] items and hands them to the writer in
//! one call; a full batch is followed at once by another drain. The call waits for the writer's
//! acknowledgment, which is the back-pressure: the ingress drains only as fast as the writer
//! appends, and a slow writer shows as a filling capture queue (then counted drops), never as an
//! unbounded mailbox. A batch the writer did not acknowledge (it failed with the batch in its
//! mailbox) is not redelivered, which could duplicate events: it is counted, and the next batch
//! to any writer starts with a `Dropped` marker for it. While no writer runs (a restart), nothing
//! is drained: the queue fills and capture counts drops; each tick that finds it holding
//! something tells the supervisor, which counts it all as dropped once it gave up on the writer.
//! Each drained batch is counted once for telemetry (`annal.capture.accepted`,
//! `annal.capture.dropped`, the queue depth it leaves; `crate::telemetry`), so the capture hook
//! itself does no telemetry work.
//!
//! At most one `Drain` waits in the mailbox ([`DrainWakeup`]). The ticker at every tick, and the
//! ingress after a flush and after a writer change, each keep a [`StallWatch`]: a claim that a
//! second look still finds held, with work waiting and no `Drain` taken in between, is presumed
//! lost and one more `Drain` is sent, so a lost wake-up costs at most two ticks and never strands
//! the queue until the next flush.

use std::sync::{Arc, Mutex};

use annal_engine::capture::{
    CaptureControl, CaptureDrain, Captured, DrainWakeup, Drained, StallWatch, TickSchedule,
};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};

use crate::supervisor::SupervisorMsg;
use crate::writer::{ControlError, StatusReply, WriterMsg, hand_on};

/// Most items drained into one batch. Bounds one message to the writer (and one append), and
/// so how long a flush waits for the batch in flight: a quarter of the default capture queue.
/// Measured on the 2-core machine (docs/benchmarks.md, interleaved `engine_stream 100000
/// flusher` runs): with the writer at ~3 us per event, 128 cut the commit p99 by 0.5-1 ms
/// against 256 and 512 (4.4 against 5.4 ms in the quietest pairs) for ~10 % of durable
/// throughput (287,000 against 321,000 events/s, far above the 200,000 floor).
pub const INGRESS_BATCH_MAX_EVENTS: usize = 128;

/// Most items one batch of a flush (or of another drain of everything queued) takes: what was
/// queued when it began goes to the writer in batches this large, so a flush of the default
/// queue is one append before its sync. Bounded so that a capture queue configured far larger
/// than the default does not make one append of a whole queue.
pub const FLUSH_BATCH_MAX_EVENTS: usize = annal_engine::capture::CAPTURE_QUEUE_CAPACITY_EVENTS;

/// What the ingress can be asked.
pub enum IngressMsg {
    /// Drain what is queued (the periodic tick, or a follow-up after a full batch).
    Drain,
    /// A flush: drain what is queued now, then hand the reply port on to the writer's flush
    /// (the contract's `control` flush event, then the sync), which answers. The ingress is the
    /// only sender of batches, so no batch can slip in between the drain and the sync.
    Flush {
        /// The contract's flush (its `control` event), or a sync alone.
        record: bool,
        /// The writer's status after the sync, or why it failed.
        reply: StatusReply,
    },
    /// Close the queue (no capture is admitted after), drain it to the end, then reply.
    Close {
        /// Replies once the queue is empty and closed.
        reply: RpcReplyPort<()>,
    },
    /// The writer to hand batches to (after a start or restart).
    Writer(Option<ActorRef<WriterMsg>>),
    /// Test-only: panic inside the handler, as a bug would.
    #[cfg(feature = "testing")]
    InjectPanic,
}

impl IngressMsg {
    /// The status reply port this message carries, if any (for `writer::hand_on`).
    pub(crate) fn status_reply(self) -> Option<StatusReply> {
        match self {
            Self::Flush { reply, .. } => Some(reply),
            _ => None,
        }
    }
}

/// The ingress's state.
pub struct IngressState {
    /// The single consumer of the capture queue. Shared with the supervisor only so a restarted
    /// ingress gets the same queue; the capture side never touches this lock.
    drain: Arc<Mutex<CaptureDrain>>,
    /// The current writer, when one runs.
    writer: Option<ActorRef<WriterMsg>>,
    /// Reused batch buffer.
    batch: Vec<Drained<Captured>>,
    /// Events of batches no writer acknowledged, reported by a marker before the next batch.
    lost_events: u64,
    /// Readings of the queue (whether anything waits).
    control: CaptureControl,
    /// Told when the queue holds something and no writer takes it (the supervisor counts it as
    /// dropped once it gave up on the writer).
    supervisor: ActorRef<SupervisorMsg>,
    /// The ticker thread; it ends when this is dropped (the ingress stopped).
    ticker: Option<Ticker>,
    /// Set while a `Drain` is queued for this actor: at most one ever waits in its mailbox, so
    /// a flush or close is never queued behind a pile of drains.
    drain_queued: DrainWakeup,
    /// The ingress's own look at the claim after a flush or a writer change (the ticker keeps
    /// another): heals a claim whose `Drain` was lost.
    watch: StallWatch,
    /// Counts what each batch took and lost.
    telemetry: crate::telemetry::Telemetry,
}

/// What the ingress starts with.
pub struct IngressArgs {
    /// The capture queue's consumer side.
    pub drain: Arc<Mutex<CaptureDrain>>,
    /// The supervisor, told when the queue holds something and no writer takes it.
    pub supervisor: ActorRef<SupervisorMsg>,
    /// How often to look at the queue while events flow.
    pub tick: std::time::Duration,
    /// How often to look first once the queue stayed empty for a while.
    pub idle_tick: std::time::Duration,
    /// The longest period between looks at an empty queue.
    pub idle_tick_max: std::time::Duration,
    /// Counts what each batch took and lost.
    pub telemetry: crate::telemetry::Telemetry,
}

/// The Ingress actor.
pub struct IngressActor;

/// The thread that looks at the queue every tick and wakes the actor only when something
/// waits. A plain OS thread sleeping on its stop channel, not a runtime timer: an idle engine
/// then costs one thread wake-up per idle tick (a runtime timer also woke a second worker
/// through the scheduler's event fd each time, ~0.5 % of a core at 50 ticks a second).
struct Ticker {
    /// Dropped with the ingress's state: the thread's wait returns at once and it ends.
    _stop: std::sync::mpsc::Sender<()>,
}

impl Ticker {
    /// Starts the thread, on `schedule` (`annal_engine::capture::TickSchedule`: active while
    /// events flow, backing off while the queue stays empty, active again at the first event).
    fn spawn(
        control: CaptureControl,
        ingress: ActorRef<IngressMsg>,
        drain_queued: DrainWakeup,
        mut schedule: TickSchedule,
    ) -> std::io::Result<Self> {
        use std::sync::mpsc::RecvTimeoutError;
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        std::thread::Builder::new()
            .name("annal-ingress-tick".into())
            .spawn(move || {
                let mut watch = StallWatch::new();
                // Until the ingress's state drops the sender (or sends): each timeout is a look.
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(schedule.period()) {
                    let found_work = control.queued_events() > 0 || control.pending_drops() > 0;
                    schedule.looked(found_work);
                    if found_work {
                        if watch.claim_or_heal(&drain_queued)
                            && ingress.cast(IngressMsg::Drain).is_err()
                        {
                            break;
                        }
                    } else {
                        watch.idle();
                    }
                }
            })?;
        Ok(Self { _stop: stop })
    }
}

/// Longest one batch may take to be appended, in milliseconds. Far above an append (a few ms
/// for a full batch, plus a sync on a slow disk); a writer past it is treated as gone.
pub const BATCH_ACK_DEADLINE_MS: u64 = 10_000;

impl IngressState {
    /// Hands `items` to `writer` and waits for the acknowledgment; an unacknowledged batch is
    /// counted as lost. Returns whether it was acknowledged.
    async fn deliver(
        &mut self,
        writer: &ActorRef<WriterMsg>,
        mut items: Vec<Drained<Captured>>,
    ) -> bool {
        if self.lost_events > 0 {
            items.insert(
                0,
                Drained::Dropped {
                    count: self.lost_events,
                },
            );
        }
        // One pass: the events the batch stands for, and its captured ones.
        let (in_batch, captured) = items.iter().fold((0u64, 0u64), |(events, captured), item| {
            (
                events + item.events(),
                captured + u64::from(matches!(item, Drained::Captured(_))),
            )
        });
        let acknowledged = ractor::call_t!(
            writer,
            |reply| WriterMsg::Batch { items, reply },
            BATCH_ACK_DEADLINE_MS
        )
        .is_ok();
        if acknowledged {
            self.lost_events = 0;
        } else {
            // Counted accepted when taken, lost now (the next marker reports them); the batch's
            // drop markers were counted when they were drained.
            self.telemetry.lost(captured);
            // The marker carried the earlier losses; they are in this count again.
            self.lost_events = in_batch;
            self.writer = None;
        }
        acknowledged
    }

    /// Drains one batch of at most [`INGRESS_BATCH_MAX_EVENTS`] to the writer. Returns how many
    /// entries it took and whether to drain again at once (the batch was delivered and more
    /// items wait).
    async fn drain_once(&mut self) -> (usize, bool) {
        self.drain_up_to(INGRESS_BATCH_MAX_EVENTS).await
    }

    /// [`IngressState::drain_once`] with a batch of at most `max` entries.
    async fn drain_up_to(&mut self, max: usize) -> (usize, bool) {
        let Some(writer) = self.writer.clone() else {
            return (0, false);
        };
        self.batch.clear();
        // A flush's batch is larger than the tick batch the buffer was made for.
        self.batch.reserve(max);
        let taken = {
            let mut drain = self
                .drain
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            drain.drain(max, &mut self.batch)
        };
        if self.batch.is_empty() {
            return (0, false);
        }
        let (accepted, dropped) = self.batch.iter().fold((0, 0), |(a, d), item| match item {
            Drained::Captured(_) => (a + 1, d),
            Drained::Dropped { count } => (a, d + count),
        });
        self.telemetry
            .drained(accepted, dropped, self.control.queued_events());
        let batch = std::mem::replace(
            &mut self.batch,
            Vec::with_capacity(INGRESS_BATCH_MAX_EVENTS),
        );
        // Again at once while items wait (a full queue drains in one go, not one per tick).
        let delivered = self.deliver(&writer, batch).await;
        (
            taken,
            delivered && (taken >= max || self.control.queued_events() > 0),
        )
    }

    /// After a flush or a writer change drained what was queued: when more waits, sends a
    /// `Drain` if the wake-up is free, or if this look and the previous one found it held with
    /// no `Drain` taken in between (a lost one; `StallWatch`).
    fn wake_if_work_waits(&mut self, myself: &ActorRef<IngressMsg>) {
        if self.writer.is_some()
            && (self.control.queued_events() > 0 || self.control.pending_drops() > 0)
        {
            if self.watch.claim_or_heal(&self.drain_queued) {
                let _ = myself.cast(IngressMsg::Drain);
            }
        } else {
            self.watch.idle();
        }
    }

    /// Drains what the queue holds now, not what keeps arriving (under a producer that never
    /// pauses a flush must still end): at most as many entries as were queued when it began,
    /// in batches of up to [`FLUSH_BATCH_MAX_EVENTS`] (one append before a flush's sync, not
    /// one per [`INGRESS_BATCH_MAX_EVENTS`]: interleaved runs measured commit p50 2.1-2.3 ms
    /// against 2.6-2.8 ms, docs/benchmarks.md).
    async fn drain_all(&mut self) {
        let mut left = self.control.queued_events();
        while left > 0 {
            let (taken, more) = self.drain_up_to(left.min(FLUSH_BATCH_MAX_EVENTS)).await;
            left = left.saturating_sub(taken);
            if !more || taken == 0 {
                break;
            }
        }
    }
}

impl Actor for IngressActor {
    type Msg = IngressMsg;
    type State = IngressState;
    type Arguments = IngressArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: IngressArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let control = args
            .drain
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .control();
        let drain_queued = DrainWakeup::new();
        let ticker = Ticker::spawn(
            control.clone(),
            myself.clone(),
            drain_queued.clone(),
            TickSchedule::new(
                args.tick,
                args.idle_tick,
                args.idle_tick_max,
                std::time::Duration::from_millis(crate::config::DRAIN_IDLE_AFTER_MS),
            ),
        )?;
        Ok(IngressState {
            drain: args.drain,
            writer: None,
            batch: Vec::with_capacity(INGRESS_BATCH_MAX_EVENTS),
            lost_events: 0,
            supervisor: args.supervisor,
            control,
            ticker: Some(ticker),
            drain_queued,
            watch: StallWatch::new(),
            telemetry: args.telemetry,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            #[cfg(feature = "testing")]
            IngressMsg::InjectPanic => panic!("injected ingress panic (test)"),
            IngressMsg::Drain if state.writer.is_none() => {
                state.drain_queued.release();
                let _ = state.supervisor.cast(SupervisorMsg::Undrained);
            }
            IngressMsg::Drain => {
                state.drain_queued.release();
                if state.drain_once().await.1 && state.drain_queued.try_claim() {
                    let _ = myself.cast(IngressMsg::Drain);
                }
            }
            IngressMsg::Flush { record, reply } => {
                state.drain_all().await;
                state.wake_if_work_waits(&myself);
                // The writer syncs and answers the caller; the ingress goes back to draining.
                // The sync comes before any later batch (the writer's mailbox is in order).
                match &state.writer {
                    Some(writer) => {
                        hand_on(
                            writer,
                            WriterMsg::flush(record, reply),
                            WriterMsg::status_reply,
                        );
                    }
                    None => {
                        let _ = reply.send(Err(ControlError::Unavailable));
                    }
                }
            }
            IngressMsg::Close { reply } => {
                // Rounds of the shutdown drain until settled (nothing in flight, nothing left);
                // the caller's deadline bounds how long that may take. Closed first, so no
                // capture is admitted from here on even when no writer takes the rest.
                state
                    .drain
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .close();
                loop {
                    let Some(writer) = state.writer.clone() else {
                        break;
                    };
                    let mut batch = Vec::with_capacity(INGRESS_BATCH_MAX_EVENTS);
                    let round = state
                        .drain
                        .lock()
                        .unwrap_or_else(|poisoned| poisoned.into_inner())
                        .drain_final(INGRESS_BATCH_MAX_EVENTS, &mut batch);
                    if !batch.is_empty() && !state.deliver(&writer, batch).await {
                        break;
                    }
                    if round.settled {
                        break;
                    }
                    if round.appended == 0 {
                        tokio::task::yield_now().await;
                    }
                }
                let _ = reply.send(());
            }
            IngressMsg::Writer(writer) => {
                state.writer = writer;
                state.drain_all().await;
                state.wake_if_work_waits(&myself);
            }
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // Dropping the ticker's stop sender wakes its thread, which ends at once.
        state.ticker = None;
        Ok(())
    }
}
