//! Reusable shared slots, so an admitted capture call allocates nothing.
//!
//! An action's start and its token both hold the action's context, so it lives behind an `Arc`.
//! Allocating that `Arc` per start was the capture hook's one `malloc`, and the costly kind: the
//! writer frees the block on another thread, so the producer's allocator cache never refills and
//! each `malloc` takes glibc's locked arena path (docs/benchmarks.md). A [`SlotPool`] keeps
//! emptied slots instead: the consumer hands a slot back once it holds the last reference, and the
//! next start refills it in place.
//!
//! Exclusive access is `Arc::get_mut`'s: a slot is refilled or emptied only through a `&mut` that
//! the standard library grants to the unique holder (strong count 1, no weak pointer; the check
//! acquires, so every write of an earlier holder is visible). The free list is the facade's
//! [`BoundedQueue`]. A slot the pool cannot take back (the list is full, or another holder is
//! left) is simply freed; a start that finds the list empty allocates. So the pool changes how
//! often `malloc` runs, never what is captured.
//!
//! The last two holders of a slot may let go at the same moment on two threads (a token dropped
//! while the consumer releases its start): both may then see the other and neither returns the
//! slot, which is freed instead. That costs one allocation later, nothing else. A completed
//! action has no such race: the completion carries the token's reference into the queue, so the
//! consumer releases both references itself, in order, and the second always returns the slot.
//!
//! This file uses only `crate::sync` names: `loom-tests` includes it verbatim and model-checks
//! it (`loom-tests/tests/slot_pool.rs`).

use crate::sync::{Arc, BoundedQueue};

/// Emptied slots kept for reuse, each the only reference to its `Arc`.
///
/// Two free lists, because both lists are FIFO: a single large one would hand out the slot
/// emptied longest ago, so a steady trickle of actions would cycle through every slot, each one's
/// cache lines and page long evicted by then. The small `recent` list is refilled first and
/// handed out first, so a steady trickle cycles through a handful of slots whose lines are likely
/// still cached; the large `spare` list only serves bursts.
#[derive(Debug)]
pub struct SlotPool<T> {
    /// The most recently emptied slots, at most a handful: handed out first.
    recent: BoundedQueue<Arc<T>>,
    /// Free slots beyond those, for bursts: handed out when `recent` runs dry.
    spare: BoundedQueue<Arc<T>>,
}

impl<T> SlotPool<T> {
    /// A pool of `recent_slots` + `spare_slots` slots made by `empty` (so the first that many
    /// acquisitions allocate nothing either), taking back at most that many.
    ///
    /// # Panics
    /// If either count is 0, as the queue does.
    pub fn new(recent_slots: usize, spare_slots: usize, empty: impl Fn() -> T) -> Self {
        let fill = |slots| {
            let free = BoundedQueue::new(slots);
            for _ in 0..slots {
                let _full = free.push(Arc::new(empty()));
            }
            free
        };
        Self {
            recent: fill(recent_slots),
            spare: fill(spare_slots),
        }
    }

    /// A slot holding `value`: a free slot refilled by `refill` (it gets the slot's emptied
    /// contents), or, when none is free, a new slot made by `make`.
    pub fn acquire<V>(
        &self,
        value: V,
        refill: impl FnOnce(&mut T, V),
        make: impl FnOnce(V) -> T,
    ) -> Arc<T> {
        if let Some(mut slot) = self.recent.pop().or_else(|| self.spare.pop())
            && let Some(contents) = Arc::get_mut(&mut slot)
        {
            refill(contents, value);
            return slot;
        }
        Arc::new(make(value))
    }

    /// Lets go of `slot`. When the caller held the last reference, `empty` takes what it needs
    /// out of the slot and the slot goes back to a free list (or is freed if both are
    /// full); otherwise another holder keeps the slot, and `read` answers from a shared view.
    pub fn release<R>(
        &self,
        mut slot: Arc<T>,
        empty: impl FnOnce(&mut T) -> R,
        read: impl FnOnce(&T) -> R,
    ) -> R {
        match Arc::get_mut(&mut slot) {
            Some(contents) => {
                let taken = empty(contents);
                if let Err(slot) = self.recent.push(slot) {
                    let _full = self.spare.push(slot);
                }
                taken
            }
            None => read(&slot),
        }
    }

    /// How many free slots the pool holds now.
    pub fn free_slots(&self) -> usize {
        self.recent.len() + self.spare.len()
    }
}
