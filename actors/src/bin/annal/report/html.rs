//! The report as one self-contained HTML page: `maud` writes it at compile time and escapes
//! every value; the charts are inline SVG written through the same templates. No script, no
//! font, no stylesheet or image from anywhere: a `Content-Security-Policy` meta tag forbids
//! every fetch (only the inline style is allowed), so the page reads the same offline.
//!
//! What the page marks for a reader (and the browser test): each session's lane is a
//! `g.lane` with `data-session` and `data-events`; each gap a `line.gap` with `data-first` and
//! `data-last`; each drop marker a `g.drop` with `data-count`; the access table is
//! `table#access`, one `tr.reader` per actor with `data-actor`, `data-denied`, `data-revoked`.

use maud::{DOCTYPE, Markup, PreEscaped, html};

use super::model::{Change, Reader, Summary};

/// The page's Content-Security-Policy: nothing may be fetched; the inline style is the only
/// thing the page itself may use.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; style-src 'unsafe-inline'; \
     img-src 'none'; script-src 'none'; connect-src 'none'; font-src 'none'; base-uri 'none'; \
     form-action 'none'";

/// Width of every chart, in SVG user units (px).
const CHART_WIDTH_PX: u64 = 1000;

/// Width of the timeline's label column, in px.
const LABEL_WIDTH_PX: u64 = 230;

/// Height of one application row of the timeline, in px.
const ROW_HEIGHT_PX: u64 = 14;

/// Height of a lane's heading row, in px.
const LANE_HEADING_PX: u64 = 18;

/// Columns the timeline's time axis is cut into: a row draws at most one mark per column (the
/// column's most frequent outcome), so a large store stays a page of bounded size.
const TIMELINE_COLUMNS: u64 = 385;

/// Rows the gap, drop and health-change tables list (all are drawn on the timeline).
const TABLE_ROWS_MAX: usize = 20;

/// Height of the activity chart's plot, in px.
const ACTIVITY_HEIGHT_PX: u64 = 120;

/// The outcome classes that have a colour; anything else is drawn as `other`.
const OUTCOME_CLASSES: [&str; 12] = super::model::OUTCOMES;

/// The page's only style (inline; the CSP allows nothing else).
const STYLE: &str = "
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#1d2430;background:#fff;max-width:1060px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #dde}
.meta{color:#556}.num{text-align:right;font-variant-numeric:tabular-nums}
table{border-collapse:collapse;margin:6px 0}td,th{padding:3px 10px;border-bottom:1px solid #eef;text-align:left}
.cards{display:flex;flex-wrap:wrap;gap:10px}.card{border:1px solid #dde;border-radius:6px;padding:8px 14px;min-width:120px}
.card b{display:block;font-size:20px}
svg text{font:11px system-ui,sans-serif;fill:#334}
.o-confirmed{fill:#2e9d57}.o-partial{fill:#e0a526}.o-unverifiable{fill:#8e8ea0}.o-suspected_noop{fill:#b58cd8}
.o-refused{fill:#d9682b}.o-failed{fill:#d33c3c}.o-started{fill:#9cc3e6}.o-session{fill:#5a7fa8}
.o-control{fill:#444}.o-health{fill:#c0392b}.o-access{fill:#7fb3b3}.o-other{fill:#bbb}
.lane-bg{fill:#f5f7fa}.bar{fill:#4a78b5}.gap{stroke:#d33c3c;stroke-width:2;stroke-dasharray:3 2}
.drop path{fill:#d33c3c}.change{stroke:#444;stroke-width:1;stroke-dasharray:2 3}
.quota{fill:#e8ecf2}.used{fill:#4a78b5}.legend span{display:inline-block;margin-right:12px}
.legend i{display:inline-block;width:10px;height:10px;margin-right:4px;border-radius:2px}
.warn{color:#b02a2a}";

/// What the page shows besides the history: the owner's journal facts.
#[derive(Debug, Default)]
pub struct Facts {
    /// When the report was made, ms since the epoch.
    pub generated_ms: u64,
    /// What the read was narrowed to, for the heading (never a raw session label).
    pub scope: String,
    /// Agents' reads, from the audit trail.
    pub readers: Vec<Reader>,
    /// The contract's `bytes_used`.
    pub bytes_used: u64,
    /// The contract's `quota_bytes`.
    pub quota_bytes: u64,
    /// What the quota counts (history and journal), when the daemon said.
    pub quota_counted_bytes: Option<u64>,
    /// The contract's `retention_days`.
    pub retention_days: u32,
    /// The contract's `health` now.
    pub health: String,
    /// The contract's `dropped_events` now.
    pub dropped_events: u64,
    /// Events were left unread at the report's bound ([`super::REPORT_EVENTS_MAX`]).
    pub truncated: bool,
    /// The policy journal (audit trail, grants) was read; `false` for a store annal never
    /// enabled.
    pub journal_read: bool,
}

/// `ms` as UTC to the second.
pub fn utc(ms: u64) -> String {
    i64::try_from(ms)
        .ok()
        .and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
        .map_or_else(
            || "-".to_owned(),
            |t| t.strftime("%Y-%m-%d %H:%M:%S UTC").to_string(),
        )
}

/// An outcome's CSS class (a fixed one: a stored value never becomes a class name).
fn class(outcome: &str) -> &'static str {
    OUTCOME_CLASSES
        .iter()
        .find(|c| **c == outcome)
        .map_or("o-other", |c| match *c {
            "confirmed" => "o-confirmed",
            "partial" => "o-partial",
            "unverifiable" => "o-unverifiable",
            "suspected_noop" => "o-suspected_noop",
            "refused" => "o-refused",
            "failed" => "o-failed",
            "started" => "o-started",
            "session" => "o-session",
            "control" => "o-control",
            "health" => "o-health",
            "access" => "o-access",
            _ => "o-other",
        })
}

/// The x of time `at` on an axis of `width` px from `start` to `end` ms.
fn x_of(at: u64, start: u64, end: u64, width: u64) -> u64 {
    let span = end.saturating_sub(start).max(1);
    let offset = u128::from(at.saturating_sub(start).min(span));
    u64::try_from(offset * u128::from(width) / u128::from(span)).unwrap_or(width)
}

/// Bytes for a person.
fn bytes(n: u64) -> String {
    crate::owner::human_bytes(n)
}

/// The whole page.
pub fn page(summary: &Summary, facts: &Facts) -> String {
    let markup: Markup = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta http-equiv="Content-Security-Policy" content=(CONTENT_SECURITY_POLICY);
                meta name="referrer" content="no-referrer";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { "annal report" }
                style { (PreEscaped(STYLE)) }
            }
            body {
                h1 { "annal report" }
                p.meta {
                    "Made " (utc(facts.generated_ms)) " from " (facts.scope) ". "
                    @if let (Some(first), Some(last)) = (summary.first_ms, summary.last_ms) {
                        "Events from " (utc(first)) " to " (utc(last)) "."
                    } @else {
                        "No events."
                    }
                    " Metadata only: what history_query returns, and the owner's journal facts."
                }
                @if facts.truncated {
                    p.warn { "The store holds more events than one report reads; the oldest were left out." }
                }
                (cards(summary, facts))
                h2 { "Timeline" }
                (legend())
                (timeline(summary))
                h2 { "Events per " (summary.activity.as_ref().map_or("hour", |a| a.unit)) }
                (activity(summary))
                h2 { "Capabilities, applications and outcomes" }
                div.cards {
                    (mix("Capabilities", &summary.capabilities))
                    (mix("Applications", &summary.applications))
                    (mix("Outcomes", &summary.outcomes))
                }
                h2 { "Gaps and drops" }
                (gaps_and_drops(summary))
                h2 { "Health changes" }
                (changes(&summary.changes))
                h2 { "Agent access" }
                (access(&facts.readers, facts.journal_read))
                h2 { "Disk use" }
                (disk(facts))
            }
        }
    };
    markup.into_string()
}

fn cards(summary: &Summary, facts: &Facts) -> Markup {
    let t = &summary.totals;
    html! {
        div.cards {
            div.card { b { (t.events) } "events" }
            div.card { b { (t.actions_completed) } "actions completed" }
            div.card { b id="sessions" { (t.sessions) } "sessions" }
            div.card { b { (t.applications) } "applications" }
            div.card { b { (t.drop_markers) } "drop markers (" (t.dropped_events) " dropped)" }
            div.card { b { (t.gaps) } "gaps (" (t.missing_sequences) " sequences)" }
            div.card { b { (facts.health) } "health now" }
            div.card { b { (facts.dropped_events) } "dropped in all (status)" }
        }
    }
}

fn legend() -> Markup {
    html! {
        p.legend {
            @for outcome in OUTCOME_CLASSES {
                span { svg width="10" height="10" { rect class=(class(outcome)) width="10" height="10" {} } " " (outcome) }
            }
            span { "dashed red: gap; red triangle: drop marker; dotted: health change" }
        }
    }
}

/// One lane per session, one row per application, marks coloured by outcome; gaps, drops and
/// health changes drawn across every lane where they fall.
fn timeline(summary: &Summary) -> Markup {
    let (Some(start), Some(end)) = (summary.first_ms, summary.last_ms) else {
        return html! { p { "Nothing to draw." } };
    };
    let plot = CHART_WIDTH_PX - LABEL_WIDTH_PX;
    let rows: u64 = summary
        .lanes
        .iter()
        .map(|l| LANE_HEADING_PX + ROW_HEIGHT_PX * l.applications.len() as u64)
        .sum();
    let height = rows + 30;
    let x = |at: u64| LABEL_WIDTH_PX + x_of(at, start, end, plot);
    let column_ms = (end - start) / TIMELINE_COLUMNS + 1;
    let mut offsets = Vec::with_capacity(summary.lanes.len());
    let mut next_y = 20;
    for lane in &summary.lanes {
        offsets.push(next_y);
        next_y += LANE_HEADING_PX + ROW_HEIGHT_PX * lane.applications.len() as u64;
    }
    html! {
        svg.timeline width=(CHART_WIDTH_PX) height=(height) viewBox=(format!("0 0 {CHART_WIDTH_PX} {height}")) role="img" {
            title { "Timeline: one lane per session" }
            text x=(LABEL_WIDTH_PX) y="12" { (utc(start)) }
            text x=(CHART_WIDTH_PX) y="12" text-anchor="end" { (utc(end)) }
            @for (lane, y) in summary.lanes.iter().zip(offsets) {
                @let lane_height = LANE_HEADING_PX + ROW_HEIGHT_PX * lane.applications.len() as u64;
                g.lane data-session=(lane.session) data-events=(lane.events) {
                    rect.lane-bg x="0" y=(y) width=(CHART_WIDTH_PX) height=(lane_height - 2) {}
                    text x="4" y=(y + 13) { "session " (short(&lane.session)) " · " (lane.events) " events" }
                    @for (i, app) in lane.applications.iter().enumerate() {
                        @let row_y = y + LANE_HEADING_PX + ROW_HEIGHT_PX * i as u64;
                        g.app data-application=(app.application) data-events=(app.events) {
                            text x="14" y=(row_y + 10) { (short_app(&app.application)) " (" (app.events) ")" }
                            @for (column_start, outcome, count) in cells(&app.marks, start, column_ms) {
                                rect class=(class(outcome)) x=(x(column_start)) y=(row_y + 1) width="3" height=(ROW_HEIGHT_PX - 3) {
                                    title { (count) " " (outcome) " from " (utc(column_start)) }
                                }
                            }
                        }
                    }
                }
            }
            @for gap in &summary.gaps {
                line.gap x1=(x(gap.at_ms)) x2=(x(gap.at_ms)) y1="16" y2=(height - 10) data-first=(gap.first) data-last=(gap.last) {
                    title { "gap: sequences " (gap.first) "..=" (gap.last) " missing" }
                }
            }
            @for drop in &summary.drops {
                g.drop data-count=(drop.count) data-sequence=(drop.sequence) {
                    path d=(format!("M{} {} l-6 -10 h12 z", x(drop.at_ms), height - 2)) {}
                    title { (drop.count) " events dropped (sequence " (drop.sequence) ")" }
                }
            }
            @for change in &summary.changes {
                line.change x1=(x(change.at_ms)) x2=(x(change.at_ms)) y1="16" y2=(height - 12) data-what=(change.what) {
                    title { (change.kind) " " (change.what) " at " (utc(change.at_ms)) }
                }
            }
        }
    }
}

/// A row's marks folded into columns of `column_ms` from `start`: each occupied column's start,
/// its most frequent outcome (ties: the first in [`OUTCOME_CLASSES`]'s order) and its count.
fn cells(
    marks: &[(u64, &'static str)],
    start: u64,
    column_ms: u64,
) -> Vec<(u64, &'static str, u64)> {
    let mut columns: std::collections::BTreeMap<u64, std::collections::BTreeMap<usize, u64>> =
        Default::default();
    for (at, outcome) in marks {
        let column = (at - start) / column_ms.max(1);
        let rank = OUTCOME_CLASSES
            .iter()
            .position(|c| c == outcome)
            .unwrap_or(OUTCOME_CLASSES.len() - 1);
        *columns.entry(column).or_default().entry(rank).or_insert(0) += 1;
    }
    columns
        .into_iter()
        .map(|(column, ranks)| {
            let total = ranks.values().sum();
            let best = ranks
                .iter()
                .max_by(|a, b| a.1.cmp(b.1).then_with(|| b.0.cmp(a.0)))
                .map_or(OUTCOME_CLASSES.len() - 1, |(rank, _)| *rank);
            (start + column * column_ms, OUTCOME_CLASSES[best], total)
        })
        .collect()
}

/// A session id shortened for a label (the whole id is in `data-session` and the tooltip).
fn short(id: &str) -> String {
    id.chars().take(12).collect()
}

/// An application name shortened for the label column.
fn short_app(name: &str) -> String {
    const LABEL_MAX_CHARS: usize = 28;
    if name.chars().count() > LABEL_MAX_CHARS {
        name.chars()
            .take(LABEL_MAX_CHARS - 1)
            .chain(['…'])
            .collect()
    } else {
        name.to_owned()
    }
}

fn activity(summary: &Summary) -> Markup {
    let Some(activity) = &summary.activity else {
        return html! { p { "No events." } };
    };
    let max = activity.counts.iter().copied().max().unwrap_or(0).max(1);
    let n = activity.counts.len() as u64;
    let plot = CHART_WIDTH_PX - 60;
    let bar = (plot / n.max(1)).max(1);
    let height = ACTIVITY_HEIGHT_PX + 30;
    html! {
        svg.activity width=(CHART_WIDTH_PX) height=(height) viewBox=(format!("0 0 {CHART_WIDTH_PX} {height}")) role="img" {
            title { "Events per " (activity.unit) }
            text x="0" y="12" { (max) }
            text x="0" y=(ACTIVITY_HEIGHT_PX) { "0" }
            @for (i, count) in activity.counts.iter().enumerate() {
                @let h = count * ACTIVITY_HEIGHT_PX / max;
                @let bucket_start = activity.start_ms + i as u64 * activity.width_ms;
                rect.bar x=(50 + i as u64 * plot / n.max(1)) y=(ACTIVITY_HEIGHT_PX - h) width=(bar.saturating_sub(1).max(1)) height=(h) data-events=(count) {
                    title { (count) " events from " (utc(bucket_start)) }
                }
            }
            text x="50" y=(ACTIVITY_HEIGHT_PX + 16) { (utc(activity.start_ms)) }
            text x=(CHART_WIDTH_PX) y=(ACTIVITY_HEIGHT_PX + 16) text-anchor="end" {
                (utc(activity.start_ms + n * activity.width_ms))
            }
        }
    }
}

fn mix(heading: &str, counts: &[super::model::Count]) -> Markup {
    let max = counts.iter().map(|c| c.events).max().unwrap_or(0).max(1);
    html! {
        div.card {
            strong { (heading) }
            table {
                @for count in counts {
                    tr {
                        td { (count.name) }
                        td.num { (count.events) }
                        td { svg width="120" height="10" { rect class=(class(&count.name)) x="0" y="0" width=(count.events * 120 / max) height="10" {} } }
                    }
                }
            }
        }
    }
}

fn gaps_and_drops(summary: &Summary) -> Markup {
    html! {
        @if summary.gaps.is_empty() && summary.drops.is_empty() {
            p { "No gap in the sequence and no drop marker." }
        } @else {
            table id="gaps" {
                tr { th { "what" } th { "sequences" } th { "when" } }
                @for gap in summary.gaps.iter().take(TABLE_ROWS_MAX) {
                    tr.gap-row { td { "gap" } td { (gap.first) "..=" (gap.last) } td { "after " (utc(gap.at_ms)) } }
                }
                @for drop in summary.drops.iter().take(TABLE_ROWS_MAX) {
                    tr.drop-row { td { (drop.count) " dropped" } td { "marker " (drop.sequence) } td { (utc(drop.at_ms)) } }
                }
            }
            @let hidden = summary.gaps.len().saturating_sub(TABLE_ROWS_MAX) + summary.drops.len().saturating_sub(TABLE_ROWS_MAX);
            @if hidden > 0 {
                p.meta { "And " (hidden) " more, drawn on the timeline; `annal stats --json` lists them all." }
            }
        }
    }
}

fn changes(changes: &[Change]) -> Markup {
    html! {
        @if changes.is_empty() {
            p { "No health change in this period." }
        } @else {
            table id="changes" {
                tr { th { "when" } th { "what" } th { "sequence" } }
                @for change in changes.iter().take(TABLE_ROWS_MAX) {
                    tr { td { (utc(change.at_ms)) } td { (change.kind) " " (change.what) } td.num { (change.sequence) } }
                }
            }
            @if changes.len() > TABLE_ROWS_MAX {
                p.meta { "And " (changes.len() - TABLE_ROWS_MAX) " more, drawn on the timeline." }
            }
        }
    }
}

fn access(readers: &[Reader], journal_read: bool) -> Markup {
    html! {
        @if !journal_read {
            p.warn { "annal's policy journal could not be read (a store annal never enabled has none): no audit trail or grants to show." }
        }
        table id="access" {
            tr { th { "actor" } th { "calls" } th { "denied" } th { "events returned" } th { "first" } th { "last" } th { "state" } }
            @for r in readers {
                tr.reader data-actor=(r.access.actor) data-denied=(r.access.denied) data-revoked=(r.revoked) {
                    td { (r.access.actor) }
                    td.num { (r.access.calls) }
                    td.num { (r.access.denied) }
                    td.num { (r.access.returned_events) }
                    td { @if r.access.calls > 0 { (utc(r.access.first_ms)) } @else { "-" } }
                    td { @if r.access.calls > 0 { (utc(r.access.last_ms)) } @else { "-" } }
                    td { @if r.revoked { "revoked" } @else { "-" } }
                }
            }
        }
        @if readers.is_empty() { p { "No agent read the history." } }
    }
}

fn disk(facts: &Facts) -> Markup {
    let counted = facts.quota_counted_bytes.unwrap_or(facts.bytes_used);
    let quota = facts.quota_bytes.max(1);
    let used_px = (u128::from(counted.min(quota)) * 600 / u128::from(quota)) as u64;
    let horizon = facts
        .generated_ms
        .saturating_sub(u64::from(facts.retention_days) * super::model::DAY_MS);
    html! {
        svg.disk width="620" height="24" role="img" {
            title { (bytes(counted)) " of " (bytes(facts.quota_bytes)) }
            rect.quota x="0" y="2" width="600" height="18" {}
            rect.used x="0" y="2" width=(used_px) height="18" {}
        }
        p {
            (bytes(facts.bytes_used)) " of history chunks; the quota counts " (bytes(counted))
            " of " (bytes(facts.quota_bytes)) ". Retention: " (facts.retention_days)
            " days, so events before " (utc(horizon)) " leave every answer."
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::report::model::{Row, summarize};
    use annal_actors::daemon::summary::ActorAccess;
    use serde_json::json;

    fn page_of(events: &[serde_json::Value], facts: &Facts) -> String {
        page(
            &summarize(events.iter().filter_map(Row::from_event).collect(), true),
            facts,
        )
    }

    #[test]
    fn every_value_is_escaped_and_nothing_is_fetched() {
        let hostile = "<script>alert(1)</script>\"'&";
        let event = json!({"time": "2026-12-01T10:00:00Z", "data": {"sequence": 1,
            "session_id": hostile, "capability": hostile,
            "application": {"display_name": hostile},
            "payload": {"kind": "action_completed", "effect": hostile}}});
        let facts = Facts {
            readers: vec![Reader {
                access: ActorAccess {
                    actor: hostile.into(),
                    calls: 1,
                    denied: 0,
                    returned_events: 1,
                    first_ms: 0,
                    last_ms: 0,
                },
                revoked: false,
            }],
            scope: hostile.into(),
            ..Facts::default()
        };
        let html = page_of(&[event], &facts);
        assert!(!html.contains("<script"), "{html}");
        assert!(html.contains("&lt;script&gt;"));
        for fetch in ["http:", "https:", "src=", "href=", "@import", "url("] {
            assert!(!html.contains(fetch), "{fetch} in the page");
        }
        assert!(html.contains(CONTENT_SECURITY_POLICY));
        // A stored effect never becomes a class name.
        assert!(html.contains("class=\"o-other\""));
    }

    #[test]
    fn cells_keep_one_mark_per_column_with_the_most_frequent_outcome() {
        let marks: Vec<(u64, &'static str)> = vec![
            (0, "confirmed"),
            (5, "failed"),
            (6, "failed"),
            (25, "confirmed"),
        ];
        assert_eq!(
            cells(&marks, 0, 10),
            vec![(0, "failed", 3), (20, "confirmed", 1)]
        );
    }

    #[test]
    fn x_of_stays_on_the_axis() {
        assert_eq!(x_of(0, 0, 100, 50), 0);
        assert_eq!(x_of(100, 0, 100, 50), 50);
        assert_eq!(x_of(500, 0, 100, 50), 50);
        assert_eq!(x_of(7, 7, 7, 50), 0);
    }
}
