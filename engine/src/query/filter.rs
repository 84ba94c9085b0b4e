//! The owner's filters: what `annal list`, `annal query` and `annal search` add to a
//! `history_query` (`--since`/`--until`, `--app`, `--capability`, `--outcome`, search text).
//! They are the owner's, never an agent's: the agent tools keep exactly the contract's
//! arguments, and a filter rides with a read only when the gate's grant names the owner
//! ([`OwnerFilter::permitted`]).
//!
//! # Rules
//!
//! - **Only narrower.** A filter is applied after every rule of the request (sequence bounds,
//!   session, the retention cutoff), so a filtered read returns a subset of what the same
//!   read without it may return; the newest `limit` *matching* events are kept, ascending.
//! - **Time bounds** (`since_ms`, `until_ms`, both inclusive, milliseconds since the epoch)
//!   compare the event's `time`; `until_ms` before `since_ms` is refused, never swapped.
//! - **`application`**: equal, ignoring case, to the event's `application.bundle_id` or
//!   `application.display_name`. **`capability`**: equal, ignoring case, to `data.capability`.
//!   An event without the field does not match.
//! - **`outcome`**: an `action_completed` event whose `effect` is that value (only that type
//!   has one).
//! - **`text`** (`annal search`): a case-insensitive substring of the capability, the bundle id
//!   or the display name.
//!
//! # What is read to decide
//!
//! The derived index records each event's time, keyed session and type
//! ([`IndexEntry`]). [`OwnerFilter::admits_entry`] applies what the index can answer (the time
//! bounds, and `outcome`'s event type), so an event that fails it is skipped without its
//! record being read or decrypted. The index does not record capability or application: those
//! filters (and `outcome`'s effect) need the event itself, so the records left after the index
//! rules are read and decrypted to decide ([`OwnerFilter::needs_event`],
//! [`OwnerFilter::admits_event`]).

use std::time::Duration;

use annal_schema::{Effect, Event, EventType, Payload};

use super::IndexEntry;
use crate::policy::{Principal, ReadGrant};

/// Most characters of an `application`, `capability` or search `text` filter: the longest
/// identity field the contract has (`application.bundle_id`, 160 characters).
pub const OWNER_FILTER_TEXT_MAX_LEN_CHARS: usize = annal_schema::ids::BUNDLE_ID_MAX_LEN_CHARS;

/// A filter's value was refused. Each names its field (the daemon's `query` request field) and
/// never the value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidOwnerFilter {
    /// `until_ms` is before `since_ms`.
    #[error("\"until_ms\" is before \"since_ms\": give the earlier time as since")]
    Reversed,
    /// `app` is empty, too long or holds a control character.
    #[error("\"app\" must be 1..=160 characters without control characters")]
    Application,
    /// `capability` is empty, too long or holds a control character.
    #[error("\"capability\" must be 1..=160 characters without control characters")]
    Capability,
    /// `text` is empty, too long or holds a control character.
    #[error("\"text\" must be 1..=160 characters without control characters")]
    Text,
}

impl InvalidOwnerFilter {
    /// The daemon request field it names.
    pub fn field(self) -> &'static str {
        match self {
            Self::Reversed => "until_ms",
            Self::Application => "app",
            Self::Capability => "capability",
            Self::Text => "text",
        }
    }
}

/// The raw values of an [`OwnerFilter`], as a front-end received them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OwnerFilterParts {
    /// Earliest event time, in ms since the epoch (inclusive).
    pub since_ms: Option<u64>,
    /// Latest event time, in ms since the epoch (inclusive).
    pub until_ms: Option<u64>,
    /// An application's bundle id or display name.
    pub application: Option<String>,
    /// A capability.
    pub capability: Option<String>,
    /// An action's outcome (`effect`).
    pub outcome: Option<Effect>,
    /// Search text over capability and application identity.
    pub text: Option<String>,
}

/// A validated owner's filter; see the module doc. [`OwnerFilter::NONE`] filters nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OwnerFilter {
    /// Earliest event time (inclusive).
    since: Option<Duration>,
    /// Latest event time (inclusive).
    until: Option<Duration>,
    /// The application, lower-cased.
    application: Option<String>,
    /// The capability, lower-cased.
    capability: Option<String>,
    /// The outcome.
    outcome: Option<Effect>,
    /// The search text, lower-cased.
    text: Option<String>,
}

/// A text filter's value, lower-cased, or `None` when it is empty, too long or holds a
/// control character.
fn text_value(text: String) -> Option<String> {
    let len = text.chars().count();
    let ok =
        (1..=OWNER_FILTER_TEXT_MAX_LEN_CHARS).contains(&len) && !text.chars().any(char::is_control);
    ok.then(|| text.to_lowercase())
}

impl OwnerFilter {
    /// Filters nothing.
    pub const NONE: Self = Self {
        since: None,
        until: None,
        application: None,
        capability: None,
        outcome: None,
        text: None,
    };

    /// Checks `parts`: reversed time bounds and empty, overlong or control-character texts are
    /// refused, naming the field.
    pub fn new(parts: OwnerFilterParts) -> Result<Self, InvalidOwnerFilter> {
        if let (Some(since), Some(until)) = (parts.since_ms, parts.until_ms)
            && until < since
        {
            return Err(InvalidOwnerFilter::Reversed);
        }
        let check = |value: Option<String>, error| value.map(|v| text_value(v).ok_or(error));
        Ok(Self {
            since: parts.since_ms.map(Duration::from_millis),
            until: parts.until_ms.map(Duration::from_millis),
            application: check(parts.application, InvalidOwnerFilter::Application).transpose()?,
            capability: check(parts.capability, InvalidOwnerFilter::Capability).transpose()?,
            outcome: parts.outcome,
            text: check(parts.text, InvalidOwnerFilter::Text).transpose()?,
        })
    }

    /// Whether it filters nothing.
    pub fn is_empty(&self) -> bool {
        *self == Self::NONE
    }

    /// Whether a read decided by `grant` may carry this filter: an empty one always, any other
    /// only the owner's.
    pub fn permitted(&self, grant: &ReadGrant) -> bool {
        self.is_empty() || *grant.principal() == Principal::Owner
    }

    /// Whether the event's record must be read to decide (a capability, application, outcome
    /// or text filter); without one, [`OwnerFilter::admits_entry`] decides alone.
    pub fn needs_event(&self) -> bool {
        self.application.is_some()
            || self.capability.is_some()
            || self.outcome.is_some()
            || self.text.is_some()
    }

    /// What the index can decide: the time bounds, and for an `outcome` filter the event type
    /// (`action_completed`). `false`: the event does not match, and its record need not be
    /// read.
    pub fn admits_entry(&self, entry: &IndexEntry) -> bool {
        self.admits_time(entry.time)
            && (self.outcome.is_none() || entry.event_type == EventType::ActionCompleted)
    }

    /// Whether `event` matches every part of the filter.
    pub fn admits_event(&self, event: &Event) -> bool {
        let data = &event.data;
        let capability = data.capability.as_ref().map(|c| c.as_str().to_lowercase());
        let (bundle_id, display_name) = match &data.application {
            Some(app) => (
                app.bundle_id().map(|b| b.as_str().to_lowercase()),
                app.display_name().map(|d| d.as_str().to_lowercase()),
            ),
            None => (None, None),
        };
        let application_matches = self.application.as_ref().is_none_or(|wanted| {
            bundle_id.as_ref() == Some(wanted) || display_name.as_ref() == Some(wanted)
        });
        let capability_matches = self
            .capability
            .as_ref()
            .is_none_or(|wanted| capability.as_ref() == Some(wanted));
        let outcome_matches = self.outcome.is_none_or(|wanted| {
            matches!(&data.payload, Payload::ActionCompleted(outcome) if outcome.effect == wanted)
        });
        let text_matches = self.text.as_ref().is_none_or(|wanted| {
            [&capability, &bundle_id, &display_name]
                .into_iter()
                .flatten()
                .any(|field| field.contains(wanted.as_str()))
        });
        self.admits_time(event.time.since_epoch())
            && application_matches
            && capability_matches
            && outcome_matches
            && text_matches
    }

    fn admits_time(&self, time: Duration) -> bool {
        self.since.is_none_or(|since| time >= since) && self.until.is_none_or(|until| time <= until)
    }
}

#[cfg(test)]
mod tests;
