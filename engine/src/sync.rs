//! The synchronization facade: `std::sync` normally, `loom::sync` under `--cfg loom`.
//!
//! Hand-written concurrency in annal uses these names only, so the same source that ships is
//! the source `loom-tests` model-checks (it includes those files, and this facade itself).
//!
//! [`BoundedQueue`] is crossbeam's lock-free `ArrayQueue` in a real build. loom cannot see
//! inside crossbeam (its atomics are not loom's), so under `--cfg loom` it is a bounded queue
//! over `loom::sync::Mutex<VecDeque<T>>` with the same `new` / `push` / `pop` / `is_empty` /
//! `len` / `capacity` API. The models therefore check the protocol built on the queue (counters,
//! flags, ordering of markers), taking the queue itself as a correct linearizable FIFO.

#[cfg(loom)]
pub use loom::sync::{Arc, Mutex};
#[cfg(not(loom))]
pub use std::sync::{Arc, Mutex};

/// Atomic flags, integers and orderings (`loom::sync::atomic` under `--cfg loom`).
pub mod atomic {
    #[cfg(loom)]
    pub use loom::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    #[cfg(not(loom))]
    pub use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
}

/// A bounded multi-producer multi-consumer FIFO: crossbeam's lock-free `ArrayQueue`.
#[cfg(not(loom))]
pub use crossbeam_queue::ArrayQueue as BoundedQueue;

/// The loom stand-in for crossbeam's `ArrayQueue`: a FIFO of at most `capacity` items under one
/// loom mutex, so loom explores every interleaving of pushes and pops.
#[cfg(loom)]
#[derive(Debug)]
pub struct BoundedQueue<T> {
    /// The queued items, oldest first; never longer than `capacity`.
    items: Mutex<std::collections::VecDeque<T>>,
    /// The most items the queue holds; a push beyond it is refused.
    capacity: usize,
}

#[cfg(loom)]
impl<T> BoundedQueue<T> {
    /// An empty queue of `capacity` slots.
    ///
    /// # Panics
    /// If `capacity` is 0, exactly as `ArrayQueue::new` does, so both behave alike.
    pub fn new(capacity: usize) -> Self {
        assert!(capacity > 0, "capacity must be non-zero");
        Self {
            items: Mutex::new(std::collections::VecDeque::with_capacity(capacity)),
            capacity,
        }
    }

    fn items(&self) -> loom::sync::MutexGuard<'_, std::collections::VecDeque<T>> {
        self.items
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Appends `value`, or hands it back when the queue is full.
    pub fn push(&self, value: T) -> Result<(), T> {
        let mut items = self.items();
        if items.len() >= self.capacity {
            return Err(value);
        }
        items.push_back(value);
        Ok(())
    }

    /// Removes the oldest item, if any.
    pub fn pop(&self) -> Option<T> {
        self.items().pop_front()
    }

    /// Whether the queue holds no item.
    pub fn is_empty(&self) -> bool {
        self.items().is_empty()
    }

    /// How many items the queue holds.
    pub fn len(&self) -> usize {
        self.items().len()
    }

    /// The most items the queue holds.
    pub fn capacity(&self) -> usize {
        self.capacity
    }
}
