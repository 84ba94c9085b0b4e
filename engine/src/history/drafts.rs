//! Building history drafts from what capture drained.
//!
//! Each drained item becomes a v0 [`EventDraft`]: the keyed session id derived from the raw
//! label with the session-id key (cached, [`SESSION_ID_CACHE_ENTRIES`]), the action id from the
//! channel's seed ([`ActionIds`]), the time formatted once. One `health{events_dropped}` marker
//! goes before the first event after any drops (the queue's, and the events this writer lost
//! earlier); drops with no event after them wait for the next one. A capture whose time cannot
//! be formatted is not written and is reported by the next marker.

use std::collections::HashMap;
use std::time::Duration;

use annal_schema::{
    EventDraft, EventTime, HealthCategory, OpaqueId, Payload, Platform, SessionPhase, Subject,
};

use super::State;
use crate::capture::{ActionContext, ActionIds, Captured, CapturedItem, Drained, SessionLabel};
use crate::keys::SessionIdKey;

/// Most raw-label -> keyed-id entries the writer caches (deriving one is an HMAC, ~1 us).
pub const SESSION_ID_CACHE_ENTRIES: usize = 1024;

/// The keyed session ids derived so far (deriving one is a keyed hash; labels repeat).
#[derive(Default)]
struct SessionIds {
    /// Raw label -> keyed session id, at most `SESSION_ID_CACHE_ENTRIES`.
    by_label: HashMap<SessionLabel, OpaqueId>,
    /// The last label looked up and its id: compared (by pointer first) before hashing the
    /// label for the map.
    last: Option<(SessionLabel, OpaqueId)>,
}

impl SessionIds {
    /// The keyed session id of `label` under `key`, derived once per label while cached.
    fn id(&mut self, label: &SessionLabel, key: &SessionIdKey) -> OpaqueId {
        // Most events of a batch belong to the session of the one before.
        if let Some((last, id)) = &self.last
            && last == label
        {
            return id.clone();
        }
        let id = match self.by_label.get(label) {
            Some(id) => id.clone(),
            None => {
                if self.by_label.len() >= SESSION_ID_CACHE_ENTRIES {
                    self.by_label.clear();
                }
                let id = key.session_id(label.as_str());
                self.by_label.insert(label.clone(), id.clone());
                id
            }
        };
        self.last = Some((label.clone(), id.clone()));
        id
    }
}

/// Turns captured items into history drafts: the platform written into every event, the
/// channel's action ids and the session ids derived so far.
pub struct Drafter {
    /// The platform written into every event.
    platform: Platform,
    /// The channel's action ids (from its seed, a window at a time).
    action_ids: ActionIds,
    /// Raw label -> keyed session id.
    session_ids: SessionIds,
}

impl std::fmt::Debug for Drafter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the seed or a label.
        f.debug_struct("Drafter")
            .field("platform", &self.platform)
            .finish_non_exhaustive()
    }
}

impl Drafter {
    /// Drafts for `platform`, with the action ids of the channel seeded with `action_seed`.
    pub fn new(platform: Platform, action_seed: [u8; 32]) -> Self {
        Self {
            platform,
            action_ids: ActionIds::new(action_seed),
            session_ids: SessionIds::default(),
        }
    }

    /// A v0 draft of `payload` for the history stream at `now` (since the Unix epoch); `None`
    /// when `subject` or `now` cannot be written.
    pub fn draft(&self, subject: &str, payload: Payload, now: Duration) -> Option<EventDraft> {
        Some(EventDraft {
            subject: Subject::new(subject).ok()?,
            time: EventTime::from_unix(now).ok()?,
            session_id: None,
            action_id: None,
            platform: self.platform,
            capability: None,
            application: None,
            payload,
        })
    }

    /// The history's `health{events_dropped, count}` marker at `now`.
    pub fn drop_marker(&self, count: u64, now: Duration) -> Option<EventDraft> {
        self.draft(
            "writer",
            Payload::Health {
                category: HealthCategory::EventsDropped,
                count,
            },
            now,
        )
    }

    /// The keyed session id of `label` (when there is a label and a key).
    fn keyed_session(
        &mut self,
        label: Option<&SessionLabel>,
        key: Option<&SessionIdKey>,
    ) -> Option<OpaqueId> {
        Some(self.session_ids.id(label?, key?))
    }

    /// The draft of an action's start or completion: the same identity fields, another payload.
    /// The context's strings move into the draft. A completion whose start's context the drain
    /// no longer kept (`None`: the start is older than `OPEN_ACTIONS_RETAINED` starts) is still
    /// drafted, linked to its start by the action id, without capability, application and
    /// session.
    fn action_draft(
        &mut self,
        time: EventTime,
        action: u64,
        context: Option<ActionContext>,
        key: Option<&SessionIdKey>,
        payload: Payload,
    ) -> EventDraft {
        let id = self.action_ids.id(action);
        let (target, session) = context.map(ActionContext::into_parts).unzip();
        let session_id = self.keyed_session(session.flatten().as_ref(), key);
        let (capability, application) = target.map(|t| (t.capability, t.application)).unzip();
        EventDraft {
            subject: Subject::for_action(&id),
            time,
            session_id,
            action_id: Some(id),
            platform: self.platform,
            capability,
            application: application.flatten(),
            payload,
        }
    }

    /// The draft of a session's start or end.
    fn session_draft(
        &mut self,
        time: EventTime,
        label: &SessionLabel,
        key: Option<&SessionIdKey>,
        phase: SessionPhase,
    ) -> Option<EventDraft> {
        Some(EventDraft {
            subject: Subject::new("session").ok()?,
            time,
            session_id: self.keyed_session(Some(label), key),
            action_id: None,
            platform: self.platform,
            capability: None,
            application: None,
            payload: Payload::Session { phase },
        })
    }
}

impl State {
    /// Turns drained items into history drafts at `now`, with the session-id `key` (none: no
    /// session ids). Drops, and the events lost earlier, are reported by one marker before the
    /// next event; those no event follows stay unreported for the next batch.
    pub fn drafts(
        &mut self,
        drafter: &mut Drafter,
        batch: Vec<Drained<Captured>>,
        key: Option<&SessionIdKey>,
        now: Duration,
    ) -> Vec<EventDraft> {
        let mut drafts = Vec::with_capacity(batch.len() + 1);
        let mut dropped = 0u64;
        let mut lost_before = self.take_lost_unreported();
        for item in batch {
            let captured = match item {
                Drained::Dropped { count } => {
                    dropped += count;
                    continue;
                }
                Drained::Captured(captured) => captured,
            };
            let marker = dropped + lost_before;
            if marker > 0 {
                if let Some(draft) = drafter.drop_marker(marker, now) {
                    drafts.push(draft);
                }
                lost_before = 0;
                dropped = 0;
            }
            let Ok(time) = EventTime::from_unix(captured.at) else {
                lost_before += 1;
                continue;
            };
            let draft = match captured.item {
                CapturedItem::ActionStarted { action, context } => Some(drafter.action_draft(
                    time,
                    action,
                    Some(context),
                    key,
                    Payload::ActionStarted,
                )),
                CapturedItem::ActionCompleted {
                    action,
                    context,
                    outcome,
                } => Some(drafter.action_draft(
                    time,
                    action,
                    context,
                    key,
                    Payload::ActionCompleted(outcome),
                )),
                CapturedItem::SessionStarted { session } => {
                    drafter.session_draft(time, &session, key, SessionPhase::Started)
                }
                CapturedItem::SessionEnded { session } => {
                    drafter.session_draft(time, &session, key, SessionPhase::Ended)
                }
            };
            let Some(draft) = draft else { continue };
            drafts.push(draft);
        }
        // Drops with no event after them yet: reported before the next event.
        self.count_lost(lost_before + dropped);
        drafts
    }
}
