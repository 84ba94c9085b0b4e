//! Whether capture admits new events, the quota, retention and the group-commit tick.
//!
//! Capture admits while the embedder admitted it, the owner enabled and did not pause it, a
//! history writer is open (its key loaded), something drains the queue, and the store is
//! below its quota. A storage fault does not close capture: it keeps admitting, the writer
//! keeps trying, and what cannot be written is counted as dropped until the disk recovers.
//!
//! At the quota capture stops (`quota_reached`); it resumes once the quota is raised or,
//! with `evict_oldest`, once eviction made room (pruning runs before the check). Reads,
//! control and access records still go through: they are the headroom above the quota.

use std::time::Duration;

use super::{Effect, State};
use crate::health::SignalKind;
use crate::journal::OnQuota;
use crate::query::RetentionCutoff;
use crate::store::Eviction;

/// What the group-commit tick does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tick {
    /// Everything appended is synced already: nothing to do.
    Synced,
    /// The oldest unsynced record is `sync_interval` old: sync now.
    Sync,
    /// A flush synced since the tick was armed: arm it again for the younger records' own
    /// deadline, this far from now.
    Rearm(Duration),
}

/// The group-commit tick, when the oldest record not yet synced is `unsynced_age` old (`None`:
/// all synced) and records are synced `sync_interval` after they are appended.
pub fn commit_tick(unsynced_age: Option<Duration>, sync_interval: Duration) -> Tick {
    let Some(age) = unsynced_age else {
        return Tick::Synced;
    };
    match sync_interval.checked_sub(age) {
        Some(left) if !left.is_zero() => Tick::Rearm(left),
        _ => Tick::Sync,
    }
}

impl State {
    /// Whether the embedder admitted capture (`EngineConfig::admitted`) and something drains
    /// the queue; both stay for the writer's life unless [`State::undrained`].
    pub fn admit(&mut self, admitted: bool, drained: bool) {
        self.admitted = admitted;
        self.undrained = !drained;
    }

    /// Nothing will drain the capture queue for the rest of the engine's life: capture closes
    /// and is never opened again.
    pub fn undrained(&mut self) {
        self.undrained = true;
    }

    /// Whether capture may admit new events now.
    pub fn accepting(&self) -> bool {
        !self.undrained
            && self.admitted
            && self.projection.enabled
            && !self.projection.paused
            && self.open
            && !self.at_quota
    }

    /// Whether the store is at its quota, as last checked.
    pub fn at_quota(&self) -> bool {
        self.at_quota
    }

    /// Compares `used_bytes` (history and journal chunks) with the quota: the signal when that
    /// changes (`quota_reached`, `quota_cleared`). A writer that is not open is never at it.
    pub fn check_quota(&mut self, used_bytes: u64) -> Option<Effect> {
        let at = self.open && used_bytes >= self.projection.quota_bytes;
        if at == self.at_quota {
            return None;
        }
        self.at_quota = at;
        Some(Effect::Signal(if at {
            SignalKind::QuotaReached
        } else {
            SignalKind::QuotaCleared
        }))
    }

    /// The store's use against its quota, when the owner chose `evict_oldest` (what pruning
    /// may evict); `None` under `stop_capture`.
    pub fn eviction(&self, used_bytes: u64) -> Option<Eviction> {
        (self.projection.on_quota == OnQuota::EvictOldest).then_some(Eviction {
            used_bytes,
            quota_bytes: self.projection.quota_bytes,
        })
    }

    /// The oldest event time a query may return at `now`: what physical retention prunes
    /// below.
    pub fn retention_cutoff(&self, now: Duration) -> RetentionCutoff {
        RetentionCutoff::new(now, self.projection.retention_days)
    }

    /// The chunk size limit the store's quota allows
    /// (`store::chunk_size_limit_for_quota`).
    pub fn chunk_size_limit_bytes(&self) -> u64 {
        crate::store::chunk_size_limit_for_quota(self.projection.quota_bytes)
    }
}
