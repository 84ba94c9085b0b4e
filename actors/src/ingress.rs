//! The Ingress actor: drains the capture queue into the writer in batches.
//!
//! The capture path never wakes anyone, so this side notices new events by itself: every
//! `drain_tick` it takes up to [`INGRESS_BATCH_MAX_EVENTS`] items and casts them to the writer in
//! one batch; a full batch is followed at once by another drain. While no writer is running (a
//! restart), nothing is drained: the queue fills and capture counts drops, which the next writer
//! reports.

use std::sync::{Arc, Mutex};

use annal_engine::capture::{CaptureDrain, Captured, Drained};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};

use crate::writer::WriterMsg;

/// Most items drained into one batch. Bounds one message to the writer (and one append).
pub const INGRESS_BATCH_MAX_EVENTS: usize = 1024;

/// What the ingress can be asked.
pub enum IngressMsg {
    /// Drain what is queued (the periodic tick, or a follow-up after a full batch).
    Drain,
    /// Drain everything queued now, then reply (flush and shutdown go through here, so the
    /// writer receives every batch before the request that follows).
    DrainNow {
        /// Replies once every queued item was handed to the writer.
        reply: RpcReplyPort<()>,
    },
    /// Close the queue (no capture is admitted after), drain it to the end, then reply.
    Close {
        /// Replies once the queue is empty and closed.
        reply: RpcReplyPort<()>,
    },
    /// The writer to hand batches to (after a start or restart).
    Writer(Option<ActorRef<WriterMsg>>),
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
    /// A batch the writer did not take (it stopped between ticks), handed to the next writer
    /// first.
    stranded: Option<Vec<Drained<Captured>>>,
}

/// What the ingress starts with.
pub struct IngressArgs {
    /// The capture queue's consumer side.
    pub drain: Arc<Mutex<CaptureDrain>>,
    /// How often to look at the queue.
    pub tick: std::time::Duration,
}

/// The Ingress actor.
pub struct IngressActor;

impl IngressState {
    /// Drains one batch to the writer; returns whether the batch was full.
    fn drain_once(&mut self) -> bool {
        let Some(writer) = self.writer.clone() else {
            return false;
        };
        if let Some(stranded) = self.stranded.take()
            && let Err(ractor::MessagingErr::SendErr(WriterMsg::Batch(batch))) =
                writer.cast(WriterMsg::Batch(stranded))
        {
            self.stranded = Some(batch);
            self.writer = None;
            return false;
        }
        self.batch.clear();
        let taken = {
            let mut drain = self
                .drain
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            drain.drain(INGRESS_BATCH_MAX_EVENTS, &mut self.batch)
        };
        if self.batch.is_empty() {
            return false;
        }
        let batch = std::mem::replace(
            &mut self.batch,
            Vec::with_capacity(INGRESS_BATCH_MAX_EVENTS),
        );
        if let Err(ractor::MessagingErr::SendErr(WriterMsg::Batch(batch))) =
            writer.cast(WriterMsg::Batch(batch))
        {
            // The writer stopped since it was handed over: keep the batch for the next one.
            self.stranded = Some(batch);
            self.writer = None;
            return false;
        }
        taken >= INGRESS_BATCH_MAX_EVENTS
    }

    fn drain_all(&mut self) {
        while self.drain_once() {}
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
        myself.send_interval(args.tick, || IngressMsg::Drain);
        Ok(IngressState {
            drain: args.drain,
            writer: None,
            batch: Vec::with_capacity(INGRESS_BATCH_MAX_EVENTS),
            stranded: None,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            IngressMsg::Drain => {
                if state.drain_once() {
                    let _ = myself.cast(IngressMsg::Drain);
                }
            }
            IngressMsg::DrainNow { reply } => {
                state.drain_all();
                let _ = reply.send(());
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
                    if !batch.is_empty() && writer.cast(WriterMsg::Batch(batch)).is_err() {
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
                state.drain_all();
            }
        }
        Ok(())
    }
}
