//! Model: the ingress's drain wake-up (`engine/src/capture/wakeup.rs`), as
//! `actors/src/ingress.rs` uses it: the ticker claims (or heals a stuck claim, through its
//! `StallWatch`) and sends when it sees queued items; the ingress releases when it takes a
//! `Drain`, drains, and claims again when items are left.
//!
//! A producer queues items; the ticker claims the wake-up and "sends" a `Drain` when it sees
//! items; the ingress takes a message, releases the wake-up, drains, and claims again to resend
//! when items are left. Under every interleaving: never two messages in flight; and after every
//! thread joined and one more tick, items still queued always have a message pending (a lost
//! wake-up would strand them until... never, if the flag stayed claimed).
//!
//! The control releases the wake-up only after a drain that found items, a plausible slip: a
//! message taken when the queue was already empty leaves the flag claimed for good, and loom
//! must find the interleaving that strands the producer's item.
//!
//! The lost-message model: a sender claims and its `Drain` never arrives (a failed send), while
//! a ticker looks twice and the ingress handles what arrives. Under every interleaving: never
//! three messages in flight (the healed one and at most one more), and once two more looks of
//! the ticker found work, items still queued have a message pending. Its control looks with
//! `try_claim` alone (the wake-up as it was before `StallWatch`): the lost message strands the
//! items for good, and loom must find it.
//!
//! Every write to the flag is a read-modify-write (the claim a compare-exchange), so loom's
//! plain-store-inside-a-swap bug (tokio-rs/loom#254) cannot produce a false report here.
#![cfg(loom)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use annal_loom_tests::drain_wakeup::{DrainWakeup, StallWatch};
use loom::sync::Arc;
use loom::sync::atomic::{AtomicU64, Ordering};
use loom::thread;

/// The model's shared state: the flag, the queue length, the messages in flight.
struct World {
    wakeup: DrainWakeup,
    queued: AtomicU64,
    in_flight: AtomicU64,
}

impl World {
    fn new() -> Self {
        Self {
            wakeup: DrainWakeup::new(),
            queued: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
        }
    }

    /// One sender's attempt: claim, then send.
    fn send(&self) {
        if self.wakeup.try_claim() {
            let before = self.in_flight.fetch_add(1, Ordering::AcqRel);
            assert_eq!(before, 0, "never two Drain messages in flight");
        }
    }

    /// The ticker: a look at the queue.
    fn tick(&self) {
        if self.queued.load(Ordering::Acquire) > 0 {
            self.send();
        }
    }

    /// The ingress handles a message if one is in flight.
    fn handle(&self, release_only_if_drained: bool) {
        if self.in_flight.load(Ordering::Acquire) == 0 {
            return;
        }
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
        if !release_only_if_drained {
            self.wakeup.release();
        }
        let drained = self.queued.swap(0, Ordering::AcqRel);
        if release_only_if_drained && drained > 0 {
            self.wakeup.release();
        }
        if self.queued.load(Ordering::Acquire) > 0 {
            self.send();
        }
    }
}

/// Preemption bound: enough for the control's interleaving (a claim between the drain and the
/// release), small enough to keep the model to seconds.
const PREEMPTIONS: usize = 3;

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(PREEMPTIONS);
    builder.check(f);
}

fn run(release_only_if_drained: bool) {
    let world = Arc::new(World::new());
    let producer = {
        let world = Arc::clone(&world);
        thread::spawn(move || {
            world.queued.fetch_add(1, Ordering::AcqRel);
            world.tick();
            world.queued.fetch_add(1, Ordering::AcqRel);
        })
    };
    let ticker = {
        let world = Arc::clone(&world);
        thread::spawn(move || world.tick())
    };
    let ingress = {
        let world = Arc::clone(&world);
        thread::spawn(move || {
            world.handle(release_only_if_drained);
            world.handle(release_only_if_drained);
        })
    };
    producer.join().unwrap();
    ticker.join().unwrap();
    ingress.join().unwrap();
    // Everything settled; the ticker looks once more.
    world.tick();
    let queued = world.queued.load(Ordering::Acquire);
    let in_flight = world.in_flight.load(Ordering::Acquire);
    assert!(
        queued == 0 || in_flight == 1,
        "items left always have a Drain pending (queued {queued}, in flight {in_flight})"
    );
}

#[test]
fn one_drain_at_most_and_no_wakeup_lost() {
    model(|| run(false));
}

#[test]
#[should_panic(expected = "items left always have a Drain pending")]
fn control_releasing_only_after_a_useful_drain_strands_an_item() {
    model(|| run(true));
}

/// How the lost-message model's looks claim.
#[derive(Clone, Copy)]
enum Look {
    /// As the ticker does: `StallWatch::claim_or_heal`.
    Healing,
    /// The control: `try_claim` alone.
    ClaimOnly,
}

impl World {
    /// One look of a watcher that found `queued` items: claim (or heal) and send.
    fn look(&self, watch: &mut StallWatch, how: Look) {
        if self.queued.load(Ordering::Acquire) == 0 {
            watch.idle();
            return;
        }
        let send = match how {
            Look::Healing => watch.claim_or_heal(&self.wakeup),
            Look::ClaimOnly => self.wakeup.try_claim(),
        };
        if send {
            let before = self.in_flight.fetch_add(1, Ordering::AcqRel);
            assert!(before <= 1, "never three Drain messages in flight");
        }
    }

    /// The ingress handles a message if one is in flight, and claims again when items are left.
    fn take(&self) {
        if self.in_flight.load(Ordering::Acquire) == 0 {
            return;
        }
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
        self.wakeup.release();
        self.queued.swap(0, Ordering::AcqRel);
        if self.queued.load(Ordering::Acquire) > 0 && self.wakeup.try_claim() {
            self.in_flight.fetch_add(1, Ordering::AcqRel);
        }
    }
}

fn run_lost(how: Look) {
    let world = Arc::new(World::new());
    let loser = {
        let world = Arc::clone(&world);
        thread::spawn(move || {
            world.queued.fetch_add(1, Ordering::AcqRel);
            // Claimed, and the message is lost: nothing is put in flight.
            let _ = world.wakeup.try_claim();
        })
    };
    let ticker = {
        let world = Arc::clone(&world);
        thread::spawn(move || {
            let mut watch = StallWatch::new();
            world.look(&mut watch, how);
            world.look(&mut watch, how);
            watch
        })
    };
    let ingress = {
        let world = Arc::clone(&world);
        thread::spawn(move || {
            world.take();
            world.take();
        })
    };
    loser.join().unwrap();
    let mut watch = ticker.join().unwrap();
    ingress.join().unwrap();
    // Everything settled; the ticker looks twice more.
    world.look(&mut watch, how);
    world.look(&mut watch, how);
    let queued = world.queued.load(Ordering::Acquire);
    let in_flight = world.in_flight.load(Ordering::Acquire);
    assert!(
        queued == 0 || in_flight >= 1,
        "items left always have a Drain pending (queued {queued}, in flight {in_flight})"
    );
}

#[test]
fn a_lost_drain_is_sent_again_and_never_three_are_in_flight() {
    model(|| run_lost(Look::Healing));
}

#[test]
#[should_panic(expected = "items left always have a Drain pending")]
fn control_claiming_without_healing_strands_the_items_of_a_lost_drain() {
    model(|| run_lost(Look::ClaimOnly));
}
