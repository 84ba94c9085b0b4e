//! The writer's open: the store, the key, the journal's projection and the history writer
//! above its sequence floor; then what the rules say of a crash's leftovers
//! (`history::tears_to_record`, `history::leftovers_to_seal`, the reservation it left:
//! `history::State::recover_sequences` after a crash in this boot, else
//! `history::State::record_skip`)
//! and of the contract's on/off state (`history::State::observe_contract`). And the release of
//! the reservation at a clean stop.

use std::sync::Arc;

use annal_engine::health::SignalKind;
use annal_engine::history;
use annal_engine::journal::JournalEvent;
use annal_engine::keys::KeyError;
use annal_engine::storage::Access;
use annal_engine::store::{
    ControlRead, History, OpenState, StoreWriter, WriterConfig, create_or_adopt_store, open_store,
    read_state_mirror,
};
use annal_schema::{HealthCategory, Payload, Sequence};

use super::prune::StoreBytes;
use super::{CHILD_CALL_DEADLINE_MS, ControlError, Open, WriterState};
use crate::journal::JournalMsg;
use crate::key_custody::KeyCustodyMsg;

impl WriterState {
    /// Opens the store (creating it when `create`), loads the key (creating it when `create`),
    /// opens the journal (which replays its projection) and the history writer above the
    /// journal's sequence floor. Key and storage failures become signals.
    pub(super) async fn open_writers(&mut self, create: bool) -> Result<(), ControlError> {
        if self.open.is_some() {
            return Ok(());
        }
        if self.storage.get().is_none() {
            // The owner's enable creates the store, or adopts one the reference created.
            if create && create_or_adopt_store(&self.config.layout).is_err() {
                return Err(self.storage_fault(HealthCategory::StorageUnavailable));
            }
            match open_store(&self.config.layout, Access::Write) {
                Ok(storage) => {
                    let _ = self.storage.set(Arc::new(storage));
                }
                // No store: history is off. A store that exists and cannot be opened (locked,
                // permissions, I/O) is a storage failure, never "off".
                Err(error) if !create && error.is_absent() => return Ok(()),
                Err(_) => return Err(self.storage_fault(HealthCategory::StorageUnavailable)),
            }
        }
        let Some(storage) = self.storage.get().cloned() else {
            return Ok(());
        };
        let keys = match ractor::call_t!(
            self.keys,
            |reply| KeyCustodyMsg::OpenWriter { create, reply },
            annal_engine::clock::millis(self.config.key_call_deadline).saturating_add(1_000)
        ) {
            Ok(Ok(keys)) => keys,
            // No key, and nothing to ask for one: a store that was never enabled (no journal
            // yet) is simply off. One whose journal holds chunks was enabled, and lost its key
            // (destroyed behind annal's back, a credential store reset): that is a key failure,
            // never "disabled".
            Ok(Err(KeyError::NotFound)) if !create => {
                if journal_has_chunks(storage.as_ref()) {
                    return Err(self.key_fault(HealthCategory::KeyUnavailable));
                }
                return Ok(());
            }
            Ok(Err(error)) => return Err(self.key_fault(error.category())),
            Err(_) => return Err(self.key_fault(HealthCategory::KeyUnavailable)),
        };
        let recovered = self.rules.key_ok();
        self.carry_out(recovered);
        // The journal first: its projection holds the sequence floor of the history stream.
        let projection = match ractor::call_t!(
            self.journal,
            |reply| JournalMsg::Open {
                keys: keys.clone(),
                reply
            },
            CHILD_CALL_DEADLINE_MS
        ) {
            Ok(Ok(projection)) => projection,
            _ => return Err(self.storage_fault(HealthCategory::StorageUnavailable)),
        };
        if projection.health_fold.key_load_ends_a_failure() {
            // The key loaded: a key failure an earlier generation or process signalled is over
            // (its `key_failing` ended with it).
            self.signal(SignalKind::KeyRecovered);
        }
        let mut config = WriterConfig::new(keys.reference.clone(), std::num::NonZeroU64::MIN);
        config.sequence_floor = projection
            .history_high_water
            .and_then(annal_schema::Sequence::new);
        config.chunk_size_limit_bytes =
            annal_engine::store::chunk_size_limit_for_quota(projection.quota_bytes);
        // The seals first: a chunk a verified seal vouches for is not read (after a clean
        // stop, none is), and the newest one is the chain's tip. A seal that does not verify
        // vouches for nothing and is never linked to (verify reports it).
        let seals =
            annal_engine::seal::read_seals(storage.as_ref(), &keys.seal).unwrap_or_default();
        let sealed = annal_engine::seal::vouched_chunks(&seals);
        let last_seal = annal_engine::seal::chain_tip(&seals).cloned();
        let history = match StoreWriter::<History>::open_skipping_sealed(
            Arc::clone(&storage),
            keys.history.clone(),
            config,
            Arc::clone(&self.clock),
            &sealed,
        ) {
            Ok(history) => history,
            Err(_) => return Err(self.storage_fault(HealthCategory::StorageUnavailable)),
        };
        // A crash's torn tails, once each (readers leave them out whether recorded or not).
        // (A tear outside the journal's bounds is not recorded: the journal would refuse it.)
        let tears = history::tears_to_record(&projection, history.torn_tails_at_open());
        if !tears.is_empty() {
            let _ = self.journal.cast(JournalMsg::Record(tears));
        }
        let reserved_through = history.high_water().map_or(0, |s| s.get());
        // A crash's last chunks, complete but never closed: sealed now, so they become
        // prunable and no later open reads them. Only those no seal file names (a mismatched
        // seal is verify's to report) and whose records follow the chain's tip (so the chain
        // stays in sequence order); the rest stay unsealed, as before.
        let leftovers =
            history::leftovers_to_seal(history.unsealed_at_open(), &seals, last_seal.as_ref());
        // What may be pruned; a chunk recorded pruned in an earlier life and still present (a
        // crash between its record and its removal) is removed by the pass below. A crash's
        // torn chunks are never sealed: what the open read of them lets retention and eviction
        // take them all the same (module `store::prune`). A pruner that cannot be built prunes
        // nothing in this life.
        let pruner = annal_engine::store::Pruner::at_open(
            &storage,
            &seals,
            &projection.pruned,
            &keys.journal,
        )
        .map(|mut pruner| {
            for torn in history
                .torn_tails_at_open()
                .iter()
                .filter_map(|t| t.prunable)
            {
                pruner.add_torn(torn, &seals);
            }
            pruner
        })
        .unwrap_or_default();
        self.bytes = StoreBytes::read(storage.as_ref());
        let open_state = history.open_state();
        self.rules.adopt(projection);
        self.rules.opened(reserved_through);
        self.rules.set_chain_tip(last_seal);
        self.open = Some(Open {
            keys,
            history,
            unsynced_since: None,
            pruner,
        });
        if !leftovers.is_empty() {
            self.seal(&leftovers).await;
        }
        if !self.recover_sequences(open_state).await {
            self.skip_after_crash(open_state).await;
        }
        self.record_skip(open_state);
        self.reconcile_contract(open_state.newest_control).await;
        self.prune().await;
        self.check_quota();
        self.mark_owed_drops().await;
        Ok(())
    }

    /// A predecessor that did not stop cleanly left the journal's mark above what the store
    /// holds. If it reserved in this boot (`history::State::recover_sequences`), the page
    /// cache survived it: the files this open read are made durable, the release is
    /// journaled durably, and only then is the floor lowered, so the next record follows the
    /// last one on disk. Any failure on the way leaves the floor where it was (the skip is
    /// recorded instead).
    /// Whether it lowered the floor.
    async fn recover_sequences(&mut self, open_state: OpenState) -> bool {
        let stored = open_state.stored_high_water.map(|s| s.get());
        let events = self.rules.recover_sequences(stored);
        if events.is_empty() {
            return false;
        }
        let synced = self
            .open
            .as_ref()
            .is_some_and(|open| open.history.sync_chunks_read_at_open().is_ok());
        synced && self.journal_and_lower_floor(events).await
    }

    /// After a crash followed by another boot (or with no boot known), when the crashed writer
    /// journaled its in-flight bound (`history::State::skip_after_crash`): the skip stops that
    /// far above what was certainly durable, and the rest of the reservation is released,
    /// both journaled durably before the floor is lowered. Otherwise (or on a failure) the
    /// floor stays, and `record_skip` records the skip through it.
    async fn skip_after_crash(&mut self, open_state: OpenState) {
        let stored = open_state.stored_high_water.map(|s| s.get());
        let events = self.rules.skip_after_crash(stored);
        if !events.is_empty() {
            self.journal_and_lower_floor(events).await;
        }
    }

    /// Journals `events`, ending in a `SequenceReleased`, durably; then lowers the history
    /// writer's floor to the release's `high_water`. Whether it did.
    async fn journal_and_lower_floor(&mut self, events: Vec<JournalEvent>) -> bool {
        let Some(&JournalEvent::SequenceReleased { high_water, .. }) = events.last() else {
            return false;
        };
        if self.journal(events, true).await.is_err() {
            return false;
        }
        let lowered = self
            .open
            .as_mut()
            .is_some_and(|open| open.history.release_floor(Sequence::new(high_water)));
        if lowered {
            self.rules.opened(high_water);
        }
        lowered
    }

    /// The sequences this writer skips: above what the store holds and through the floor its
    /// history writer opened at (the journal's mark), which only a writer that did not stop
    /// cleanly leaves above it, and only when it crashed in another boot (or the release
    /// failed): a clean stop releases the rest of its reservation
    /// (`WriterState::release_sequences`), a crash in this boot is recovered
    /// (`WriterState::recover_sequences`). Recorded once, so a reader tells this gap from
    /// drops (`State::skipped`).
    fn record_skip(&mut self, open_state: OpenState) {
        let stored = open_state.stored_high_water.map(|s| s.get());
        let floor = self
            .open
            .as_ref()
            .and_then(|open| open.history.high_water())
            .map(|s| s.get());
        let skipped = self.rules.record_skip(floor, stored);
        self.carry_out(skipped);
    }

    /// One truth about on and off (`docs/design.md`): reads the contract's state beside the
    /// journal, `state.json` and the newest lifecycle `control` event of the history stream
    /// not read before (`newest`, from the chunks this open read), and journals what it says
    /// (`history::State::observe_contract`). Then writes the answer back to whichever place
    /// says otherwise (`history::State::contract_answer`).
    async fn reconcile_contract(&mut self, newest: Option<ControlRead>) {
        let Some(storage) = self.storage.get().cloned() else {
            return;
        };
        let file = read_state_mirror(storage.as_ref()).ok().flatten();
        let observed = self.rules.observe_contract(newest, file);
        // Durable before capture opens. A failure leaves the narrowing in effect all the same
        // (an observation never widens): the journal keeps it and appends it again.
        if !observed.events.is_empty() {
            let _ = self.journal(observed.events.clone(), true).await;
        }
        let answer = self.rules.contract_answer(&observed);
        if answer.write_state_file {
            self.mirror_state();
        }
        if let Some(operation) = answer.control_event {
            if let Some(draft) = self.draft("control", Payload::Control { operation }) {
                self.append_history(vec![draft]).await;
            }
            let _ = self.sync();
        }
    }

    /// A clean stop releases the rest of the reservation
    /// (`history::State::release_sequences`). A release that fails leaves the reservation (and
    /// the next open records the skip).
    pub(super) async fn release_sequences(&mut self) {
        let Some(high_water) = self.open.as_ref().and_then(|o| o.history.high_water()) else {
            return;
        };
        let events = self.rules.release_sequences(high_water.get());
        if !events.is_empty() {
            let _ = self.journal(events, true).await;
        }
    }
}

/// Whether the store's journal holds any chunk: the store was enabled at some time (its first
/// enable journals before it answers).
fn journal_has_chunks(storage: &dyn annal_engine::storage::Storage) -> bool {
    storage
        .list(annal_engine::storage::Area::Journal)
        .is_ok_and(|entries| !entries.is_empty())
}
