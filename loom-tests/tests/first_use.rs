//! Model: concurrent first use of a namespace key.
//!
//! Two or three threads race to load-or-create the same key in a shared model credential
//! store. Under every interleaving loom explores, exactly one key is created, every caller gets
//! that key, and the store ends up holding it.
#![cfg(loom)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use annal_loom_tests::first_use::load_or_create;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::{Arc, Mutex};
use loom::thread;

/// A credential store: one slot, no "create if absent".
#[derive(Default)]
struct ModelStore {
    /// The stored key, if any.
    slot: Mutex<Option<u64>>,
    /// How many keys were written.
    creates: AtomicUsize,
}

impl ModelStore {
    fn read(&self) -> Option<u64> {
        *self.slot.lock().unwrap()
    }

    fn write(&self, key: u64) -> u64 {
        self.creates.fetch_add(1, Ordering::SeqCst);
        *self.slot.lock().unwrap() = Some(key);
        key
    }
}

fn race(threads: u64) {
    loom::model(move || {
        let store = Arc::new(ModelStore::default());
        let lock = Arc::new(annal_loom_tests::sync::Mutex::new(()));
        let handles: Vec<_> = (0..threads)
            .map(|id| {
                let (store, lock) = (store.clone(), lock.clone());
                thread::spawn(move || {
                    load_or_create::<u64, ()>(
                        &lock,
                        || Ok(store.read()),
                        || Ok(store.write(1000 + id)),
                    )
                    .unwrap()
                })
            })
            .collect();
        let results: Vec<(u64, bool)> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        assert_eq!(
            store.creates.load(Ordering::SeqCst),
            1,
            "exactly one key is created"
        );
        let stored = store.read().unwrap();
        assert!(
            results.iter().all(|(key, _)| *key == stored),
            "everyone uses the stored key"
        );
        assert_eq!(results.iter().filter(|(_, created)| *created).count(), 1);
    });
}

#[test]
fn two_concurrent_first_uses_create_one_key() {
    race(2);
}

#[test]
fn three_concurrent_first_uses_create_one_key() {
    race(3);
}

/// Control: the same race without the lock. loom must find the interleaving where both threads
/// see no key and both create one; if it did not, the models above would prove nothing.
#[test]
#[should_panic(expected = "exactly one key is created")]
fn without_the_lock_loom_finds_the_double_create() {
    loom::model(|| {
        let store = Arc::new(ModelStore::default());
        let handles: Vec<_> = (0..2u64)
            .map(|id| {
                let store = store.clone();
                thread::spawn(move || match store.read() {
                    Some(existing) => existing,
                    None => store.write(1000 + id),
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(
            store.creates.load(Ordering::SeqCst),
            1,
            "exactly one key is created"
        );
    });
}
