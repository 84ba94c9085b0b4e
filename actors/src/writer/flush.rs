//! The writer's syncs: the owner's or embedder's `flush` (`WriterMsg::Flush`: the contract's
//! `control` flush event while history is open for writing, then the sync), the group commit
//! and its tick, and the in-flight bound (`history::State::must_sync_first`): the writer never
//! hands out a sequence more than `IN_FLIGHT_SEQUENCES_MAX` above what is certainly durable, so
//! a crash followed by another boot skips at most that many (`docs/design.md`, "No gap without
//! a cause").

use annal_engine::history;
use annal_engine::journal::CallerKind;
use annal_schema::ControlOperation;
use annal_schema::tools::StatusResponse;

use super::{ControlError, WriterMsg, WriterState};

impl WriterState {
    /// `WriterMsg::Flush`: the control operation when the writer is open (the rules decide
    /// whether history is open for writing; `Refused` means it is not, and there is nothing to
    /// record), else, or then, the sync.
    pub(super) async fn flush(&mut self) -> Result<StatusResponse, ControlError> {
        if self.open.is_some() {
            match self
                .control(ControlOperation::Flush, CallerKind::Embedder)
                .await
            {
                Err(ControlError::Refused) => {}
                answered => return answered,
            }
        }
        self.sync()?;
        Ok(self.status().await)
    }

    /// Group commit: syncs what was appended. A failed sync is a signal (never retried), and
    /// what it covered is reported as dropped.
    pub(super) fn sync(&mut self) -> Result<(), ControlError> {
        let Some(open) = self.open.as_mut() else {
            return Ok(());
        };
        if open.unsynced_since.take().is_none() {
            return Ok(());
        }
        // The fdatasync blocks: the worker thread is handed over to the runtime's other work
        // meanwhile (the engine's runtime is multi-threaded), as the journal's group commit
        // does, so tool calls and the journal's commits go on beside a history sync.
        let before = open.history.durable_through().map_or(0, |s| s.get());
        let _span = crate::telemetry::span::writer_sync().entered();
        match tokio::task::block_in_place(|| open.history.sync()) {
            Ok(durable) => {
                let after = durable.map_or(0, |s| s.get());
                self.config
                    .telemetry
                    .made_durable(after.saturating_sub(before));
                Ok(())
            }
            Err(error) => {
                // What the failed sync covered can never be acknowledged and, after a failed
                // fsync, is most likely gone: it is reported as dropped, never lost silently.
                self.records_lost_to(&error);
                self.append_failed(&error);
                Err(ControlError::Storage)
            }
        }
    }

    /// Arms the group-commit tick to fire `after` from now.
    pub(super) fn arm_tick(&mut self, after: std::time::Duration) {
        self.tick_armed = true;
        self.myself.send_after(after, || WriterMsg::Tick);
    }

    /// The group-commit tick: syncs once the oldest unsynced record is `sync_interval` old;
    /// if a flush synced since the tick was armed, re-arms it for the younger records' own
    /// deadline. Whether everything appended is synced now.
    pub(super) fn commit_tick(&mut self) -> bool {
        self.tick_armed = false;
        let age = self
            .open
            .as_ref()
            .and_then(|open| open.unsynced_since)
            .map(|since| since.elapsed());
        match history::commit_tick(age, self.config.sync_interval) {
            history::Tick::Synced => true,
            history::Tick::Rearm(left) => {
                self.arm_tick(left);
                false
            }
            history::Tick::Sync => self.sync().is_ok(),
        }
    }

    /// What is certainly durable or journaled lost, as far as the in-flight bound counts: the
    /// history writer's last sync or its floor at open, or a lost range the journal holds
    /// durably.
    fn in_flight_base(&self) -> u64 {
        let synced = self
            .open
            .as_ref()
            .and_then(|open| open.history.durable_base())
            .map_or(0, |s| s.get());
        synced.max(self.lost_durable_through)
    }

    /// Keeps the in-flight bound before `plan` is appended: a sync first when the batch would
    /// run too far ahead; if that is not enough (a failed sync's records were lost, so the
    /// last sync stays behind), the journal is made durable, so the lost range it holds counts.
    /// Whether the batch may be appended (if not, it is counted lost by the caller).
    pub(super) async fn keep_in_flight_bound(&mut self, plan: &history::AppendPlan) -> bool {
        if !history::State::must_sync_first(plan, self.in_flight_base()) {
            return true;
        }
        let _ = self.sync();
        if !history::State::must_sync_first(plan, self.in_flight_base()) {
            return true;
        }
        if self.journal(Vec::new(), true).await.is_ok() {
            self.lost_durable_through = self.rules.projection.accounted_through(u64::MAX);
        }
        !history::State::must_sync_first(plan, self.in_flight_base())
    }
}
