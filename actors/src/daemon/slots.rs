//! The daemon's connection slots: which connections are pending (accepted, first frame not
//! complete yet) and which are served (with their class, the owner's or another's, and since
//! when they are idle); the rules that admit, reserve and reclaim them
//! (`MAX_CONNECTIONS`, `OWNER_RESERVED_CONNECTIONS`, `MAX_PENDING_CONNECTIONS`,
//! `RECLAIM_IDLE_AFTER_MS`); and how a connection's first request marks it as the owner's.
//! Locked only for bookkeeping, never across an await.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::protocol::Request;
use super::server::{
    MAX_CONNECTIONS, MAX_PENDING_CONNECTIONS, OWNER_RESERVED_CONNECTIONS, RECLAIM_IDLE_AFTER_MS,
};

/// Whether `request`, as a connection's first, marks it as the owner's: one of the operations
/// the `annal` CLI sends (control, settings, the owner's read, grants and manifests, stop). An
/// agent bridge starts with `tools_for` or `call_tool` (with `--manifest`, with
/// `approve_manifest`: then it counts as the owner's), a capture driver with `hello` or a capture
/// request.
pub fn is_owner_operation(request: &Request) -> bool {
    !matches!(
        request,
        Request::Hello {}
            | Request::ToolsFor { .. }
            | Request::CallTool { .. }
            | Request::Preflight { .. }
            | Request::SessionStarted { .. }
            | Request::SessionEnded { .. }
            | Request::ActionStarted { .. }
            | Request::ActionCompleted { .. }
    )
}

/// The connections' slots: pending ones in accept order, served ones with their class and since
/// when they have been idle. Locked only for bookkeeping, never across an await.
#[derive(Default)]
pub(super) struct Registry {
    /// The slots.
    slots: Mutex<Slots>,
}

#[derive(Default)]
pub(super) struct Slots {
    /// The next connection's id (accept order).
    next_id: u64,
    /// Connections that have not completed a first frame, oldest first.
    pending: BTreeMap<u64, Arc<Notify>>,
    /// Connections that have.
    served: HashMap<u64, Served>,
}

pub(super) struct Served {
    /// Its first request was an owner's operation.
    owner: bool,
    /// Since when it has waited for a frame with none begun; `None` while it reads or answers.
    idle_since: Option<Instant>,
    /// Closes it.
    pub(super) close: Arc<Notify>,
}

/// One connection's place in the [`Registry`]; given back when dropped.
pub(super) struct Slot {
    /// Its id.
    id: u64,
    /// Where it is registered.
    registry: Arc<Registry>,
    /// Signalled when the daemon closes it (displaced while pending, or reclaimed while idle).
    pub(super) close: Arc<Notify>,
}

impl Registry {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, Slots> {
        // The bookkeeping is consistent after every statement: a panic elsewhere leaves it usable.
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A new pending connection's slot; at the bound, the oldest pending one is closed.
    pub(super) fn pending(registry: &Arc<Self>) -> Slot {
        let close = Arc::new(Notify::new());
        let mut slots = registry.lock();
        if slots.pending.len() >= MAX_PENDING_CONNECTIONS
            && let Some((_, oldest)) = slots.pending.pop_first()
        {
            oldest.notify_one();
        }
        let id = slots.next_id;
        slots.next_id += 1;
        slots.pending.insert(id, Arc::clone(&close));
        drop(slots);
        Slot {
            id,
            registry: Arc::clone(registry),
            close,
        }
    }
}

impl Slot {
    /// Moves this pending connection to a served slot (reclaiming an idle one if none is free);
    /// `false` when it gets none, or was displaced meanwhile.
    pub(super) fn admit(&self, owner: bool) -> bool {
        let mut slots = self.registry.lock();
        if slots.pending.remove(&self.id).is_none() {
            return false;
        }
        let others = slots.served.values().filter(|s| !s.owner).count();
        let total_full = slots.served.len() >= MAX_CONNECTIONS;
        let share_full = !owner && others >= MAX_CONNECTIONS - OWNER_RESERVED_CONNECTIONS;
        if total_full || share_full {
            let now = Instant::now();
            let min_idle = if owner {
                Duration::ZERO
            } else {
                Duration::from_millis(RECLAIM_IDLE_AFTER_MS)
            };
            let victim = slots
                .served
                .iter()
                .filter(|(_, s)| !(share_full && s.owner))
                .filter_map(|(id, s)| s.idle_since.map(|since| (*id, since)))
                .filter(|(_, since)| now.saturating_duration_since(*since) >= min_idle)
                .min_by_key(|(_, since)| *since)
                .map(|(id, _)| id);
            let Some(victim) = victim else {
                return false;
            };
            if let Some(reclaimed) = slots.served.remove(&victim) {
                reclaimed.close.notify_one();
            }
        }
        slots.served.insert(
            self.id,
            Served {
                owner,
                idle_since: None,
                close: Arc::clone(&self.close),
            },
        );
        true
    }

    /// This served connection now waits for a frame with none begun (it may be reclaimed).
    pub(super) fn idle(&self) {
        if let Some(served) = self.registry.lock().served.get_mut(&self.id) {
            served.idle_since = Some(Instant::now());
        }
    }

    /// A frame began: no longer idle. `false` when it was reclaimed meanwhile.
    pub(super) fn busy(&self) -> bool {
        match self.registry.lock().served.get_mut(&self.id) {
            Some(served) => {
                served.idle_since = None;
                true
            }
            None => false,
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut slots = self.registry.lock();
        slots.pending.remove(&self.id);
        slots.served.remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` connections admitted as `owner` or not, each idle since `idle_for` ago.
    fn served(registry: &Arc<Registry>, n: usize, owner: bool, idle_for: Duration) -> Vec<Slot> {
        (0..n)
            .map(|_| {
                let slot = Registry::pending(registry);
                assert!(slot.admit(owner));
                slot.idle();
                let since = Instant::now()
                    .checked_sub(idle_for)
                    .unwrap_or_else(Instant::now);
                if let Some(s) = registry.lock().served.get_mut(&slot.id) {
                    s.idle_since = Some(since);
                }
                slot
            })
            .collect()
    }

    fn is_served(registry: &Registry, slot: &Slot) -> bool {
        registry.lock().served.contains_key(&slot.id)
    }

    #[test]
    fn the_owner_gets_a_reserved_slot_then_reclaims_an_idle_one() {
        let registry = Arc::new(Registry::default());
        let others = served(
            &registry,
            MAX_CONNECTIONS - OWNER_RESERVED_CONNECTIONS,
            false,
            Duration::ZERO,
        );
        // Another client: none has been idle long enough to reclaim.
        let refused = Registry::pending(&registry);
        assert!(!refused.admit(false));
        assert!(!is_served(&registry, &refused));
        // The owner: the reserved slots, without closing anyone.
        let owners = served(&registry, OWNER_RESERVED_CONNECTIONS, true, Duration::ZERO);
        assert!(
            others
                .iter()
                .chain(&owners)
                .all(|s| is_served(&registry, s))
        );
        // Full: the owner reclaims the connection idle longest (the first one).
        let owner = Registry::pending(&registry);
        assert!(owner.admit(true));
        assert!(!is_served(&registry, &others[0]));
        assert_eq!(registry.lock().served.len(), MAX_CONNECTIONS);
        // The reclaimed one, woken with a frame begun, finds it was: it is not served again.
        assert!(!others[0].busy());
    }

    #[test]
    fn others_reclaim_only_connections_idle_long_enough_and_never_busy_ones() {
        let registry = Arc::new(Registry::default());
        let long = Duration::from_millis(RECLAIM_IDLE_AFTER_MS * 2);
        let mut held = served(&registry, 1, false, long);
        held.extend(served(
            &registry,
            MAX_CONNECTIONS - OWNER_RESERVED_CONNECTIONS - 1,
            false,
            Duration::ZERO,
        ));
        let driver = Registry::pending(&registry);
        assert!(driver.admit(false), "the long-idle one is reclaimed");
        assert!(!is_served(&registry, &held[0]));
        // Busy connections (a frame begun, or a request being answered) are never reclaimed,
        // not even for the owner.
        for slot in held.iter().skip(1).chain([&driver]) {
            assert!(slot.busy());
        }
        let owners = served(&registry, OWNER_RESERVED_CONNECTIONS, true, Duration::ZERO);
        for slot in &owners {
            assert!(slot.busy());
        }
        let late = Registry::pending(&registry);
        assert!(!late.admit(true));
        // Given back when dropped: a slot is free again.
        drop(held);
        let again = Registry::pending(&registry);
        assert!(again.admit(false));
    }

    #[test]
    fn the_oldest_pending_connection_is_displaced_at_the_bound() {
        let registry = Arc::new(Registry::default());
        let pending: Vec<Slot> = (0..MAX_PENDING_CONNECTIONS)
            .map(|_| Registry::pending(&registry))
            .collect();
        let newest = Registry::pending(&registry);
        assert_eq!(registry.lock().pending.len(), MAX_PENDING_CONNECTIONS);
        assert!(!pending[0].admit(true), "displaced: it gets no slot");
        assert!(pending[1].admit(true));
        assert!(newest.admit(false));
    }
}
