//! The query path's pure core: the derived index's in-memory form and the one planner every
//! front-end uses (the Query actor, `annal inspect --query`, the CLI), so there is one
//! implementation of `history_query`'s semantics.
//!
//! # Semantics (seed 000, ARCHITECTURE.md section 2)
//!
//! Apply every filter (inclusive `since_sequence` / `until_sequence`, the session, the
//! retention cutoff by event time), keep the **newest** `limit` matching records, return them
//! **ascending** by sequence. A request's `session_id` may be the opaque id or the raw label;
//! both are compared after the keyed derivation ([`SessionMatch`]), and the label itself is
//! dropped at once.
//!
//! # Layout
//!
//! - this module: [`IndexEntry`], [`Index`] (every record's sequence, time, keyed session, type
//!   and location, ordered by sequence), [`SessionMatch`], [`RetentionCutoff`], [`plan`] and its
//!   paged form [`plan_page`].
//! - [`service`]: [`QueryService`], the reader every live query goes through: the lazily loaded
//!   index, the hot cache of decrypted events, reads by location.
//! - [`filter`]: [`OwnerFilter`], the owner's filters (time, application, capability,
//!   outcome, search text) applied after every rule above, and which of them the index decides
//!   without reading a record.

pub mod filter;
pub mod service;

pub use filter::{
    InvalidOwnerFilter, OWNER_FILTER_TEXT_MAX_LEN_CHARS, OwnerFilter, OwnerFilterParts,
};
pub use service::{EventPage, QueryService, ReaderKeys};

use std::time::Duration;

use annal_schema::tools::QueryRequest;
use annal_schema::{Event, EventType, OpaqueId};

use crate::keys::SessionIdKey;
use crate::store::RecordLocation;

/// Seconds in a day, for retention.
const SECS_PER_DAY: u64 = 86_400;

/// What the index knows of one record: enough to filter and to read it, nothing of its
/// content beyond the contract's opaque session id and type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IndexEntry {
    /// The record's sequence (the index's order).
    pub sequence: u64,
    /// Its event time, since the Unix epoch (retention compares it).
    pub time: Duration,
    /// Its keyed session id, when it has one.
    pub session: Option<[u8; 16]>,
    /// Its event type.
    pub event_type: EventType,
    /// Where it is.
    pub location: RecordLocation,
}

impl IndexEntry {
    /// The entry of `event` stored at `location`.
    pub fn of(event: &Event, location: RecordLocation) -> Self {
        Self {
            sequence: event.data.sequence.get(),
            time: event.time.since_epoch(),
            session: event.data.session_id.as_ref().map(OpaqueId::to_bytes),
            event_type: event.event_type(),
            location,
        }
    }
}

/// Every record of a store, ordered by strictly increasing sequence.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Index {
    /// The entries, strictly increasing by sequence.
    entries: Vec<IndexEntry>,
}

/// An entry does not continue the index's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("index entry {sequence} does not follow {after}")]
pub struct OutOfOrder {
    /// The refused entry's sequence.
    pub sequence: u64,
    /// The last sequence already indexed.
    pub after: u64,
}

impl Index {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }

    /// An index of `entries`, sorted and deduplicated by sequence (the store's merge already
    /// refused conflicting duplicates).
    pub fn from_entries(mut entries: Vec<IndexEntry>) -> Self {
        entries.sort_by_key(|e| e.sequence);
        entries.dedup_by_key(|e| e.sequence);
        Self { entries }
    }

    /// Appends one entry, which must come after every indexed one (the writer's order).
    pub fn push(&mut self, entry: IndexEntry) -> Result<(), OutOfOrder> {
        if let Some(last) = self.entries.last()
            && entry.sequence <= last.sequence
        {
            return Err(OutOfOrder {
                sequence: entry.sequence,
                after: last.sequence,
            });
        }
        self.entries.push(entry);
        Ok(())
    }

    /// Puts `older` (strictly increasing, every one below the first indexed sequence) before
    /// the indexed entries: a lazily loaded older chunk.
    pub fn prepend(&mut self, older: Vec<IndexEntry>) -> Result<(), OutOfOrder> {
        let ordered = older.windows(2).all(|w| w[0].sequence < w[1].sequence);
        if let (Some(last), Some(first)) = (older.last(), self.entries.first())
            && last.sequence >= first.sequence
        {
            return Err(OutOfOrder {
                sequence: first.sequence,
                after: last.sequence,
            });
        }
        if !ordered {
            let at = older.windows(2).find(|w| w[0].sequence >= w[1].sequence);
            return Err(OutOfOrder {
                sequence: at.map_or(0, |w| w[1].sequence),
                after: at.map_or(0, |w| w[0].sequence),
            });
        }
        let mut entries = older;
        entries.extend_from_slice(&self.entries);
        self.entries = entries;
        Ok(())
    }

    /// Drops the entries whose sequence lies in `range` (records the writer reports lost:
    /// never durable, so never to be planned or read).
    pub fn forget_sequences(&mut self, range: &std::ops::RangeInclusive<u64>) {
        let start = self
            .entries
            .partition_point(|e| e.sequence < *range.start());
        let end = self.entries.partition_point(|e| e.sequence <= *range.end());
        self.entries.drain(start..end.max(start));
    }

    /// The first indexed sequence.
    pub fn first_sequence(&self) -> Option<u64> {
        self.entries.first().map(|e| e.sequence)
    }

    /// How many records are indexed.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is indexed.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entries, in sequence order.
    pub fn entries(&self) -> &[IndexEntry] {
        &self.entries
    }

    /// The entries whose sequence lies in `since..=until` (inclusive bounds, either open).
    fn range(&self, since: Option<u64>, until: Option<u64>) -> &[IndexEntry] {
        let start = since.map_or(0, |s| self.entries.partition_point(|e| e.sequence < s));
        let end = until.map_or(self.entries.len(), |u| {
            self.entries.partition_point(|e| e.sequence <= u)
        });
        self.entries.get(start..end.max(start)).unwrap_or(&[])
    }
}

/// The keyed session ids a request's `session_id` may stand for: the keyed id of the value
/// taken as a raw label, and the value itself when it is an opaque id. The raw value is not
/// kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionMatch {
    /// The derived id of the value as a label.
    as_label: [u8; 16],
    /// The value itself, when it has the opaque-id form.
    as_id: Option<[u8; 16]>,
}

impl SessionMatch {
    /// What `value` (a request's `session_id`) matches, derived with the namespace's key.
    pub fn new(value: &str, key: &SessionIdKey) -> Self {
        Self {
            as_label: key.session_id(value).to_bytes(),
            as_id: OpaqueId::new(value).ok().map(|id| id.to_bytes()),
        }
    }

    /// Whether a record's keyed session id matches.
    pub fn matches(&self, session: Option<[u8; 16]>) -> bool {
        session.is_some_and(|s| s == self.as_label || Some(s) == self.as_id)
    }
}

/// The oldest event time a query may return: `now - retention_days`, exact (records strictly
/// older are invisible). Computed from an injected clock reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionCutoff(Duration);

impl RetentionCutoff {
    /// The cutoff `retention_days` before `now` (since the epoch).
    pub fn new(now: Duration, retention_days: u32) -> Self {
        let window = Duration::from_secs(u64::from(retention_days) * SECS_PER_DAY);
        Self(now.saturating_sub(window))
    }

    /// No cutoff (offline inspection without `--retention-days`).
    pub const NONE: Self = Self(Duration::ZERO);

    /// Whether a record at `time` is still visible.
    pub fn admits(self, time: Duration) -> bool {
        time >= self.0
    }
}

/// The locations `request` reads, ascending by sequence: every filter applied, the newest
/// `limit` kept. A `session_id` in the request is matched through `session_key` (as a raw label
/// and, when it has the form, as an opaque id). Walks newest first and stops at `limit`, so a
/// newest-N query touches N entries plus the ones it filters out.
pub fn plan(
    request: &QueryRequest,
    index: &Index,
    session_key: &SessionIdKey,
    cutoff: RetentionCutoff,
) -> Vec<RecordLocation> {
    plan_page(request, index, session_key, cutoff, None).locations
}

/// One page of a query: what it reads, and whether older matching records remain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// The locations, ascending by sequence.
    pub locations: Vec<RecordLocation>,
    /// Older records match too (the next page, below the first of these, is not empty).
    pub has_more: bool,
}

/// [`plan`] for the page below `before_sequence` (exclusive; `None`: the first page). Pages of
/// one request are disjoint, and the first `n` pages of a request with `limit` L hold exactly
/// what the unpaged request with `limit` n * L holds (when that is within the contract's
/// limit), whatever was appended in between.
pub fn plan_page(
    request: &QueryRequest,
    index: &Index,
    session_key: &SessionIdKey,
    cutoff: RetentionCutoff,
    before_sequence: Option<u64>,
) -> Page {
    plan_page_filtered(
        request,
        &OwnerFilter::NONE,
        index,
        session_key,
        cutoff,
        before_sequence,
    )
}

/// [`plan_page`] with the part of an owner's `filter` the index decides
/// ([`OwnerFilter::admits_entry`]). Exact for a filter that needs no event
/// ([`OwnerFilter::needs_event`]); for one that does, these are the candidates whose records
/// must still be read ([`QueryService`] does).
pub fn plan_page_filtered(
    request: &QueryRequest,
    filter: &OwnerFilter,
    index: &Index,
    session_key: &SessionIdKey,
    cutoff: RetentionCutoff,
    before_sequence: Option<u64>,
) -> Page {
    let session = request
        .session_id()
        .map(|value| SessionMatch::new(value, session_key));
    let limit = usize::from(request.limit());
    let mut matching = candidates(
        request,
        filter,
        index,
        session.as_ref(),
        cutoff,
        before_sequence,
    )
    .map(|e| e.location);
    let mut locations: Vec<RecordLocation> = matching.by_ref().take(limit).collect();
    let has_more = matching.next().is_some();
    locations.reverse();
    Page {
        locations,
        has_more,
    }
}

/// The entries below `before_sequence` (exclusive; `None`: no bound) that pass every rule the
/// index can decide, newest first: the request's sequence bounds and session, the retention
/// cutoff, and the index's part of `filter`.
pub fn candidates<'a>(
    request: &QueryRequest,
    filter: &'a OwnerFilter,
    index: &'a Index,
    session: Option<&'a SessionMatch>,
    cutoff: RetentionCutoff,
    before_sequence: Option<u64>,
) -> impl Iterator<Item = &'a IndexEntry> + 'a {
    // Sequences start at 1, so a bound of 0 leaves nothing to read.
    let until = match before_sequence {
        None => request.until_sequence(),
        Some(before) => {
            let below = before.saturating_sub(1);
            Some(request.until_sequence().map_or(below, |u| u.min(below)))
        }
    };
    index
        .range(request.since_sequence(), until)
        .iter()
        .rev()
        .filter(move |e| cutoff.admits(e.time))
        .filter(move |e| session.is_none_or(|m| m.matches(e.session)))
        .filter(move |e| filter.admits_entry(e))
}

#[cfg(test)]
mod tests;
