//! The `audit_summary` answer: the audit trail folded per actor, so the owner's report reads
//! who read how much and when in one bounded frame however long the trail is (`audit` lists
//! every entry, which outgrows a frame on a store read for long).

use annal_engine::policy::views::AuditEntry;
use annal_engine::policy::{Principal, Verdict};
use serde::Serialize;

/// Most actors one `audit_summary` answer lists (the most active first); the answer says when
/// more were left out. About 100 bytes each: far inside a frame.
pub const AUDIT_SUMMARY_ACTORS_MAX: usize = 2_000;

/// One actor's calls in the audit trail.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
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
