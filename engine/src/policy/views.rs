//! The owner's views of the policy: the grants in force (`annal grants`) and the audit trail,
//! one entry per gated call (`annal audit`: who read my history, when, and what they got).
//! Pure: built from the policy state and the journal's policy records, so the owner's views and
//! the gate read the same facts. Neither holds an argument, a filter value, a label or any
//! content: the audit records cannot express one.

use std::collections::BTreeMap;

use super::{
    ActorId, AuditOutcome, GrantSource, MS_PER_SEC, Operation, PolicyEvent, PolicyState, Principal,
    Verdict,
};

/// One grant in force, as the owner sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantView {
    /// To whom.
    pub actor: ActorId,
    /// For what.
    pub operation: Operation,
    /// Where it came from.
    pub source: GrantSource,
    /// When it ends, in ms since the epoch.
    pub expires_at_ms: u64,
    /// When it lapses unless used before, in ms since the epoch (never after its expiry).
    pub idle_deadline_ms: u64,
    /// When it was issued or last allowed a call, in ms since the epoch.
    pub last_used_ms: u64,
    /// Whether it would allow a call at the time the view was taken.
    pub live: bool,
}

impl PolicyState {
    /// Every grant, by actor and operation, with its deadlines and whether it is live at
    /// `now_ms` (an expired or idle one stays listed, not live, until it is replaced or revoked).
    pub fn grant_views(&self, now_ms: u64) -> Vec<GrantView> {
        self.grants
            .iter()
            .map(|((actor, operation), grant)| {
                let idle_deadline_ms = grant
                    .last_used_ms
                    .saturating_add(grant.idle_timeout_ms)
                    .min(grant.expires_at_ms);
                GrantView {
                    actor: actor.clone(),
                    operation: *operation,
                    source: grant.source,
                    expires_at_ms: grant.expires_at_ms,
                    idle_deadline_ms,
                    last_used_ms: grant.last_used_ms,
                    live: now_ms < idle_deadline_ms,
                }
            })
            .collect()
    }

    /// The actors revoked since their last grant, by name.
    pub fn revoked_actors(&self) -> Vec<ActorId> {
        self.revoked.iter().cloned().collect()
    }
}

/// One gated call, its pre-execution record and its completion paired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEntry {
    /// The audit id.
    pub audit: u64,
    /// When it was decided, in ms since the epoch.
    pub at_ms: u64,
    /// Who called.
    pub principal: Principal,
    /// Which operation (`None`: a tool that is neither, refused `unknown_tool` before any
    /// decision; its name is never recorded).
    pub operation: Option<Operation>,
    /// The gate's verdict (`None`: no decision was made, the call named an unknown tool).
    pub verdict: Option<Verdict>,
    /// How it ended (`None`: no completion record, e.g. the process ended first).
    pub outcome: Option<AuditOutcome>,
    /// How many events it returned.
    pub returned_events: u16,
    /// An export (`annal export`, [`PolicyEvent::OwnerExported`]): how many events its
    /// archive holds. `None` for a tool call.
    pub exported_events: Option<u64>,
}

/// Which audit entries the owner asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditFilter {
    /// Only this agent's calls.
    pub actor: Option<ActorId>,
    /// Only calls decided at or after this time, in ms since the epoch.
    pub since_ms: Option<u64>,
    /// Only calls the gate denied, or refused before its decision (an unknown tool).
    pub denied_only: bool,
}

impl AuditFilter {
    /// Whether `entry` passes.
    fn admits(&self, entry: &AuditEntry) -> bool {
        let actor_matches = match (&self.actor, &entry.principal) {
            (None, _) => true,
            (Some(wanted), Principal::Agent(actor)) => wanted == actor,
            (Some(_), Principal::Owner) => false,
        };
        actor_matches
            && self.since_ms.is_none_or(|since| entry.at_ms >= since)
            && (!self.denied_only || !matches!(entry.verdict, Some(Verdict::Allowed)))
    }
}

/// The audit trail in `events` (the journal's policy records, in journal order) as one entry
/// per call, oldest first, filtered by `filter`.
pub fn audit_entries<'a>(
    events: impl IntoIterator<Item = &'a PolicyEvent>,
    filter: &AuditFilter,
) -> Vec<AuditEntry> {
    let mut entries: BTreeMap<u64, AuditEntry> = BTreeMap::new();
    let started = |audit: u64, at_ms: u64, principal: &Principal| AuditEntry {
        audit,
        at_ms,
        principal: principal.clone(),
        operation: None,
        verdict: None,
        outcome: None,
        returned_events: 0,
        exported_events: None,
    };
    for event in events {
        match event {
            PolicyEvent::AuditStarted {
                audit,
                at_ms,
                principal,
                operation,
                verdict,
            } => {
                let entry = AuditEntry {
                    operation: Some(*operation),
                    verdict: Some(*verdict),
                    ..started(*audit, *at_ms, principal)
                };
                entries.insert(*audit, entry);
            }
            PolicyEvent::UnknownToolRefused {
                audit,
                at_ms,
                principal,
            } => {
                let entry = AuditEntry {
                    outcome: Some(AuditOutcome::Refused(super::Refusal::Contract(
                        annal_schema::ErrorCode::UnknownTool,
                    ))),
                    ..started(*audit, *at_ms, principal)
                };
                entries.insert(*audit, entry);
            }
            PolicyEvent::OwnerExported {
                audit,
                at_ms,
                events,
                ..
            } => {
                let entry = AuditEntry {
                    verdict: Some(Verdict::Allowed),
                    outcome: Some(AuditOutcome::Completed),
                    exported_events: Some(*events),
                    ..started(*audit, *at_ms, &Principal::Owner)
                };
                entries.insert(*audit, entry);
            }
            PolicyEvent::AuditFinished {
                audit,
                outcome,
                returned_events,
            } => {
                if let Some(entry) = entries.get_mut(audit) {
                    entry.outcome = Some(*outcome);
                    entry.returned_events = *returned_events;
                }
            }
            _ => {}
        }
    }
    entries
        .into_values()
        .filter(|entry| filter.admits(entry))
        .collect()
}

/// Milliseconds in `secs` seconds (for callers that take durations in seconds).
pub const fn secs_to_ms(secs: u64) -> u64 {
    secs.saturating_mul(MS_PER_SEC)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{DenyReason, GrantTerms, Refusal};

    const T0: u64 = 1_800_000_000_000;

    fn actor(name: &str) -> ActorId {
        ActorId::new(name).unwrap()
    }

    fn started(audit: u64, at_ms: u64, who: Principal, verdict: Verdict) -> PolicyEvent {
        PolicyEvent::AuditStarted {
            audit,
            at_ms,
            principal: who,
            operation: Operation::Query,
            verdict,
        }
    }

    fn finished(audit: u64, outcome: AuditOutcome, returned_events: u16) -> PolicyEvent {
        PolicyEvent::AuditFinished {
            audit,
            outcome,
            returned_events,
        }
    }

    #[test]
    fn an_export_is_an_owner_entry_in_audit_order_with_its_count() {
        // Given an owner's read (audit 1), an export (audit 2) and an agent's read (audit 3).
        let mut state = PolicyState::default();
        let export = PolicyEvent::OwnerExported {
            audit: 2,
            at_ms: T0 + 1,
            events: 500,
            first_sequence: 1,
            last_sequence: 520,
            encrypted: true,
        };
        state.apply(&export);
        assert_eq!(state.next_audit(), 3);
        let events = [
            started(1, T0, Principal::Owner, Verdict::Allowed),
            finished(1, AuditOutcome::Completed, 200),
            export,
            started(3, T0 + 2, Principal::Agent(actor("a")), Verdict::Allowed),
        ];
        // When the whole trail is read, then the export is the second entry, the owner's.
        let entries = audit_entries(&events, &AuditFilter::default());
        assert_eq!(entries.len(), 3);
        assert_eq!(entries[1].audit, 2);
        assert_eq!(entries[1].principal, Principal::Owner);
        assert_eq!(entries[1].operation, None);
        assert_eq!(entries[1].exported_events, Some(500));
        assert_eq!(entries[0].exported_events, None);
        // An agent's filter and the denied filter leave it out.
        let agent = AuditFilter {
            actor: Some(actor("a")),
            ..AuditFilter::default()
        };
        assert!(audit_entries(&events, &agent).iter().all(|e| e.audit == 3));
        let denied = AuditFilter {
            denied_only: true,
            ..AuditFilter::default()
        };
        assert!(audit_entries(&events, &denied).is_empty());
        // Its bounds: a count without sequences, or reversed sequences, are out of bounds.
        let bad = PolicyEvent::OwnerExported {
            audit: 2,
            at_ms: T0,
            events: 5,
            first_sequence: 0,
            last_sequence: 0,
            encrypted: false,
        };
        assert!(!bad.in_bounds(u64::MAX));
    }

    #[test]
    fn grants_are_listed_with_their_deadlines_and_liveness() {
        // Given a grant of one hour with a ten-minute idle timeout, issued at T0.
        let terms = GrantTerms::new(3_600, 600).unwrap();
        let mut state = PolicyState::default();
        state.apply(&PolicyState::grant_event(
            &actor("a"),
            Operation::Query,
            GrantSource::Owner,
            terms,
            T0,
        ));
        // When the owner looks within the idle timeout, then it is live with both deadlines.
        let views = state.grant_views(T0 + 1);
        assert_eq!(
            views,
            vec![GrantView {
                actor: actor("a"),
                operation: Operation::Query,
                source: GrantSource::Owner,
                expires_at_ms: T0 + secs_to_ms(3_600),
                idle_deadline_ms: T0 + secs_to_ms(600),
                last_used_ms: T0,
                live: true,
            }]
        );
        // When it went unused past its idle timeout, then it is listed and not live.
        assert!(!state.grant_views(T0 + secs_to_ms(601))[0].live);
        // When it is revoked, then it is gone and the actor is listed as revoked.
        state.apply(&PolicyEvent::ActorRevoked { actor: actor("a") });
        assert!(state.grant_views(T0 + 1).is_empty());
        assert_eq!(state.revoked_actors(), vec![actor("a")]);
    }

    #[test]
    fn audit_records_pair_into_one_entry_per_call_and_filter() {
        let a = Principal::Agent(actor("a"));
        let b = Principal::Agent(actor("b"));
        let denied = Verdict::Denied(DenyReason::NotGranted);
        let events = [
            started(1, T0, a.clone(), Verdict::Allowed),
            finished(1, AuditOutcome::Completed, 5),
            started(2, T0 + 10, b.clone(), denied),
            finished(
                2,
                AuditOutcome::Refused(Refusal::Denied(DenyReason::NotGranted)),
                0,
            ),
            started(3, T0 + 20, Principal::Owner, Verdict::Allowed),
            finished(3, AuditOutcome::Completed, 7),
            // A call whose completion never came (the process ended).
            started(4, T0 + 30, a.clone(), Verdict::Allowed),
            // A call naming a tool that does not exist: refused before any decision.
            PolicyEvent::UnknownToolRefused {
                audit: 5,
                at_ms: T0 + 40,
                principal: b.clone(),
            },
        ];
        let all = audit_entries(&events, &AuditFilter::default());
        assert_eq!(
            all.iter().map(|e| e.audit).collect::<Vec<_>>(),
            [1, 2, 3, 4, 5]
        );
        assert_eq!((all[4].operation, all[4].verdict), (None, None));
        assert_eq!(all[4].outcome.map(AuditOutcome::code), Some("unknown_tool"));
        assert_eq!(all[0].returned_events, 5);
        assert_eq!(all[0].outcome, Some(AuditOutcome::Completed));
        assert_eq!(all[3].outcome, None);
        let of_a = AuditFilter {
            actor: Some(actor("a")),
            ..AuditFilter::default()
        };
        assert_eq!(
            audit_entries(&events, &of_a)
                .iter()
                .map(|e| e.audit)
                .collect::<Vec<_>>(),
            [1, 4]
        );
        let denied_only = AuditFilter {
            denied_only: true,
            ..AuditFilter::default()
        };
        let denials = audit_entries(&events, &denied_only);
        assert_eq!(
            denials.iter().map(|e| e.audit).collect::<Vec<_>>(),
            [2, 5],
            "a denial and an unknown tool"
        );
        assert_eq!(denials[0].principal, b);
        let since = AuditFilter {
            since_ms: Some(T0 + 20),
            ..AuditFilter::default()
        };
        assert_eq!(
            audit_entries(&events, &since)
                .iter()
                .map(|e| e.audit)
                .collect::<Vec<_>>(),
            [3, 4, 5]
        );
    }
}
