//! The message interface of the AuditJournal actor (the policy issue implements it).
//!
//! For every gated operation, allowed or denied, a pre-execution record is made durable before
//! the operation runs, and a completion or failure record follows; records carry actor,
//! capability, decision, outcome category and returned count, never arguments or content.

use ractor::RpcReplyPort;

/// Whether a gated operation was allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AuditDecision {
    /// The gate allowed it.
    Allowed,
    /// The gate denied it.
    Denied,
}

/// What the AuditJournal actor will be asked.
pub enum AuditMsg {
    /// Record, durably, that an operation is about to run (or was denied); the operation runs
    /// only after a successful reply.
    PreExecution {
        /// The gate's decision.
        decision: AuditDecision,
        /// `Ok` once durable.
        reply: RpcReplyPort<Result<(), ()>>,
    },
    /// Record how the operation ended.
    Completion {
        /// How many events it returned.
        returned_events: u16,
    },
}
