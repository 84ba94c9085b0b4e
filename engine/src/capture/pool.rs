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
#[derive(Debug)]
pub struct SlotPool<T> {
    /// Free slots, ready to be refilled; every one is unique (strong count 1).
    free: BoundedQueue<Arc<T>>,
}

impl<T> SlotPool<T> {
    /// A pool holding `capacity_slots` slots made by `empty` (so the first `capacity_slots`
    /// acquisitions allocate nothing either), and taking back at most that many.
    ///
    /// # Panics
    /// If `capacity_slots` is 0, as the queue does.
    pub fn new(capacity_slots: usize, empty: impl Fn() -> T) -> Self {
        let free = BoundedQueue::new(capacity_slots);
        for _ in 0..capacity_slots {
            let _full = free.push(Arc::new(empty()));
        }
        Self { free }
    }

    /// A slot holding `value`: a free slot refilled by `refill` (it gets the slot's emptied
    /// contents), or, when none is free, a new slot made by `make`.
    pub fn acquire<V>(
        &self,
        value: V,
        refill: impl FnOnce(&mut T, V),
        make: impl FnOnce(V) -> T,
    ) -> Arc<T> {
        if let Some(mut slot) = self.free.pop()
            && let Some(contents) = Arc::get_mut(&mut slot)
        {
            refill(contents, value);
            return slot;
        }
        Arc::new(make(value))
    }

    /// Lets go of `slot`. When the caller held the last reference, `empty` takes what it needs
    /// out of the slot and the slot goes back to the free list (or is freed if the list is
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
                let _full = self.free.push(slot);
                taken
            }
            None => read(&slot),
        }
    }

    /// How many free slots the pool holds now.
    pub fn free_slots(&self) -> usize {
        self.free.len()
    }
}
