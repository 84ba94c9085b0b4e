//! What a host should do with history, decided once from what its preflight saw (seed 000,
//! "Consultation behavior"): use it, use it with named caveats, or continue without it for a
//! fixed reason. A host that needs deterministic consultation runs the status-and-query
//! preflight before its model step and acts on this verdict; the model is never the one to
//! decide whether a denial or a failure stops the task (it never does: every path that is not
//! [`Consultation::Use`] or [`Consultation::UseWithCaveats`] continues without history).
//!
//! The rule is [`consult`], pure and total over what the preflight can see; [`gaps`] finds the
//! missing sequence numbers in a returned slice (gap evidence: seed 000 tells agents that a
//! missing sequence means an action may not have been recorded).

use annal_schema::HealthCategory;
use annal_schema::tools::StatusResponse;

/// What the status call of a preflight saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StatusSeen {
    /// No history service answered (no store, no daemon, a dead daemon).
    Absent,
    /// The gate refused the status call (not granted, revoked, expired, agents off).
    Denied,
    /// The status call failed (`history_storage_unavailable` and the like).
    Failed,
    /// History was never enabled on this store: there is no journal to audit a call in, so
    /// the gate refuses every call, and the reason is that history is off.
    NeverEnabled,
    /// The gate could not answer, and the engine's own health names a key or storage failure
    /// ([`is_unreadable`]): nothing can be read (not "disabled": the owner turned nothing off).
    Unreadable,
    /// The status.
    Answered(Box<StatusResponse>),
}

/// What the query call of a preflight saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuerySeen {
    /// Not made: the status already decided, or the actor holds no query grant.
    NotGranted,
    /// The gate refused it.
    Denied,
    /// It failed.
    Failed,
    /// It returned this many events, with this many missing sequence numbers among them.
    Returned {
        /// Events returned.
        events: usize,
        /// Sequence numbers missing between the first and the last returned.
        missing: u64,
    },
}

/// Why a host goes on without history. Closed: each is a fixed string a host can show.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WithoutHistory {
    /// No history service answered.
    Absent,
    /// The embedder does not admit history on this machine.
    NotAdmitted,
    /// The owner has not enabled history, or disabled it.
    Disabled,
    /// The actor may not read status.
    StatusDenied,
    /// The actor may not query history.
    QueryNotGranted,
    /// The query was refused.
    QueryDenied,
    /// Status or query failed (a recoverable history failure).
    Failed,
    /// History can not be read now: its key or storage is unavailable or damaged.
    Unreadable,
    /// The query returned nothing.
    Empty,
}

impl WithoutHistory {
    /// The fixed reason, as a host shows it and as `annal preflight --json` prints it.
    pub const fn code(self) -> &'static str {
        match self {
            Self::Absent => "history_absent",
            Self::NotAdmitted => "not_admitted",
            Self::Disabled => "disabled",
            Self::StatusDenied => "status_denied",
            Self::QueryNotGranted => "query_not_granted",
            Self::QueryDenied => "query_denied",
            Self::Failed => "history_failed",
            Self::Unreadable => "history_unreadable",
            Self::Empty => "empty",
        }
    }
}

/// What a host must keep in mind while it uses history. Closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Caveat {
    /// The owner paused capture: the newest actions are not recorded.
    Paused,
    /// Capture dropped events (the status counts them): some actions are not recorded.
    EventsDropped,
    /// The slice has missing sequence numbers (gap evidence).
    Gaps,
    /// Capture is not recording now (quota reached, writer stopped): newer actions are missing.
    NotRecording,
}

impl Caveat {
    /// The fixed name, as `annal preflight --json` prints it.
    pub const fn code(self) -> &'static str {
        match self {
            Self::Paused => "paused",
            Self::EventsDropped => "events_dropped",
            Self::Gaps => "gaps",
            Self::NotRecording => "not_recording",
        }
    }
}

/// The verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Consultation {
    /// Use the slice as metadata evidence.
    Use,
    /// Use it, keeping these in mind (sorted, no repeats).
    UseWithCaveats(Vec<Caveat>),
    /// Go on without history, for this reason.
    ContinueWithoutHistory(WithoutHistory),
}

/// Health categories under which nothing can be read: a query would fail.
const UNREADABLE: [HealthCategory; 5] = [
    HealthCategory::KeyUnavailable,
    HealthCategory::KeyLocked,
    HealthCategory::KeyCorrupt,
    HealthCategory::StorageUnavailable,
    HealthCategory::StorageCorrupt,
];

/// Whether nothing can be read under `health` (a key or storage failure).
pub fn is_unreadable(health: HealthCategory) -> bool {
    UNREADABLE.contains(&health)
}

/// The verdict for what a preflight saw (module doc). Whatever the input, it is one of the
/// three; every failure, denial, absence and empty result continues without history.
pub fn consult(status: &StatusSeen, query: QuerySeen) -> Consultation {
    use Consultation::ContinueWithoutHistory as Without;
    let status = match status {
        StatusSeen::Absent => return Without(WithoutHistory::Absent),
        StatusSeen::Denied => return Without(WithoutHistory::StatusDenied),
        StatusSeen::Failed => return Without(WithoutHistory::Failed),
        StatusSeen::NeverEnabled => return Without(WithoutHistory::Disabled),
        StatusSeen::Unreadable => return Without(WithoutHistory::Unreadable),
        StatusSeen::Answered(status) => status,
    };
    if !status.admitted {
        return Without(WithoutHistory::NotAdmitted);
    }
    // A key or storage failure says more than `enabled: false` (a store whose key cannot load
    // reports itself not enabled): the reason is that history cannot be read.
    if is_unreadable(status.health) {
        return Without(WithoutHistory::Unreadable);
    }
    if !status.enabled {
        return Without(WithoutHistory::Disabled);
    }
    let missing = match query {
        QuerySeen::NotGranted => return Without(WithoutHistory::QueryNotGranted),
        QuerySeen::Denied => return Without(WithoutHistory::QueryDenied),
        QuerySeen::Failed => return Without(WithoutHistory::Failed),
        QuerySeen::Returned { events: 0, .. } => return Without(WithoutHistory::Empty),
        QuerySeen::Returned { missing, .. } => missing,
    };
    let mut caveats = Vec::new();
    if status.paused || status.health == HealthCategory::Paused {
        caveats.push(Caveat::Paused);
    }
    if status.dropped_events > 0 || status.health == HealthCategory::EventsDropped {
        caveats.push(Caveat::EventsDropped);
    }
    if missing > 0 {
        caveats.push(Caveat::Gaps);
    }
    if matches!(
        status.health,
        HealthCategory::QuotaReached | HealthCategory::WriterStopped
    ) {
        caveats.push(Caveat::NotRecording);
    }
    caveats.sort_unstable();
    caveats.dedup();
    if caveats.is_empty() {
        Consultation::Use
    } else {
        Consultation::UseWithCaveats(caveats)
    }
}

/// The missing sequence numbers between the lowest and the highest of `sequences` (in any
/// order), as inclusive ranges, lowest first: the gap evidence of a returned slice.
pub fn gaps(sequences: &[u64]) -> Vec<std::ops::RangeInclusive<u64>> {
    let mut sorted = sequences.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    sorted
        .windows(2)
        .filter(|pair| pair[1] > pair[0].saturating_add(1))
        .map(|pair| pair[0] + 1..=pair[1] - 1)
        .collect()
}

/// How many sequence numbers [`gaps`] finds missing.
pub fn missing(sequences: &[u64]) -> u64 {
    gaps(sequences)
        .iter()
        .map(|range| range.end() - range.start() + 1)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use Caveat::*;
    use WithoutHistory as W;

    fn status(edit: impl FnOnce(&mut StatusResponse)) -> StatusSeen {
        let mut status = StatusResponse {
            supported: true,
            admitted: true,
            enabled: true,
            paused: false,
            encrypted: true,
            profile: annal_schema::tools::STORAGE_PROFILE_ID.to_owned(),
            retention_days: 7,
            quota_bytes: 1 << 20,
            bytes_used: 0,
            dropped_events: 0,
            health: HealthCategory::Ready,
        };
        edit(&mut status);
        StatusSeen::Answered(Box::new(status))
    }

    const SOME: QuerySeen = QuerySeen::Returned {
        events: 10,
        missing: 0,
    };

    #[test]
    fn the_consultation_table() {
        let without = Consultation::ContinueWithoutHistory;
        let with = |caveats: &[Caveat]| Consultation::UseWithCaveats(caveats.to_vec());
        let cases: Vec<(&str, StatusSeen, QuerySeen, Consultation)> = vec![
            ("absent", StatusSeen::Absent, SOME, without(W::Absent)),
            (
                "status denied",
                StatusSeen::Denied,
                SOME,
                without(W::StatusDenied),
            ),
            (
                "status failed",
                StatusSeen::Failed,
                SOME,
                without(W::Failed),
            ),
            (
                "never enabled",
                StatusSeen::NeverEnabled,
                SOME,
                without(W::Disabled),
            ),
            (
                "not admitted",
                status(|s| s.admitted = false),
                SOME,
                without(W::NotAdmitted),
            ),
            (
                "disabled",
                status(|s| s.enabled = false),
                SOME,
                without(W::Disabled),
            ),
            (
                "key locked",
                status(|s| s.health = HealthCategory::KeyLocked),
                SOME,
                without(W::Unreadable),
            ),
            (
                "storage unavailable",
                status(|s| s.health = HealthCategory::StorageUnavailable),
                SOME,
                without(W::Unreadable),
            ),
            (
                "key corrupt, reported not enabled",
                status(|s| {
                    s.enabled = false;
                    s.health = HealthCategory::KeyCorrupt;
                }),
                SOME,
                without(W::Unreadable),
            ),
            (
                "the gate could not answer, the key cannot load",
                StatusSeen::Unreadable,
                SOME,
                without(W::Unreadable),
            ),
            (
                "query not granted",
                status(|_| {}),
                QuerySeen::NotGranted,
                without(W::QueryNotGranted),
            ),
            (
                "query denied",
                status(|_| {}),
                QuerySeen::Denied,
                without(W::QueryDenied),
            ),
            (
                "query failed",
                status(|_| {}),
                QuerySeen::Failed,
                without(W::Failed),
            ),
            (
                "empty",
                status(|_| {}),
                QuerySeen::Returned {
                    events: 0,
                    missing: 0,
                },
                without(W::Empty),
            ),
            ("ready", status(|_| {}), SOME, Consultation::Use),
            (
                "paused",
                status(|s| {
                    s.paused = true;
                    s.health = HealthCategory::Paused;
                }),
                SOME,
                with(&[Paused]),
            ),
            (
                "dropped",
                status(|s| {
                    s.dropped_events = 3;
                    s.health = HealthCategory::EventsDropped;
                }),
                SOME,
                with(&[EventsDropped]),
            ),
            (
                "gaps",
                status(|_| {}),
                QuerySeen::Returned {
                    events: 10,
                    missing: 2,
                },
                with(&[Gaps]),
            ),
            (
                "quota reached",
                status(|s| s.health = HealthCategory::QuotaReached),
                SOME,
                with(&[NotRecording]),
            ),
            (
                "writer stopped, dropped, with gaps",
                status(|s| {
                    s.health = HealthCategory::WriterStopped;
                    s.dropped_events = 1;
                }),
                QuerySeen::Returned {
                    events: 10,
                    missing: 1,
                },
                with(&[EventsDropped, Gaps, NotRecording]),
            ),
        ];
        for (name, status, query, expected) in cases {
            assert_eq!(consult(&status, query), expected, "{name}");
        }
    }

    #[test]
    fn every_failure_continues_without_history_and_never_uses_it() {
        for status in [
            StatusSeen::Absent,
            StatusSeen::Denied,
            StatusSeen::Failed,
            StatusSeen::NeverEnabled,
        ] {
            for query in [
                QuerySeen::NotGranted,
                QuerySeen::Denied,
                QuerySeen::Failed,
                SOME,
            ] {
                assert!(matches!(
                    consult(&status, query),
                    Consultation::ContinueWithoutHistory(_)
                ));
            }
        }
    }

    #[test]
    fn reasons_and_caveats_have_distinct_fixed_codes() {
        let reasons = [
            W::Absent,
            W::NotAdmitted,
            W::Disabled,
            W::StatusDenied,
            W::QueryNotGranted,
            W::QueryDenied,
            W::Failed,
            W::Unreadable,
            W::Empty,
        ];
        let codes: std::collections::BTreeSet<_> = reasons.iter().map(|r| r.code()).collect();
        assert_eq!(codes.len(), reasons.len());
        let caveats = [Paused, EventsDropped, Gaps, NotRecording];
        let codes: std::collections::BTreeSet<_> = caveats.iter().map(|c| c.code()).collect();
        assert_eq!(codes.len(), caveats.len());
    }

    #[test]
    fn gaps_are_the_missing_sequences_between_the_returned_ones() {
        assert!(gaps(&[]).is_empty());
        assert!(gaps(&[7]).is_empty());
        assert!(gaps(&[9, 8, 7]).is_empty());
        assert_eq!(gaps(&[10, 7, 3, 2]), vec![4..=6, 8..=9]);
        assert_eq!(missing(&[10, 7, 3, 2]), 5);
        assert_eq!(gaps(&[5, 5, 7]), vec![6..=6]);
    }
}
