//! `annal stats`: the report's figures on a terminal (tables by `comfy-table`, colours by
//! `anstream`/`anstyle`, written only to a terminal and never under `NO_COLOR`), or as JSON.

use std::fmt::Write as _;
use std::io::Write as _;
use std::process::ExitCode;

use anstyle::{AnsiColor, Style};
use comfy_table::{Cell, CellAlignment, Table};
use serde_json::{Value, json};

use super::html::{Facts, utc};
use super::model::{Count, Summary, fold, sparkline};

/// Widest per-day sparkline, in characters (older days are summed into wider columns).
const SPARKLINE_COLUMNS_MAX: usize = 60;

/// Capabilities and applications listed on a terminal.
const TERMINAL_TOP: usize = 5;

const HEADING: Style = Style::new().bold();
const GOOD: Style = AnsiColor::Green.on_default();
const BAD: Style = AnsiColor::Red.on_default();
const DIM: Style = AnsiColor::BrightBlack.on_default();

/// The figures as one JSON object (`annal stats --json`).
pub fn json(summary: &Summary, facts: &Facts) -> Value {
    json!({
        "totals": summary.totals,
        "first_ms": summary.first_ms,
        "last_ms": summary.last_ms,
        "capabilities": summary.capabilities,
        "applications": summary.applications,
        "outcomes": summary.outcomes,
        "kinds": summary.kinds,
        "sessions": summary.lanes.iter().map(|l| json!({
            "session": l.session, "events": l.events, "first_ms": l.first_ms, "last_ms": l.last_ms,
        })).collect::<Vec<_>>(),
        "per_day": summary.days,
        "gaps": summary.gaps,
        "drops": summary.drops,
        "changes": summary.changes,
        "disk": {
            "bytes_used": facts.bytes_used,
            "quota_bytes": facts.quota_bytes,
            "quota_counted_bytes": facts.quota_counted_bytes,
            "retention_days": facts.retention_days,
        },
        "health": facts.health,
        "truncated": facts.truncated,
        "journal_read": facts.journal_read,
    })
}

fn table(heading: &str, counts: &[Count]) -> Table {
    let mut table = Table::new();
    table.load_preset(comfy_table::presets::NOTHING);
    table.set_header([heading, "events"]);
    for count in counts.iter().take(TERMINAL_TOP) {
        table.add_row([
            Cell::new(&count.name),
            Cell::new(count.events).set_alignment(CellAlignment::Right),
        ]);
    }
    table
}

/// The figures as text with styles (stripped by [`print`] where colour is not wanted).
pub fn text(summary: &Summary, facts: &Facts) -> String {
    let t = &summary.totals;
    let mut out = String::new();
    let h = |out: &mut String, title: &str| {
        let _ = writeln!(out, "\n{HEADING}{title}{HEADING:#}");
    };
    let _ = write!(out, "{HEADING}annal stats{HEADING:#}");
    if let (Some(first), Some(last)) = (summary.first_ms, summary.last_ms) {
        let _ = write!(out, "  {DIM}{} .. {}{DIM:#}", utc(first), utc(last));
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{} events, {} actions completed, {} sessions, {} applications",
        t.events, t.actions_completed, t.sessions, t.applications
    );
    h(&mut out, "Top capabilities");
    let _ = writeln!(out, "{}", table("capability", &summary.capabilities));
    h(&mut out, "Top applications");
    let _ = writeln!(out, "{}", table("application", &summary.applications));
    h(&mut out, "Outcomes");
    for count in &summary.outcomes {
        let style = match count.name.as_str() {
            "confirmed" => GOOD,
            "failed" | "refused" => BAD,
            _ => Style::new(),
        };
        let _ = writeln!(
            out,
            "  {style}{:<16}{style:#} {:>8}",
            count.name, count.events
        );
    }
    h(&mut out, "Sessions");
    for lane in summary.lanes.iter().take(TERMINAL_TOP) {
        let _ = writeln!(out, "  {:<34} {:>8} events", lane.session, lane.events);
    }
    if summary.lanes.len() > TERMINAL_TOP {
        let _ = writeln!(
            out,
            "  {DIM}and {} more{DIM:#}",
            summary.lanes.len() - TERMINAL_TOP
        );
    }
    if let Some(days) = &summary.days {
        h(&mut out, "Per day");
        let columns = fold(&days.counts, SPARKLINE_COLUMNS_MAX);
        let _ = writeln!(
            out,
            "  {}  {DIM}from {}, {} days{DIM:#}",
            sparkline(&columns),
            utc(days.start_ms),
            days.counts.len()
        );
    }
    h(&mut out, "Drops and gaps");
    let style = if t.drop_markers + t.gaps > 0 {
        BAD
    } else {
        GOOD
    };
    let _ = writeln!(
        out,
        "  {style}{} drop markers ({} events dropped), {} gaps ({} sequences missing){style:#}",
        t.drop_markers, t.dropped_events, t.gaps, t.missing_sequences
    );
    h(&mut out, "Disk");
    let counted = facts.quota_counted_bytes.unwrap_or(facts.bytes_used);
    let _ = writeln!(
        out,
        "  {} of history chunks; quota {} of {} ({}%); retention {} days; health {}",
        crate::owner::human_bytes(facts.bytes_used),
        crate::owner::human_bytes(counted),
        crate::owner::human_bytes(facts.quota_bytes),
        counted.saturating_mul(100) / facts.quota_bytes.max(1),
        facts.retention_days,
        facts.health
    );
    if facts.truncated {
        let _ = writeln!(
            out,
            "  {BAD}only the newest {} events were read{BAD:#}",
            t.events
        );
    }
    out
}

/// Prints [`text`] through `anstream`, which keeps the colours only on a terminal and drops
/// them under `NO_COLOR` (or `CLICOLOR=0`).
pub fn print(summary: &Summary, facts: &Facts) -> ExitCode {
    let text = text(summary, facts);
    let mut out = anstream::AutoStream::auto(std::io::stdout().lock());
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => {
            ExitCode::from(crate::EXIT_CLOSED_PIPE)
        }
        Err(_) => ExitCode::from(crate::EXIT_UNAVAILABLE),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn without_a_terminal_the_text_has_no_escape_codes() {
        let text = text(&Summary::default(), &Facts::default());
        let mut plain = anstream::StripStream::new(Vec::new());
        plain.write_all(text.as_bytes()).unwrap();
        let plain = String::from_utf8(plain.into_inner()).unwrap();
        assert!(!plain.contains('\u{1b}'));
        assert!(plain.contains("0 events"));
    }
}
