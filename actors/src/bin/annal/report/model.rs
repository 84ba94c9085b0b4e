//! The report's pure part: what `annal report` draws and `annal stats` prints, folded from the
//! events an owner's `history_query` returned and the owner's journal facts (the audit trail,
//! the grants, the status). No I/O here; every function is tested below.
//!
//! Events are read as the JSON the daemon answered (the contract's CloudEvents shape). Only
//! what such an answer holds is used: opaque ids, capability, application identity, kind,
//! outcome, time and sequence. A raw session label never reaches this module: the contract
//! stores only the keyed `session_id`.

use std::collections::BTreeMap;

use annal_actors::daemon::summary::ActorAccess;
use serde::Serialize;
use serde_json::Value;

/// Longest bucket series of the activity chart, in buckets: seconds, minutes or hours while
/// the span fits, else days.
pub const ACTIVITY_BUCKETS_MAX: usize = 24 * 14;

/// Longest bucket series of any chart, in buckets (ten years of days): times further apart
/// widen the buckets.
pub const BUCKETS_MAX: usize = 3_660;

/// One second, in milliseconds.
pub const SECOND_MS: u64 = 1_000;

/// One minute, in milliseconds.
pub const MINUTE_MS: u64 = 60_000;

/// One hour, in milliseconds.
pub const HOUR_MS: u64 = 3_600_000;

/// One day, in milliseconds.
pub const DAY_MS: u64 = 24 * HOUR_MS;

/// How many capabilities and applications the mixes list before "other".
pub const TOP_ENTRIES: usize = 10;

/// Every outcome class a timeline mark can have, in the order ties are broken: the six
/// `action_completed` effects, then the other kinds.
pub const OUTCOMES: [&str; 12] = [
    "confirmed",
    "partial",
    "unverifiable",
    "suspected_noop",
    "refused",
    "failed",
    "started",
    "session",
    "control",
    "health",
    "access",
    "other",
];

/// The lane of events with no session.
pub const NO_SESSION: &str = "(no session)";

/// The application row of events with no application identity.
pub const NO_APPLICATION: &str = "(no application)";

/// What one event was, as far as the report cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// `action_started`.
    Started,
    /// `action_completed`, with its `effect`.
    Completed(String),
    /// `session` (started or ended).
    Session,
    /// `control`, with its `operation` (enable, disable, pause, resume, flush).
    Control(String),
    /// `health`, with its `category` and `count`.
    Health(String, u64),
    /// `access`.
    Access,
}

/// One event, reduced to what the report uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// `data.sequence`.
    pub sequence: u64,
    /// `time`, in ms since the epoch.
    pub at_ms: u64,
    /// `data.session_id` (opaque).
    pub session: Option<String>,
    /// `application.display_name`, else `bundle_id`.
    pub application: Option<String>,
    /// `data.capability`.
    pub capability: Option<String>,
    /// What it was.
    pub kind: Kind,
}

impl Row {
    /// The row of one event's JSON; `None` when it has no sequence, no readable time or a kind
    /// the contract does not name. Only
    /// the tests build rows this way (from partial events); every read makes them with
    /// [`Row::from_typed`], and `a_typed_event_makes_the_row_its_json_makes` holds the two
    /// equal on the reference's records.
    #[cfg(test)]
    pub fn from_event(event: &Value) -> Option<Self> {
        let data = &event["data"];
        let payload = &data["payload"];
        let at = event["time"].as_str()?.parse::<jiff::Timestamp>().ok()?;
        let text = |value: &Value| value.as_str().map(str::to_owned);
        let kind = match payload["kind"].as_str() {
            Some("action_started") => Kind::Started,
            Some("action_completed") => {
                Kind::Completed(text(&payload["effect"]).unwrap_or_default())
            }
            Some("session") => Kind::Session,
            Some("control") => Kind::Control(text(&payload["operation"]).unwrap_or_default()),
            Some("health") => Kind::Health(
                text(&payload["category"]).unwrap_or_default(),
                payload["count"].as_u64().unwrap_or(0),
            ),
            Some("access") => Kind::Access,
            _ => return None,
        };
        Some(Self {
            sequence: data["sequence"].as_u64()?,
            at_ms: u64::try_from(at.as_millisecond()).ok()?,
            session: text(&data["session_id"]),
            application: text(&data["application"]["display_name"])
                .or_else(|| text(&data["application"]["bundle_id"])),
            capability: text(&data["capability"]),
            kind,
        })
    }

    /// The row of one typed event (a page's event, from the daemon's answer or an engine in
    /// this process).
    pub fn from_typed(event: &annal_schema::Event) -> Option<Self> {
        use annal_schema::Payload;
        let data = &event.data;
        let kind = match &data.payload {
            Payload::ActionStarted => Kind::Started,
            Payload::ActionCompleted(outcome) => {
                Kind::Completed(outcome.effect.as_str().to_owned())
            }
            Payload::Session { .. } => Kind::Session,
            Payload::Control { operation } => Kind::Control(operation.as_str().to_owned()),
            Payload::Health { category, count } => {
                Kind::Health(category.as_str().to_owned(), *count)
            }
            Payload::Access { .. } => Kind::Access,
        };
        let application = data.application.as_ref().and_then(|a| {
            a.display_name()
                .map(|n| n.as_str().to_owned())
                .or_else(|| a.bundle_id().map(|b| b.as_str().to_owned()))
        });
        Some(Self {
            sequence: data.sequence.get(),
            at_ms: u64::try_from(event.time.since_epoch().as_millis()).ok()?,
            session: data.session_id.as_ref().map(|s| s.as_str().to_owned()),
            application,
            capability: data.capability.as_ref().map(|c| c.as_str().to_owned()),
            kind,
        })
    }

    /// The outcome class its timeline mark is coloured by: one of [`OUTCOMES`] (an effect this
    /// version does not know is `other`).
    pub fn outcome(&self) -> &'static str {
        match &self.kind {
            Kind::Completed(effect) => OUTCOMES[..6]
                .iter()
                .find(|known| **known == effect)
                .copied()
                .unwrap_or("other"),
            Kind::Started => "started",
            Kind::Session => "session",
            Kind::Control(_) => "control",
            Kind::Health(..) => "health",
            Kind::Access => "access",
        }
    }
}

/// A name and how many events it has.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Count {
    /// The capability, application, outcome or kind.
    pub name: String,
    /// Events.
    pub events: u64,
}

/// A run of missing sequence numbers between two events the read returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Gap {
    /// The first missing sequence.
    pub first: u64,
    /// The last missing sequence.
    pub last: u64,
    /// The time of the event before it, in ms since the epoch (where it is drawn).
    pub at_ms: u64,
}

/// A drop marker: the contract's `health` `events_dropped` event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Drop {
    /// Its sequence.
    pub sequence: u64,
    /// Its time, in ms since the epoch.
    pub at_ms: u64,
    /// How many events were dropped.
    pub count: u64,
}

/// A health change: a `control` operation or a `health` marker other than a drop.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Change {
    /// Its sequence.
    pub sequence: u64,
    /// Its time, in ms since the epoch.
    pub at_ms: u64,
    /// `control` or `health`.
    pub kind: &'static str,
    /// The operation or the category.
    pub what: String,
}

/// One application row of a session's lane: its events by time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AppRow {
    /// The application identity (or [`NO_APPLICATION`]).
    pub application: String,
    /// Its events in this session, oldest first: time (ms) and outcome class.
    #[serde(skip)]
    pub marks: Vec<(u64, &'static str)>,
    /// How many.
    pub events: u64,
}

/// One session's lane.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Lane {
    /// The opaque session id (or [`NO_SESSION`]).
    pub session: String,
    /// Its events.
    pub events: u64,
    /// Its first event's time, ms.
    pub first_ms: u64,
    /// Its last event's time, ms.
    pub last_ms: u64,
    /// Its rows, one per application identity, by name.
    pub applications: Vec<AppRow>,
}

/// Events per hour or per day.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Activity {
    /// `second`, `minute`, `hour` or `day`.
    pub unit: &'static str,
    /// The first bucket's start, ms since the epoch (aligned to the unit, UTC).
    pub start_ms: u64,
    /// The bucket width, ms.
    pub width_ms: u64,
    /// Events per bucket.
    pub counts: Vec<u64>,
}

/// The totals.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Totals {
    /// Events the read returned.
    pub events: u64,
    /// `action_started` events.
    pub actions_started: u64,
    /// `action_completed` events.
    pub actions_completed: u64,
    /// Sessions (distinct `session_id`s).
    pub sessions: u64,
    /// Distinct application identities.
    pub applications: u64,
    /// Drop markers.
    pub drop_markers: u64,
    /// Events the drop markers say were dropped.
    pub dropped_events: u64,
    /// Runs of missing sequence numbers.
    pub gaps: u64,
    /// Missing sequence numbers in them.
    pub missing_sequences: u64,
}

/// What the history part of the report shows.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// The totals.
    pub totals: Totals,
    /// The oldest event's time, ms.
    pub first_ms: Option<u64>,
    /// The newest event's time, ms.
    pub last_ms: Option<u64>,
    /// Events per capability, most first (at most [`TOP_ENTRIES`], then `other`).
    pub capabilities: Vec<Count>,
    /// Events per application identity, most first (as capabilities).
    pub applications: Vec<Count>,
    /// `action_completed` events per effect, most first.
    pub outcomes: Vec<Count>,
    /// Events per kind, most first.
    pub kinds: Vec<Count>,
    /// One lane per session, busiest first.
    pub lanes: Vec<Lane>,
    /// Events per second, minute, hour or day.
    pub activity: Option<Activity>,
    /// Events per day (UTC), for the terminal's sparkline.
    pub days: Option<Activity>,
    /// Gaps in the sequence (only when every event was read: not for one session).
    pub gaps: Vec<Gap>,
    /// Drop markers.
    pub drops: Vec<Drop>,
    /// Health changes, oldest first.
    pub changes: Vec<Change>,
}

/// Adds one to `name`'s count (its key is allocated only the first time).
fn count(counts: &mut BTreeMap<String, u64>, name: &str) {
    if let Some(n) = counts.get_mut(name) {
        *n += 1;
    } else {
        counts.insert(name.to_owned(), 1);
    }
}

/// Counts sorted most first (ties by name), the tail after `top` folded into `other`.
pub fn ranked(counts: BTreeMap<String, u64>, top: usize) -> Vec<Count> {
    let mut all: Vec<Count> = counts
        .into_iter()
        .map(|(name, events)| Count { name, events })
        .collect();
    all.sort_by(|a, b| b.events.cmp(&a.events).then_with(|| a.name.cmp(&b.name)));
    if all.len() > top {
        let other: u64 = all[top..].iter().map(|c| c.events).sum();
        all.truncate(top);
        all.push(Count {
            name: "other".into(),
            events: other,
        });
    }
    all
}

/// Runs of missing sequence numbers in `sequences` (sorted ascending), each drawn at the time
/// of the event before it.
pub fn gaps(rows: &[Row]) -> Vec<Gap> {
    rows.windows(2)
        .filter(|pair| pair[1].sequence > pair[0].sequence.saturating_add(1))
        .map(|pair| Gap {
            first: pair[0].sequence + 1,
            last: pair[1].sequence - 1,
            at_ms: pair[0].at_ms,
        })
        .collect()
}

/// Events per second, minute or hour (the first whose [`ACTIVITY_BUCKETS_MAX`] buckets hold
/// the span), else per day.
pub fn activity(rows: &[Row]) -> Option<Activity> {
    let first = rows.iter().map(|r| r.at_ms).min()?;
    let last = rows.iter().map(|r| r.at_ms).max()?;
    if (last - first) / SECOND_MS < ACTIVITY_BUCKETS_MAX as u64 {
        buckets(rows, "second", SECOND_MS)
    } else if (last - first) / MINUTE_MS < ACTIVITY_BUCKETS_MAX as u64 {
        buckets(rows, "minute", MINUTE_MS)
    } else if (last - first) / HOUR_MS < ACTIVITY_BUCKETS_MAX as u64 {
        buckets(rows, "hour", HOUR_MS)
    } else {
        buckets(rows, "day", DAY_MS)
    }
}

/// Events per bucket of `width_ms` (UTC-aligned), named `unit`.
pub fn buckets(rows: &[Row], unit: &'static str, width_ms: u64) -> Option<Activity> {
    let first = rows.iter().map(|r| r.at_ms).min()?;
    let last = rows.iter().map(|r| r.at_ms).max()?;
    // Times far apart (a clock that jumped) widen the buckets instead of growing the series.
    let needed = (last - first) / width_ms + 2;
    let width_ms = width_ms * needed.div_ceil(BUCKETS_MAX as u64).max(1);
    let start_ms = first - first % width_ms;
    let buckets = usize::try_from((last - start_ms) / width_ms).unwrap_or(usize::MAX - 1) + 1;
    let mut counts = vec![0u64; buckets];
    for row in rows {
        let index = usize::try_from((row.at_ms - start_ms) / width_ms).unwrap_or(0);
        if let Some(count) = counts.get_mut(index) {
            *count += 1;
        }
    }
    Some(Activity {
        unit,
        start_ms,
        width_ms,
        counts,
    })
}

/// One lane per session (busiest first, ties by id), each with one row per application.
pub fn lanes(rows: &[Row]) -> Vec<Lane> {
    let mut by_session: BTreeMap<&str, BTreeMap<&str, Vec<&Row>>> = BTreeMap::new();
    for row in rows {
        by_session
            .entry(row.session.as_deref().unwrap_or(NO_SESSION))
            .or_default()
            .entry(row.application.as_deref().unwrap_or(NO_APPLICATION))
            .or_default()
            .push(row);
    }
    let mut lanes: Vec<Lane> = by_session
        .into_iter()
        .map(|(session, apps)| {
            let all = apps.values().flatten();
            let first_ms = all.clone().map(|r| r.at_ms).min().unwrap_or(0);
            let last_ms = all.clone().map(|r| r.at_ms).max().unwrap_or(0);
            let applications: Vec<AppRow> = apps
                .into_iter()
                .map(|(application, rows)| AppRow {
                    application: application.to_owned(),
                    events: rows.len() as u64,
                    marks: rows.iter().map(|r| (r.at_ms, r.outcome())).collect(),
                })
                .collect();
            Lane {
                session: session.to_owned(),
                events: applications.iter().map(|a| a.events).sum(),
                first_ms,
                last_ms,
                applications,
            }
        })
        .collect();
    lanes.sort_by(|a, b| {
        b.events
            .cmp(&a.events)
            .then_with(|| a.session.cmp(&b.session))
    });
    lanes
}

/// The summary of `rows` (any order). `whole_sequence`: the read was not narrowed to a
/// session, so a missing sequence number is a gap rather than another session's event.
pub fn summarize(mut rows: Vec<Row>, whole_sequence: bool) -> Summary {
    rows.sort_by_key(|r| r.sequence);
    rows.dedup_by_key(|r| r.sequence);
    let mut capabilities = BTreeMap::new();
    let mut applications = BTreeMap::new();
    let mut outcomes = BTreeMap::new();
    let mut kinds = BTreeMap::new();
    let mut totals = Totals {
        events: rows.len() as u64,
        ..Totals::default()
    };
    let mut drops = Vec::new();
    let mut changes = Vec::new();
    for row in &rows {
        if let Some(capability) = &row.capability {
            count(&mut capabilities, capability);
        }
        if let Some(application) = &row.application {
            count(&mut applications, application);
        }
        let kind = match &row.kind {
            Kind::Started => {
                totals.actions_started += 1;
                "action_started"
            }
            Kind::Completed(effect) => {
                totals.actions_completed += 1;
                count(&mut outcomes, effect);
                "action_completed"
            }
            Kind::Session => "session",
            Kind::Control(operation) => {
                changes.push(Change {
                    sequence: row.sequence,
                    at_ms: row.at_ms,
                    kind: "control",
                    what: operation.clone(),
                });
                "control"
            }
            Kind::Health(category, count) => {
                if category == "events_dropped" {
                    totals.drop_markers += 1;
                    totals.dropped_events += count;
                    drops.push(Drop {
                        sequence: row.sequence,
                        at_ms: row.at_ms,
                        count: *count,
                    });
                } else {
                    changes.push(Change {
                        sequence: row.sequence,
                        at_ms: row.at_ms,
                        kind: "health",
                        what: category.clone(),
                    });
                }
                "health"
            }
            Kind::Access => "access",
        };
        count(&mut kinds, kind);
    }
    let gaps = if whole_sequence {
        gaps(&rows)
    } else {
        Vec::new()
    };
    totals.gaps = gaps.len() as u64;
    totals.missing_sequences = gaps.iter().map(|g| g.last - g.first + 1).sum();
    totals.applications = applications.len() as u64;
    let lanes = lanes(&rows);
    totals.sessions = lanes.iter().filter(|l| l.session != NO_SESSION).count() as u64;
    Summary {
        first_ms: rows.iter().map(|r| r.at_ms).min(),
        last_ms: rows.iter().map(|r| r.at_ms).max(),
        activity: activity(&rows),
        days: buckets(&rows, "day", DAY_MS),
        totals,
        capabilities: ranked(capabilities, TOP_ENTRIES),
        applications: ranked(applications, TOP_ENTRIES),
        outcomes: ranked(outcomes, usize::MAX),
        kinds: ranked(kinds, usize::MAX),
        lanes,
        gaps,
        drops,
        changes,
    }
}

/// One agent's reads, from the audit trail, and whether the owner revoked it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Reader {
    /// Its row of the daemon's `audit_summary` (zero calls for a revoked agent that never
    /// called).
    #[serde(flatten)]
    pub access: ActorAccess,
    /// The owner revoked it.
    pub revoked: bool,
}

/// Who read how much and when: the daemon's `audit_summary` rows (one per actor; a row that is
/// not one is left out), with the `revoked` actors of the grants view marked (and listed even
/// without a call), by id.
pub fn readers(actors: &[Value], revoked: &[String]) -> Vec<Reader> {
    let mut by_actor: BTreeMap<String, Reader> = actors
        .iter()
        .filter_map(|row| serde_json::from_value::<ActorAccess>(row.clone()).ok())
        .map(|access| {
            (
                access.actor.clone(),
                Reader {
                    access,
                    revoked: false,
                },
            )
        })
        .collect();
    for actor in revoked {
        by_actor
            .entry(actor.clone())
            .or_insert_with(|| Reader {
                access: ActorAccess {
                    actor: actor.clone(),
                    ..ActorAccess::default()
                },
                revoked: true,
            })
            .revoked = true;
    }
    by_actor.into_values().collect()
}

/// Eight-level sparkline of `counts` (empty for none).
pub fn sparkline(counts: &[u64]) -> String {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let max = counts.iter().copied().max().unwrap_or(0);
    counts
        .iter()
        .map(|&c| {
            if max == 0 || c == 0 {
                ' '
            } else {
                let level = usize::try_from((c * 8).div_ceil(max) - 1).unwrap_or(7);
                BARS[level.min(7)]
            }
        })
        .collect()
}

/// Folds `counts` into at most `columns` buckets (each the sum of a run), for a terminal.
pub fn fold(counts: &[u64], columns: usize) -> Vec<u64> {
    if columns == 0 || counts.len() <= columns {
        return counts.to_vec();
    }
    let per = counts.len().div_ceil(columns);
    counts.chunks(per).map(|c| c.iter().sum()).collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(
        sequence: u64,
        minute: u64,
        session: Option<&str>,
        app: Option<&str>,
        payload: Value,
    ) -> Value {
        let mut data = json!({"sequence": sequence, "capability": "ui.click", "payload": payload});
        if let Some(session) = session {
            data["session_id"] = json!(session);
        }
        if let Some(app) = app {
            data["application"] = json!({"display_name": app});
        }
        let time =
            jiff::Timestamp::from_second(1_800_000_000 + i64::try_from(minute * 60).unwrap())
                .unwrap()
                .to_string();
        json!({"time": time, "data": data})
    }

    fn completed(effect: &str) -> Value {
        json!({"kind": "action_completed", "effect": effect, "route": "accessibility"})
    }

    fn rows(events: &[Value]) -> Vec<Row> {
        events.iter().filter_map(Row::from_event).collect()
    }

    #[test]
    fn a_row_reads_the_contract_fields_and_nothing_without_a_sequence_or_time() {
        let row = Row::from_event(&event(
            7,
            0,
            Some("s1"),
            Some("Firefox"),
            completed("failed"),
        ))
        .unwrap();
        assert_eq!(row.sequence, 7);
        assert_eq!(row.session.as_deref(), Some("s1"));
        assert_eq!(row.application.as_deref(), Some("Firefox"));
        assert_eq!(row.kind, Kind::Completed("failed".into()));
        assert_eq!(row.outcome(), "failed");
        assert_eq!(
            Row::from_event(&json!({"time": "x", "data": {"sequence": 1}})),
            None
        );
        assert_eq!(Row::from_event(&json!({"data": {"sequence": 1}})), None);
        let bundle = json!({"time": "2026-12-01T00:00:00Z", "data": {"sequence": 1,
            "application": {"bundle_id": "org.x"}, "payload": {"kind": "action_started"}}});
        let row = Row::from_event(&bundle).unwrap();
        assert_eq!(row.application.as_deref(), Some("org.x"));
        assert_eq!(row.kind, Kind::Started);
    }

    type LaneShape<'a> = (&'a str, u64, Vec<(&'a str, u64)>);

    #[test]
    fn a_typed_event_makes_the_row_its_json_makes() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../shared/fixtures/cua-reference/records.json"
        );
        let records: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let mut checked = 0;
        for record in records["records"].as_array().unwrap() {
            let text = record["plaintext"].as_str().unwrap();
            let typed = annal_schema::Event::from_json_slice(text.as_bytes()).unwrap();
            let json: Value = serde_json::from_str(text).unwrap();
            assert_eq!(Row::from_typed(&typed), Row::from_event(&json), "{text}");
            checked += 1;
        }
        assert_eq!(checked, 16);
    }

    #[test]
    fn lanes_are_one_per_session_with_one_row_per_application() {
        let summary = summarize(
            rows(&[
                event(1, 0, Some("a"), Some("Firefox"), completed("confirmed")),
                event(2, 1, Some("a"), Some("Editor"), completed("failed")),
                event(3, 2, Some("b"), Some("Firefox"), completed("confirmed")),
                event(
                    4,
                    3,
                    Some("a"),
                    Some("Firefox"),
                    json!({"kind": "action_started"}),
                ),
                event(
                    5,
                    4,
                    None,
                    None,
                    json!({"kind": "control", "operation": "pause"}),
                ),
            ]),
            true,
        );
        let shape: Vec<LaneShape> = summary
            .lanes
            .iter()
            .map(|l| {
                (
                    l.session.as_str(),
                    l.events,
                    l.applications
                        .iter()
                        .map(|a| (a.application.as_str(), a.events))
                        .collect(),
                )
            })
            .collect();
        assert_eq!(
            shape,
            vec![
                ("a", 3, vec![("Editor", 1), ("Firefox", 2)]),
                ("(no session)", 1, vec![("(no application)", 1)]),
                ("b", 1, vec![("Firefox", 1)]),
            ]
        );
        assert_eq!(summary.totals.sessions, 2);
        assert_eq!(summary.totals.applications, 2);
        assert_eq!(summary.changes.len(), 1);
        assert_eq!(summary.changes[0].what, "pause");
    }

    #[test]
    fn gaps_and_drops_are_found_where_they_fall_and_not_for_one_session() {
        let events = [
            event(1, 0, Some("a"), None, completed("confirmed")),
            event(
                2,
                1,
                Some("a"),
                None,
                json!({"kind": "health", "category": "events_dropped", "count": 4}),
            ),
            event(6, 2, Some("a"), None, completed("confirmed")),
            event(7, 3, Some("a"), None, completed("partial")),
            event(10, 4, Some("a"), None, completed("partial")),
        ];
        let summary = summarize(rows(&events), true);
        assert_eq!(
            summary.gaps,
            vec![
                Gap {
                    first: 3,
                    last: 5,
                    at_ms: summary.gaps[0].at_ms
                },
                Gap {
                    first: 8,
                    last: 9,
                    at_ms: summary.gaps[1].at_ms
                },
            ]
        );
        assert_eq!(summary.gaps[1].at_ms, rows(&events)[3].at_ms);
        assert_eq!(summary.totals.missing_sequences, 5);
        assert_eq!(summary.totals.drop_markers, 1);
        assert_eq!(summary.totals.dropped_events, 4);
        assert_eq!(summary.drops[0].sequence, 2);
        assert!(summarize(rows(&events), false).gaps.is_empty());
        assert_eq!(
            summary.outcomes,
            vec![
                Count {
                    name: "partial".into(),
                    events: 2
                },
                Count {
                    name: "confirmed".into(),
                    events: 2
                }
            ]
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
        );
    }

    #[test]
    fn the_same_event_twice_is_counted_once() {
        let e = event(1, 0, None, None, completed("confirmed"));
        assert_eq!(summarize(rows(&[e.clone(), e]), true).totals.events, 1);
    }

    #[test]
    fn activity_is_by_minute_hour_or_day_as_the_span_fits() {
        let by_second = activity(&rows(&[
            event(1, 0, None, None, completed("confirmed")),
            event(2, 1, None, None, completed("confirmed")),
        ]))
        .unwrap();
        assert_eq!((by_second.unit, by_second.counts.len()), ("second", 61));
        let by_minute = activity(&rows(&[
            event(1, 0, None, None, completed("confirmed")),
            event(2, 61, None, None, completed("confirmed")),
        ]))
        .unwrap();
        assert_eq!((by_minute.unit, by_minute.counts.len()), ("minute", 62));
        let hourly = activity(&rows(&[
            event(1, 0, None, None, completed("confirmed")),
            event(2, 61 * 10, None, None, completed("confirmed")),
            event(3, 62 * 10, None, None, completed("confirmed")),
        ]))
        .unwrap();
        assert_eq!(hourly.unit, "hour");
        assert_eq!(hourly.counts.iter().sum::<u64>(), 3);
        assert_eq!(hourly.start_ms % HOUR_MS, 0);
        let daily = activity(&rows(&[
            event(1, 0, None, None, completed("confirmed")),
            event(2, 60 * 24 * 30, None, None, completed("confirmed")),
        ]))
        .unwrap();
        assert_eq!(daily.unit, "day");
        assert_eq!(daily.counts.len(), 31);
        assert_eq!((daily.counts[0], daily.counts[30]), (1, 1));
        assert_eq!(activity(&[]), None);
    }

    #[test]
    fn ranked_folds_the_tail_into_other() {
        let counts: BTreeMap<String, u64> = [("a", 5), ("b", 3), ("c", 3), ("d", 1)]
            .map(|(n, c)| (n.to_owned(), c))
            .into();
        let top = ranked(counts, 2);
        let names: Vec<(&str, u64)> = top.iter().map(|c| (c.name.as_str(), c.events)).collect();
        assert_eq!(names, vec![("a", 5), ("b", 3), ("other", 4)]);
    }

    #[test]
    fn readers_take_the_summary_and_list_the_revoked() {
        let actors = [
            json!({"actor": "agent-a", "calls": 2, "denied": 0, "returned_events": 7, "first_ms": 10, "last_ms": 30}),
            json!({"actor": "agent-b", "calls": 1, "denied": 1, "returned_events": 0, "first_ms": 20, "last_ms": 20}),
            json!({"calls": 4}),
        ];
        let readers = readers(&actors, &["agent-b".into(), "agent-c".into()]);
        let shape: Vec<(&str, u64, u64, u64, u64, u64, bool)> = readers
            .iter()
            .map(|r| {
                (
                    r.access.actor.as_str(),
                    r.access.calls,
                    r.access.denied,
                    r.access.returned_events,
                    r.access.first_ms,
                    r.access.last_ms,
                    r.revoked,
                )
            })
            .collect();
        assert_eq!(
            shape,
            vec![
                ("agent-a", 2, 0, 7, 10, 30, false),
                ("agent-b", 1, 1, 0, 20, 20, true),
                ("agent-c", 0, 0, 0, 0, 0, true),
            ]
        );
    }

    #[test]
    fn sparkline_and_fold() {
        assert_eq!(sparkline(&[0, 1, 8]), " ▁█");
        assert_eq!(sparkline(&[]), "");
        assert_eq!(fold(&[1, 2, 3, 4, 5], 2), vec![6, 9]);
        assert_eq!(fold(&[1, 2], 5), vec![1, 2]);
    }
}
