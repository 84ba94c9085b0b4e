//! The owner's views of the audit trail, each bounded to one frame however long the trail is:
//! `audit` ([`audit_reply`]: the newest [`AUDIT_REPLY_ENTRIES_MAX`] matching entries, and how
//! many older ones were left out) and `audit_summary` ([`per_actor`]: the trail folded per
//! actor, which the owner's report reads).

use annal_engine::policy::views::AuditEntry;
use annal_engine::policy::{Principal, Verdict};
use serde::Serialize;
use serde_json::{Value, json};

use super::protocol::MAX_FRAME_BYTES;

/// Most entries one `audit` answer lists: the newest that match (oldest first among them);
/// `omitted` says how many older ones were left out (`--since` and `--actor` narrow).
pub const AUDIT_REPLY_ENTRIES_MAX: usize = 1_000;

/// The longest one entry's JSON can be, in bytes: the fixed keys and the longest values (a
/// 64-character actor id, the longest operation, verdict and outcome codes, 20-digit numbers).
pub const AUDIT_ENTRY_JSON_MAX_BYTES: usize = 400;

// A full answer fits one frame, with room for its envelope.
const _: () =
    assert!(AUDIT_REPLY_ENTRIES_MAX * (AUDIT_ENTRY_JSON_MAX_BYTES + 1) + 1_024 < MAX_FRAME_BYTES);

/// One entry as `audit` answers it.
pub fn audit_json(entry: &AuditEntry) -> Value {
    let who = match &entry.principal {
        Principal::Owner => "owner",
        Principal::Agent(actor) => actor.as_str(),
    };
    let mut value = json!({
        "audit": entry.audit,
        "at_ms": entry.at_ms,
        "actor": who,
        "operation": entry.operation.map(|o| o.name()),
        "verdict": entry.verdict.map(|v| v.code()),
        "outcome": entry.outcome.map(|o| o.code()),
        "returned_events": entry.returned_events,
    });
    // An export: its operation is `export`, and its count the archive's (never a tool call's).
    if let Some(events) = entry.exported_events {
        value["operation"] = json!("export");
        value["exported_events"] = json!(events);
    }
    value
}

/// The `audit` answer for `entries` (oldest first): the newest [`AUDIT_REPLY_ENTRIES_MAX`] of
/// them, oldest first, and `omitted`, how many older ones were left out.
pub fn audit_reply(entries: &[AuditEntry]) -> Value {
    let kept = entries.len().saturating_sub(AUDIT_REPLY_ENTRIES_MAX);
    let listed = entries.get(kept..).unwrap_or_default();
    json!({
        "entries": listed.iter().map(audit_json).collect::<Vec<_>>(),
        "omitted": kept,
    })
}

/// Most actors one `audit_summary` answer lists (the most active first); the answer says when
/// more were left out. About 100 bytes each: far inside a frame.
pub const AUDIT_SUMMARY_ACTORS_MAX: usize = 2_000;

/// One actor's calls in the audit trail: a row of the `audit_summary` answer, written by the
/// daemon and read back by `annal report`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ActorAccess {
    /// The agent's id, or `owner`.
    pub actor: String,
    /// Gated calls.
    pub calls: u64,
    /// Calls the gate denied, or refused before deciding (an unknown tool): what `audit
    /// --denied` lists.
    pub denied: u64,
    /// Events its completed reads returned.
    pub returned_events: u64,
    /// Its first call, ms since the epoch.
    pub first_ms: u64,
    /// Its last call, ms since the epoch.
    pub last_ms: u64,
}

/// `entries` folded per actor, most calls first (ties by id), at most
/// [`AUDIT_SUMMARY_ACTORS_MAX`]; `true` with them when more were left out.
pub fn per_actor(entries: &[AuditEntry]) -> (Vec<ActorAccess>, bool) {
    let mut by_actor: std::collections::BTreeMap<&str, ActorAccess> = Default::default();
    for entry in entries {
        let actor = match &entry.principal {
            Principal::Owner => "owner",
            Principal::Agent(actor) => actor.as_str(),
        };
        let access = by_actor.entry(actor).or_insert_with(|| ActorAccess {
            actor: actor.to_owned(),
            calls: 0,
            denied: 0,
            returned_events: 0,
            first_ms: entry.at_ms,
            last_ms: entry.at_ms,
        });
        access.calls += 1;
        if !matches!(entry.verdict, Some(Verdict::Allowed)) {
            access.denied += 1;
        }
        access.returned_events += u64::from(entry.returned_events);
        access.first_ms = access.first_ms.min(entry.at_ms);
        access.last_ms = access.last_ms.max(entry.at_ms);
    }
    let mut actors: Vec<ActorAccess> = by_actor.into_values().collect();
    actors.sort_by(|a, b| b.calls.cmp(&a.calls).then_with(|| a.actor.cmp(&b.actor)));
    let truncated = actors.len() > AUDIT_SUMMARY_ACTORS_MAX;
    actors.truncate(AUDIT_SUMMARY_ACTORS_MAX);
    (actors, truncated)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use annal_engine::policy::{ActorId, DenyReason, Operation};

    fn entry(
        audit: u64,
        at_ms: u64,
        principal: Principal,
        verdict: Option<Verdict>,
        returned: u16,
    ) -> AuditEntry {
        AuditEntry {
            audit,
            at_ms,
            principal,
            operation: Some(Operation::Query),
            verdict,
            outcome: None,
            returned_events: returned,
            exported_events: None,
        }
    }

    #[test]
    fn an_audit_answer_keeps_the_newest_entries_and_counts_what_it_left_out() {
        let a = Principal::Agent(ActorId::new("agent-a").unwrap());
        let all: Vec<AuditEntry> = (1..=AUDIT_REPLY_ENTRIES_MAX as u64 + 7)
            .map(|n| entry(n, n, a.clone(), Some(Verdict::Allowed), 1))
            .collect();
        let reply = audit_reply(&all);
        let listed = reply["entries"].as_array().unwrap();
        assert_eq!(listed.len(), AUDIT_REPLY_ENTRIES_MAX);
        assert_eq!(reply["omitted"], 7);
        // The newest, oldest first among them.
        assert_eq!(listed[0]["audit"], 8);
        assert_eq!(listed.last().unwrap()["audit"], all.len() as u64);
        let few = audit_reply(&all[..3]);
        assert_eq!(few["entries"].as_array().unwrap().len(), 3);
        assert_eq!(few["omitted"], 0);
    }

    #[test]
    fn the_longest_entry_fits_its_bound_and_a_full_answer_one_frame() {
        let longest = Principal::Agent(ActorId::new(&"a".repeat(64)).unwrap());
        let mut entry = entry(
            u64::MAX,
            u64::MAX,
            longest,
            Some(Verdict::Allowed),
            u16::MAX,
        );
        entry.outcome = Some(annal_engine::policy::AuditOutcome::Refused(
            annal_engine::policy::Refusal::Contract(
                annal_schema::ErrorCode::HistoryStorageUnavailable,
            ),
        ));
        entry.exported_events = Some(u64::MAX);
        let bytes = serde_json::to_vec(&audit_json(&entry)).unwrap().len();
        assert!(bytes <= AUDIT_ENTRY_JSON_MAX_BYTES, "{bytes}");
        let full: Vec<AuditEntry> = (0..AUDIT_REPLY_ENTRIES_MAX + 10)
            .map(|_| entry.clone())
            .collect();
        let frame = serde_json::to_vec(&audit_reply(&full)).unwrap().len();
        assert!(frame < MAX_FRAME_BYTES, "{frame}");
    }

    #[test]
    fn the_trail_folds_per_actor_with_denials_and_returned_events() {
        let a = Principal::Agent(ActorId::new("agent-a").unwrap());
        let b = Principal::Agent(ActorId::new("agent-b").unwrap());
        let entries = [
            entry(1, 10, a.clone(), Some(Verdict::Allowed), 5),
            entry(2, 30, a, Some(Verdict::Allowed), 2),
            entry(
                3,
                20,
                b.clone(),
                Some(Verdict::Denied(DenyReason::Revoked)),
                0,
            ),
            entry(4, 25, b, None, 0),
            entry(5, 40, Principal::Owner, Some(Verdict::Allowed), 200),
        ];
        let (actors, truncated) = per_actor(&entries);
        assert!(!truncated);
        let shape: Vec<(&str, u64, u64, u64, u64, u64)> = actors
            .iter()
            .map(|a| {
                (
                    a.actor.as_str(),
                    a.calls,
                    a.denied,
                    a.returned_events,
                    a.first_ms,
                    a.last_ms,
                )
            })
            .collect();
        assert_eq!(
            shape,
            vec![
                ("agent-a", 2, 0, 7, 10, 30),
                ("agent-b", 2, 2, 0, 20, 25),
                ("owner", 1, 0, 200, 40, 40),
            ]
        );
    }
}
