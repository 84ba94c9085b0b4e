//! Model: the capture hook's context pool (`engine/src/capture/pool.rs`).
//!
//! A producer acquires a slot per action and queues one reference (the start); a consumer thread
//! drains the queue and releases each reference as the writer does. The producer's own reference
//! (the token) either goes into the queue too (the completion) or is dropped on the producer's
//! thread while the consumer may be releasing the start. Under every interleaving loom explores:
//! - every release returns the action's own value;
//! - a slot is emptied at most once per action, and a slot refilled for a new action is always
//!   empty (no slot reaches the pool while another reference to it is left);
//! - completed actions: the consumer releases both references, so the second release always
//!   empties the slot and returns it: the pool ends full;
//! - dropped tokens: a token dropped while the consumer releases its start may leave both sides
//!   seeing another holder; then the slot is freed rather than returned (the next acquisition
//!   allocates), and nothing else differs.
//!
//! Exclusive access itself is `Arc::get_mut`'s (loom models its synchronization); what this
//! checks is the protocol the pool builds on it.
#![cfg(loom)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use annal_loom_tests::slot_pool::SlotPool;
use annal_loom_tests::sync::BoundedQueue;
use loom::sync::Arc;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::thread;

/// Preemption bound, as in the other capture models.
const PREEMPTIONS: usize = 3;

/// Actions the producer starts, one after another.
const ACTIONS: usize = 2;

/// One pool slot: the action's value while in use, `None` while free.
#[derive(Debug, Default)]
struct Slot {
    value: Option<usize>,
}

/// Takes one reference to a slot out of play as the writer does: returns its value, and counts
/// an emptying.
fn release(pool: &SlotPool<Slot>, slot: Arc<Slot>, emptied: &AtomicUsize) -> Option<usize> {
    pool.release(
        slot,
        |s| {
            emptied.fetch_add(1, Ordering::Relaxed);
            s.value.take()
        },
        |s| s.value,
    )
}

/// A slot for `action`, checking that a reused one was emptied first.
fn acquire(pool: &SlotPool<Slot>, action: usize) -> Arc<Slot> {
    pool.acquire(
        action,
        |slot, value| {
            assert_eq!(slot.value, None, "a slot refilled before it was emptied");
            slot.value = Some(value);
        },
        |value| Slot { value: Some(value) },
    )
}

/// What happens to the producer's own reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    /// Queued behind the start, as `action_completed` does.
    Completed,
    /// Dropped on the producer's thread.
    Dropped,
}

/// One model run on a pool of one recent and one spare slot: [`ACTIONS`] actions, each token
/// handled as `token` says. Returns how many slots the pool holds at the end and how many
/// emptyings happened.
fn run(token: Token) -> (usize, usize) {
    let pool = Arc::new(SlotPool::new(1, 1, Slot::default));
    let queue = Arc::new(BoundedQueue::new(2 * ACTIONS));
    let emptied = Arc::new(AtomicUsize::new(0));
    let expected = match token {
        Token::Completed => 2 * ACTIONS,
        Token::Dropped => ACTIONS,
    };

    let consumer = {
        let (pool, queue, emptied) = (pool.clone(), queue.clone(), emptied.clone());
        thread::spawn(move || {
            let mut seen = 0;
            while seen < expected {
                match queue.pop() {
                    Some((action, slot)) => {
                        assert_eq!(release(&pool, slot, &emptied), Some(action));
                        seen += 1;
                    }
                    None => thread::yield_now(),
                }
            }
        })
    };

    for action in 0..ACTIONS {
        let slot = acquire(&pool, action);
        queue.push((action, slot.clone())).unwrap();
        match token {
            Token::Completed => queue.push((action, slot)).unwrap(),
            Token::Dropped => drop(slot),
        }
    }
    consumer.join().unwrap();
    (pool.free_slots(), emptied.load(Ordering::Relaxed))
}

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(PREEMPTIONS);
    builder.check(f);
}

#[test]
fn a_completed_actions_slot_is_emptied_once_by_its_second_release_and_comes_back() {
    model(|| {
        let (free, emptied) = run(Token::Completed);
        assert_eq!(emptied, ACTIONS, "exactly one emptying per action");
        assert_eq!(free, 2, "every slot went back to the pool");
    });
}

#[test]
fn a_dropped_token_never_lets_a_held_slot_into_the_pool() {
    model(|| {
        let (free, emptied) = run(Token::Dropped);
        assert!(emptied <= ACTIONS, "an action emptied twice");
        assert!(free <= 2);
    });
}
