//! The policy gate's rules: who may call `history_status` and `history_query`, now. Pure: the
//! caller passes the time; nothing here does I/O.
//!
//! Deny by default (ARCHITECTURE.md section 8). Each [`Operation`] has exactly one tool name and
//! one capability, and no tool picks its privilege from its arguments. An agent is allowed an
//! operation only by
//!
//! - a **grant** the owner issued to that actor for that operation (standard mode), with an
//!   absolute expiry and an idle timeout; or
//! - an approved **manifest** ([`manifest`]; bounded mode), which becomes grants of the same
//!   shape for the operations it names in both `allow.tools` and
//!   `resources.computer_history.operations`; or
//! - the engine running **unrestricted**, which only an explicit flag turns on;
//!
//! and never while history is not admitted or agents are globally disabled. Revocation and the
//! global switch are journaled like grants and take effect on the very next call.
//!
//! [`PolicyState::decide`] is the one place a decision is made, and the only way to get a
//! [`ReadGrant`], the proof the Query actor requires: a read that skipped the gate does not
//! compile.
//!
//! ```compile_fail
//! // A ReadGrant has no public constructor: only `PolicyState::decide` mints one.
//! let grant = annal_engine::policy::ReadGrant {
//!     principal: annal_engine::policy::Principal::Owner,
//!     operation: annal_engine::policy::Operation::Query,
//!     audit: 1,
//! };
//! ```
//!
//! # Layout
//!
//! - this module: [`ActorId`], [`Principal`], [`Operation`], the refusal codes ([`DenyReason`],
//!   [`CursorRefusal`], [`Refusal`]), grants ([`GrantTerms`], [`Grant`]), the journaled
//!   [`PolicyEvent`]s and their fold [`PolicyState`], the decision and [`ReadGrant`].
//! - [`manifest`]: the bounded-mode manifest (YAML or JSON, closed schema `version: 3`).
//! - [`cursor`]: single-use, actor-bound, authenticated paging cursors.
//!
//! `docs/policy.md` has the decision table and what the audit records hold.

pub mod cursor;
pub mod manifest;
pub mod views;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use annal_schema::ErrorCode;
use annal_schema::tools::{
    HISTORY_QUERY_CAPABILITY, HISTORY_QUERY_TOOL, HISTORY_STATUS_CAPABILITY, HISTORY_STATUS_TOOL,
};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Most characters of an actor id.
pub const ACTOR_ID_MAX_LEN_CHARS: usize = 64;

/// Longest a grant may last, in seconds (30 days): a grant is a standing permission, and a
/// bounded one is what the owner can reason about.
pub const GRANT_LIFETIME_MAX_SECS: u64 = 30 * 86_400;

/// Shortest idle timeout or lifetime a grant may have, in seconds.
pub const GRANT_DURATION_MIN_SECS: u64 = 1;

/// The one spelling of the owner as a principal in the journal (an actor id cannot contain
/// `@`, so no agent can be mistaken for the owner).
const OWNER_PRINCIPAL: &str = "@owner";

/// Milliseconds in a second.
const MS_PER_SEC: u64 = 1_000;

/// An agent's identity: 1..=[`ACTOR_ID_MAX_LEN_CHARS`] of `A-Z a-z 0-9 . _ -`, starting with a
/// letter or digit. Ids are attribution, not secrets; the charset keeps paths, URLs and free
/// text out.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ActorId(String);

/// An actor id was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("an actor id is 1 to 64 characters of A-Z a-z 0-9 . _ -, starting with a letter or digit")]
pub struct InvalidActorId;

impl ActorId {
    /// Validates an actor id.
    pub fn new(text: &str) -> Result<Self, InvalidActorId> {
        let bytes = text.as_bytes();
        let first_ok = bytes.first().is_some_and(u8::is_ascii_alphanumeric);
        let rest_ok = bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if first_ok && rest_ok && bytes.len() <= ACTOR_ID_MAX_LEN_CHARS {
            Ok(Self(text.to_owned()))
        } else {
            Err(InvalidActorId)
        }
    }

    /// The id.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ActorId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ActorId({})", self.0)
    }
}

impl fmt::Display for ActorId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for ActorId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for ActorId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Self::new(&text).map_err(serde::de::Error::custom)
    }
}

/// Who calls: the machine's owner (the local CLI, the embedder) or one agent.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Principal {
    /// The owner: reads as `local_cli`, needs no grant.
    Owner,
    /// One agent, identified individually.
    Agent(ActorId),
}

impl Principal {
    /// The journal's spelling: `@owner`, or the actor id.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Owner => OWNER_PRINCIPAL,
            Self::Agent(actor) => actor.as_str(),
        }
    }

    /// Parses the journal's spelling.
    pub fn parse(text: &str) -> Result<Self, InvalidActorId> {
        if text == OWNER_PRINCIPAL {
            Ok(Self::Owner)
        } else {
            ActorId::new(text).map(Self::Agent)
        }
    }
}

impl Serialize for Principal {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Principal {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Self::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// A gated operation. Each has exactly one tool and one capability.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Operation {
    /// `history_status` / `history.status`.
    Status,
    /// `history_query` / `history.query`.
    Query,
}

impl Operation {
    /// Every operation, in listing order.
    pub const ALL: [Operation; 2] = [Self::Status, Self::Query];

    /// The MCP tool name.
    pub fn tool(self) -> &'static str {
        match self {
            Self::Status => HISTORY_STATUS_TOOL,
            Self::Query => HISTORY_QUERY_TOOL,
        }
    }

    /// The capability name.
    pub fn capability(self) -> &'static str {
        match self {
            Self::Status => HISTORY_STATUS_CAPABILITY,
            Self::Query => HISTORY_QUERY_CAPABILITY,
        }
    }

    /// The manifest's operation name (`status`, `query`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Status => "status",
            Self::Query => "query",
        }
    }

    /// The operation a tool name stands for.
    pub fn from_tool(tool: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|op| op.tool() == tool)
    }

    /// The operation an operation name stands for.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|op| op.name() == name)
    }
}

/// Why the gate denied a call: a fixed code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DenyReason {
    /// The embedding runtime did not admit history (`EngineConfig::admitted`).
    NotAdmitted,
    /// The owner disabled every agent (`annal agents disable`).
    AgentsDisabled,
    /// This actor holds no grant for this operation.
    NotGranted,
    /// The grant's absolute expiry passed.
    Expired,
    /// The grant was not used within its idle timeout.
    IdleTimeout,
    /// The owner revoked this actor.
    Revoked,
}

impl DenyReason {
    /// Every reason.
    pub const ALL: [DenyReason; 6] = [
        Self::NotAdmitted,
        Self::AgentsDisabled,
        Self::NotGranted,
        Self::Expired,
        Self::IdleTimeout,
        Self::Revoked,
    ];

    /// The fixed code.
    pub fn code(self) -> &'static str {
        match self {
            Self::NotAdmitted => "not_admitted",
            Self::AgentsDisabled => "agents_disabled",
            Self::NotGranted => "not_granted",
            Self::Expired => "expired",
            Self::IdleTimeout => "idle_timeout",
            Self::Revoked => "revoked",
        }
    }

    /// The reason a code names.
    pub fn from_code(code: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.code() == code)
    }

    /// A short fixed sentence saying why (never a value the caller chose).
    pub fn message(self) -> &'static str {
        match self {
            Self::NotAdmitted => "history is not admitted for agents on this machine",
            Self::AgentsDisabled => "the owner has switched every agent off",
            Self::NotGranted => "this agent holds no grant for this tool",
            Self::Expired => "this agent's grant has expired",
            Self::IdleTimeout => "this agent's grant lapsed unused",
            Self::Revoked => "the owner revoked this agent",
        }
    }
}

/// Why a paging cursor was refused: a fixed code. None of them says more than its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CursorRefusal {
    /// Not a cursor annal issued (bad length, bad hex, failed authentication, tampered).
    Invalid,
    /// Older than `CURSOR_TTL_SECS`.
    Expired,
    /// Already used once.
    Replayed,
    /// Issued to another actor.
    ForeignActor,
    /// Issued for a query with other filters.
    FilterMismatch,
    /// Issued by an earlier run of the engine, or for another store.
    Stale,
}

impl CursorRefusal {
    /// Every refusal.
    pub const ALL: [CursorRefusal; 6] = [
        Self::Invalid,
        Self::Expired,
        Self::Replayed,
        Self::ForeignActor,
        Self::FilterMismatch,
        Self::Stale,
    ];

    /// The fixed code.
    pub fn code(self) -> &'static str {
        match self {
            Self::Invalid => "cursor_invalid",
            Self::Expired => "cursor_expired",
            Self::Replayed => "cursor_replayed",
            Self::ForeignActor => "cursor_foreign_actor",
            Self::FilterMismatch => "cursor_filter_mismatch",
            Self::Stale => "cursor_stale",
        }
    }

    /// The refusal a code names.
    pub fn from_code(code: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.code() == code)
    }

    /// A short fixed sentence saying why (never a value the caller chose).
    pub fn message(self) -> &'static str {
        match self {
            Self::Invalid => "the cursor is not one annal issued",
            Self::Expired => "the cursor expired: query again without it",
            Self::Replayed => "the cursor was used already",
            Self::ForeignActor => "the cursor was issued to another agent",
            Self::FilterMismatch => "the cursor was issued for other filters",
            Self::Stale => "the cursor is from an earlier run: query again without it",
        }
    }
}

/// Why a gated call returned nothing: the code a tool failure carries (`{"code": "..."}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// The gate denied it.
    Denied(DenyReason),
    /// Its cursor was refused.
    Cursor(CursorRefusal),
    /// The contract's code (bad arguments, storage or key failure).
    Contract(ErrorCode),
}

impl Refusal {
    /// The fixed code.
    pub fn code(self) -> &'static str {
        match self {
            Self::Denied(reason) => reason.code(),
            Self::Cursor(refusal) => refusal.code(),
            Self::Contract(code) => code.as_str(),
        }
    }

    /// A short fixed sentence saying why (never a value the caller chose; clients branch on
    /// [`Refusal::code`]).
    pub fn message(self) -> &'static str {
        match self {
            Self::Denied(reason) => reason.message(),
            Self::Cursor(refusal) => refusal.message(),
            Self::Contract(code) => code.message(),
        }
    }

    /// The refusal a code names.
    pub fn from_code(code: &str) -> Option<Self> {
        DenyReason::from_code(code)
            .map(Self::Denied)
            .or_else(|| CursorRefusal::from_code(code).map(Self::Cursor))
            .or_else(|| {
                ErrorCode::ALL
                    .into_iter()
                    .find(|c| c.as_str() == code)
                    .map(Self::Contract)
            })
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

impl Serialize for Refusal {
    /// `{"code": "..."}`, the structured failure of a tool call.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("Refusal", 1)?;
        st.serialize_field("code", self.code())?;
        st.end()
    }
}

/// Most characters of a `cursor` argument (every cursor annal issues has exactly
/// [`cursor::CURSOR_LEN_CHARS`]; anything longer is refused before it is read).
pub const CURSOR_ARGUMENT_MAX_LEN_CHARS: usize = 512;

/// Parses `history_query` arguments with the paging extension: the contract's closed fields
/// (through [`QueryRequest::parse`](annal_schema::tools::QueryRequest::parse), which refuses anything else) and an optional `cursor`
/// string. A `cursor` that is not a string of at most [`CURSOR_ARGUMENT_MAX_LEN_CHARS`] is
/// `invalid_history_query`.
pub fn parse_query_arguments(
    arguments: &serde_json::Value,
) -> Result<(annal_schema::tools::QueryRequest, Option<String>), ErrorCode> {
    let object = arguments
        .as_object()
        .ok_or(ErrorCode::InvalidHistoryQuery)?;
    let cursor = match object.get("cursor") {
        None => None,
        Some(serde_json::Value::String(text)) if text.len() <= CURSOR_ARGUMENT_MAX_LEN_CHARS => {
            Some(text.clone())
        }
        Some(_) => return Err(ErrorCode::InvalidHistoryQuery),
    };
    let request = if cursor.is_some() {
        let mut rest = object.clone();
        rest.remove("cursor");
        annal_schema::tools::QueryRequest::parse(&serde_json::Value::Object(rest))?
    } else {
        annal_schema::tools::QueryRequest::parse(arguments)?
    };
    Ok((request, cursor))
}

/// What a `cursor` argument is, as the input schema tells a client.
const CURSOR_ARGUMENT_DESCRIPTION: &str = "The `cursor` of the previous page's result, to read \
    the next page (single use, valid 60 s, only with the same filters).";

/// The arguments of `history_query` with the paging extension, as its input schema describes
/// them ([`query_input_schema`]): the contract's ([`QueryRequest`](annal_schema::tools::QueryRequest))
/// and an optional `cursor`. Never built: [`parse_query_arguments`] reads the arguments.
#[derive(schemars::JsonSchema)]
#[schemars(deny_unknown_fields)]
#[allow(dead_code)] // A description only (see above): its fields are never read.
struct PagedQueryArguments {
    #[schemars(flatten)]
    contract: annal_schema::tools::QueryRequest,
    #[schemars(
        length(max = CURSOR_ARGUMENT_MAX_LEN_CHARS),
        description = CURSOR_ARGUMENT_DESCRIPTION
    )]
    cursor: Option<String>,
}

/// The closed input schema of `history_query` with the paging extension, derived from
/// [`PagedQueryArguments`]: the contract's schema plus an optional `cursor` string (what
/// [`parse_query_arguments`] accepts). Still `additionalProperties: false`.
pub fn query_input_schema() -> serde_json::Value {
    annal_schema::tools::input_schema_for::<PagedQueryArguments>()
}

/// The output schema of `history_query` with the paging extension: the contract's
/// ([`annal_schema::tools::history_query_output_schema`]) plus `has_more: true` and the next
/// page's `cursor` when another page exists.
pub fn query_output_schema() -> serde_json::Value {
    let mut schema = annal_schema::tools::history_query_output_schema();
    if let Some(properties) = schema.get_mut("properties").and_then(|p| p.as_object_mut()) {
        properties.insert("has_more".into(), serde_json::json!({ "const": true }));
        properties.insert(
            "cursor".into(),
            serde_json::json!({ "type": "string", "maxLength": CURSOR_ARGUMENT_MAX_LEN_CHARS }),
        );
    }
    schema
}

/// How long a grant lasts: an absolute lifetime and an idle timeout, both within
/// [`GRANT_DURATION_MIN_SECS`]..=[`GRANT_LIFETIME_MAX_SECS`], the idle timeout no longer than
/// the lifetime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GrantTerms {
    expires_after_secs: u64,
    idle_timeout_secs: u64,
}

/// Grant terms were refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidTerms {
    /// The lifetime is zero or longer than [`GRANT_LIFETIME_MAX_SECS`].
    #[error("expires_after must be between 1 second and 30 days")]
    ExpiresAfter,
    /// The idle timeout is zero or longer than the lifetime.
    #[error("idle_timeout must be at least 1 second and no longer than expires_after")]
    IdleTimeout,
}

impl GrantTerms {
    /// The default of a grant the owner issues without saying: 1 hour, idle 10 minutes (the
    /// contract's example manifest).
    pub const DEFAULT: GrantTerms = GrantTerms {
        expires_after_secs: 3_600,
        idle_timeout_secs: 600,
    };

    /// Checked terms.
    pub fn new(expires_after_secs: u64, idle_timeout_secs: u64) -> Result<Self, InvalidTerms> {
        let range = GRANT_DURATION_MIN_SECS..=GRANT_LIFETIME_MAX_SECS;
        if !range.contains(&expires_after_secs) {
            return Err(InvalidTerms::ExpiresAfter);
        }
        if !range.contains(&idle_timeout_secs) || idle_timeout_secs > expires_after_secs {
            return Err(InvalidTerms::IdleTimeout);
        }
        Ok(Self {
            expires_after_secs,
            idle_timeout_secs,
        })
    }

    /// The lifetime, in seconds.
    pub fn expires_after_secs(self) -> u64 {
        self.expires_after_secs
    }

    /// The idle timeout, in seconds.
    pub fn idle_timeout_secs(self) -> u64 {
        self.idle_timeout_secs
    }
}

/// Where a grant came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GrantSource {
    /// The owner issued it (`annal grant`): standard mode.
    Owner,
    /// An approved manifest: bounded mode.
    Manifest,
    /// A manifest the owner approved again explicitly for an actor they had revoked
    /// (`annal mcp --reapprove`): bounded mode, and the journal says the revocation was lifted
    /// on purpose.
    ManifestReapproved,
}

/// One actor's standing permission for one operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    /// Where it came from.
    pub source: GrantSource,
    /// When it ends, in ms since the epoch.
    pub expires_at_ms: u64,
    /// How long it may go unused, in ms.
    pub idle_timeout_ms: u64,
    /// When it was issued or last allowed a call, in ms since the epoch (the idle clock).
    pub last_used_ms: u64,
}

/// What the gate decided, as the audit records it: allowed, or the reason it denied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// Allowed.
    Allowed,
    /// Denied, with why.
    Denied(DenyReason),
}

impl Verdict {
    /// `allowed` or the deny reason's code.
    pub fn code(self) -> &'static str {
        match self {
            Self::Allowed => "allowed",
            Self::Denied(reason) => reason.code(),
        }
    }

    /// The verdict a code names.
    pub fn from_code(code: &str) -> Option<Self> {
        if code == "allowed" {
            return Some(Self::Allowed);
        }
        DenyReason::from_code(code).map(Self::Denied)
    }
}

/// How a gated operation ended, as the audit records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AuditOutcome {
    /// It ran and answered.
    Completed,
    /// It returned nothing, with this code (a denial, a refused cursor, a store failure).
    Refused(Refusal),
}

impl AuditOutcome {
    /// `completed` or the refusal's code.
    pub fn code(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::Refused(refusal) => refusal.code(),
        }
    }

    /// The outcome a code names.
    pub fn from_code(code: &str) -> Option<Self> {
        if code == "completed" {
            return Some(Self::Completed);
        }
        Refusal::from_code(code).map(Self::Refused)
    }
}

/// A policy fact, journaled (the engine journal's closed schema holds these; no argument,
/// filter value, label or content can be expressed in one).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PolicyEvent {
    /// A grant was issued (replacing the actor's earlier grant for the operation).
    GrantIssued {
        /// To whom.
        actor: ActorId,
        /// For what.
        operation: Operation,
        /// By whom.
        source: GrantSource,
        /// When it was issued, in ms since the epoch (its idle clock starts then).
        issued_at_ms: u64,
        /// When it ends, in ms since the epoch.
        expires_at_ms: u64,
        /// How long it may go unused, in ms.
        idle_timeout_ms: u64,
    },
    /// One grant was withdrawn: the undo of a [`PolicyEvent::GrantIssued`] whose commit failed
    /// where the actor had no grant for the operation before (`journal::failed_commit`).
    /// Unlike [`PolicyEvent::ActorRevoked`] it leaves the actor's other grants alone and does
    /// not mark the actor revoked: the policy is again what it was before the grant.
    GrantWithdrawn {
        /// From whom.
        actor: ActorId,
        /// For what.
        operation: Operation,
    },
    /// Every grant of an actor was revoked.
    ActorRevoked {
        /// Whom.
        actor: ActorId,
    },
    /// The owner switched every agent off or back on.
    AgentsSwitched {
        /// Agents may be allowed again (`true`) or none may (`false`).
        enabled: bool,
    },
    /// The owner chose whether their own reads (recorded `local_cli`) append the contract's
    /// `access` event (`true`, the default, as the contract wants) or not. Agents' reads
    /// append theirs either way, and the audit records every read either way.
    OwnerAccessSwitched {
        /// The owner's reads append the `access` event.
        enabled: bool,
    },
    /// A gated operation is about to run, or was denied: durable before it runs.
    AuditStarted {
        /// The audit id (pairs this with its [`PolicyEvent::AuditFinished`]).
        audit: u64,
        /// When the call was decided, in ms since the epoch (an allowed call restarts the
        /// grant's idle clock then).
        at_ms: u64,
        /// Who called.
        principal: Principal,
        /// Which operation.
        operation: Operation,
        /// The gate's verdict.
        verdict: Verdict,
    },
    /// A call named a tool that is neither `history_status` nor `history_query`: refused
    /// `unknown_tool` before any decision (it names no operation), and audited as that
    /// refusal in one record. The name it called is caller text and is never recorded.
    UnknownToolRefused {
        /// The audit id (no completion record follows: this is the whole call).
        audit: u64,
        /// When it was refused, in ms since the epoch.
        at_ms: u64,
        /// Who called.
        principal: Principal,
    },
    /// The owner exported history (`annal export`): recorded once the archive's content was
    /// read, beside the owner's reads (`local_cli` queries, one per page) it was made of. It
    /// takes an audit id of its own, so `annal audit` lists it in order.
    OwnerExported {
        /// Its audit id (no completion record follows: this is the whole record).
        audit: u64,
        /// When it was recorded, in ms since the epoch.
        at_ms: u64,
        /// Events in the archive.
        events: u64,
        /// The first event's `data.sequence` (0 when there is none).
        first_sequence: u64,
        /// The last event's `data.sequence` (0 when there is none).
        last_sequence: u64,
        /// Encrypted to age recipients (`false`: `--plaintext`).
        encrypted: bool,
    },
    /// A gated operation ended.
    AuditFinished {
        /// The audit id of its [`PolicyEvent::AuditStarted`].
        audit: u64,
        /// How it ended.
        outcome: AuditOutcome,
        /// How many events it returned (0..=200).
        returned_events: u16,
    },
}

/// Most events one operation may return (the contract's `limit` maximum).
pub const AUDIT_RETURNED_EVENTS_MAX: u16 = annal_schema::tools::QUERY_LIMIT_MAX_EVENTS as u16;

impl PolicyEvent {
    /// Whether every bound holds (audit ids >= 1, counts within the limit, times in range).
    pub fn in_bounds(&self, time_max_ms: u64) -> bool {
        match self {
            Self::GrantIssued {
                issued_at_ms,
                expires_at_ms,
                idle_timeout_ms,
                ..
            } => {
                *expires_at_ms <= time_max_ms
                    && issued_at_ms <= expires_at_ms
                    && (GRANT_DURATION_MIN_SECS * MS_PER_SEC..=GRANT_LIFETIME_MAX_SECS * MS_PER_SEC)
                        .contains(idle_timeout_ms)
            }
            Self::GrantWithdrawn { .. }
            | Self::ActorRevoked { .. }
            | Self::AgentsSwitched { .. }
            | Self::OwnerAccessSwitched { .. } => true,
            Self::AuditStarted { audit, at_ms, .. }
            | Self::UnknownToolRefused { audit, at_ms, .. } => *audit >= 1 && *at_ms <= time_max_ms,
            Self::OwnerExported {
                audit,
                at_ms,
                events,
                first_sequence,
                last_sequence,
                ..
            } => {
                *audit >= 1
                    && *at_ms <= time_max_ms
                    && first_sequence <= last_sequence
                    && (*events == 0) == (*last_sequence == 0)
                    && (*events == 0) == (*first_sequence == 0)
            }
            Self::AuditFinished {
                audit,
                returned_events,
                ..
            } => *audit >= 1 && *returned_events <= AUDIT_RETURNED_EVENTS_MAX,
        }
    }
}

/// Whether the embedding runtime and the owner let agents near history at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admission {
    /// The embedder admitted history and the owner enabled it.
    pub admitted: bool,
    /// The engine runs unrestricted (an explicit flag; never a default).
    pub unrestricted: bool,
}

/// The gate's proof that one call was decided and allowed. Only [`PolicyState::decide`] makes
/// one (the fields are private and there is no other constructor), and the Query actor will
/// not read without it. Not `Clone`: one decision, one operation.
#[derive(Debug)]
pub struct ReadGrant {
    principal: Principal,
    operation: Operation,
    audit: u64,
}

impl ReadGrant {
    /// Who was allowed.
    pub fn principal(&self) -> &Principal {
        &self.principal
    }

    /// What they were allowed.
    pub fn operation(&self) -> Operation {
        self.operation
    }

    /// The audit id of the pre-execution record.
    pub fn audit(&self) -> u64 {
        self.audit
    }
}

/// The policy, as the journal's events made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyState {
    /// Standing grants, per actor and operation.
    grants: BTreeMap<(ActorId, Operation), Grant>,
    /// Actors revoked since their last grant (their calls are denied `revoked`).
    revoked: BTreeSet<ActorId>,
    /// Agents may be allowed at all (the owner's global switch).
    agents_enabled: bool,
    /// The owner's own reads append the contract's `access` event (the owner's setting).
    owner_access_events: bool,
    /// The highest audit id used.
    last_audit: u64,
}

impl Default for PolicyState {
    /// No grants, nobody revoked, agents not globally disabled, the owner's reads recorded by
    /// `access` events, no audit yet: deny by default.
    fn default() -> Self {
        Self {
            grants: BTreeMap::new(),
            revoked: BTreeSet::new(),
            agents_enabled: true,
            owner_access_events: true,
            last_audit: 0,
        }
    }
}

impl PolicyState {
    /// When `event` widens what agents may do against this state (the one before it): the
    /// events that restore this state exactly, for a commit of `event` that failed
    /// (`journal::failed_commit`). `None` when it narrows that or leaves it alone.
    pub fn undo_widening(&self, event: &PolicyEvent) -> Option<Vec<PolicyEvent>> {
        match event {
            PolicyEvent::GrantIssued {
                actor, operation, ..
            } => {
                let actor = actor.clone();
                let operation = *operation;
                // A revoked actor holds no grant (a revocation removes them all), so revoking
                // again restores it; an earlier grant is issued again with its own terms and
                // idle clock; otherwise the one grant goes and nothing else changes.
                Some(vec![if self.revoked.contains(&actor) {
                    PolicyEvent::ActorRevoked { actor }
                } else if let Some(grant) = self.grants.get(&(actor.clone(), operation)) {
                    PolicyEvent::GrantIssued {
                        actor,
                        operation,
                        source: grant.source,
                        issued_at_ms: grant.last_used_ms.min(grant.expires_at_ms),
                        expires_at_ms: grant.expires_at_ms,
                        idle_timeout_ms: grant.idle_timeout_ms,
                    }
                } else {
                    PolicyEvent::GrantWithdrawn { actor, operation }
                }])
            }
            PolicyEvent::AgentsSwitched { enabled: true } if !self.agents_enabled => {
                Some(vec![PolicyEvent::AgentsSwitched { enabled: false }])
            }
            // More is captured again: a widening of capture, as `resume` is.
            PolicyEvent::OwnerAccessSwitched { enabled: true } if !self.owner_access_events => {
                Some(vec![PolicyEvent::OwnerAccessSwitched { enabled: false }])
            }
            PolicyEvent::GrantWithdrawn { .. }
            | PolicyEvent::ActorRevoked { .. }
            | PolicyEvent::AgentsSwitched { .. }
            | PolicyEvent::OwnerAccessSwitched { .. }
            | PolicyEvent::AuditStarted { .. }
            | PolicyEvent::UnknownToolRefused { .. }
            | PolicyEvent::OwnerExported { .. }
            | PolicyEvent::AuditFinished { .. } => None,
        }
    }

    /// Applies one journaled policy fact.
    pub fn apply(&mut self, event: &PolicyEvent) {
        match event {
            PolicyEvent::GrantIssued {
                actor,
                operation,
                source,
                issued_at_ms,
                expires_at_ms,
                idle_timeout_ms,
            } => {
                self.revoked.remove(actor);
                self.grants.insert(
                    (actor.clone(), *operation),
                    Grant {
                        source: *source,
                        expires_at_ms: *expires_at_ms,
                        idle_timeout_ms: *idle_timeout_ms,
                        last_used_ms: *issued_at_ms,
                    },
                );
            }
            PolicyEvent::GrantWithdrawn { actor, operation } => {
                self.grants.remove(&(actor.clone(), *operation));
            }
            PolicyEvent::ActorRevoked { actor } => {
                for operation in Operation::ALL {
                    self.grants.remove(&(actor.clone(), operation));
                }
                self.revoked.insert(actor.clone());
            }
            PolicyEvent::AgentsSwitched { enabled } => self.agents_enabled = *enabled,
            PolicyEvent::OwnerAccessSwitched { enabled } => self.owner_access_events = *enabled,
            PolicyEvent::AuditStarted {
                audit,
                at_ms,
                principal,
                operation,
                verdict,
            } => {
                self.last_audit = self.last_audit.max(*audit);
                // An allowed call restarts the idle clock: idleness survives restarts because
                // the audit record that proves the use is the one that resets it.
                if let (Verdict::Allowed, Principal::Agent(actor)) = (verdict, principal)
                    && let Some(grant) = self.grants.get_mut(&(actor.clone(), *operation))
                {
                    grant.last_used_ms = grant.last_used_ms.max(*at_ms);
                }
            }
            PolicyEvent::AuditFinished { audit, .. }
            | PolicyEvent::UnknownToolRefused { audit, .. }
            | PolicyEvent::OwnerExported { audit, .. } => {
                self.last_audit = self.last_audit.max(*audit);
            }
        }
    }

    /// The audit id the next gated call takes.
    pub fn next_audit(&self) -> u64 {
        self.last_audit.saturating_add(1)
    }

    /// Whether agents are globally enabled.
    pub fn agents_enabled(&self) -> bool {
        self.agents_enabled
    }

    /// Whether the owner's own reads append the contract's `access` event (the owner's
    /// setting, default `true`).
    pub fn owner_access_events(&self) -> bool {
        self.owner_access_events
    }

    /// Whether a read by `principal`, recorded as `access`, appends the contract's `access`
    /// event when it returns events: an agent's read (`agent_query`) always; the owner's own
    /// (`local_cli`) unless the owner switched that off ([`PolicyEvent::OwnerAccessSwitched`]).
    /// The audit journal records every read either way.
    pub fn appends_access(
        &self,
        principal: &Principal,
        access: annal_schema::AccessOperation,
    ) -> bool {
        match (principal, access) {
            (Principal::Owner, annal_schema::AccessOperation::LocalCli) => self.owner_access_events,
            _ => true,
        }
    }

    /// The grant `actor` holds for `operation`, if any (expired ones included).
    pub fn grant(&self, actor: &ActorId, operation: Operation) -> Option<&Grant> {
        self.grants.get(&(actor.clone(), operation))
    }

    /// Every standing grant, by actor and operation.
    pub fn grants(&self) -> impl Iterator<Item = (&ActorId, Operation, &Grant)> {
        self.grants
            .iter()
            .map(|((actor, operation), grant)| (actor, *operation, grant))
    }

    /// Whether `actor` was revoked and not granted again since.
    pub fn is_revoked(&self, actor: &ActorId) -> bool {
        self.revoked.contains(actor)
    }

    /// Why `principal` may not call `operation` at `now_ms`, or `None` when it may. The order
    /// of the checks is the decision table of `docs/policy.md`.
    pub fn deny_reason(
        &self,
        principal: &Principal,
        operation: Operation,
        admission: Admission,
        now_ms: u64,
    ) -> Option<DenyReason> {
        let Principal::Agent(actor) = principal else {
            // The owner reads their own history; no grant is involved.
            return None;
        };
        if !admission.admitted {
            return Some(DenyReason::NotAdmitted);
        }
        if !self.agents_enabled {
            return Some(DenyReason::AgentsDisabled);
        }
        if admission.unrestricted {
            return None;
        }
        let Some(grant) = self.grant(actor, operation) else {
            return Some(if self.is_revoked(actor) {
                DenyReason::Revoked
            } else {
                DenyReason::NotGranted
            });
        };
        if now_ms >= grant.expires_at_ms {
            return Some(DenyReason::Expired);
        }
        if now_ms.saturating_sub(grant.last_used_ms) >= grant.idle_timeout_ms {
            return Some(DenyReason::IdleTimeout);
        }
        None
    }

    /// Decides one call. Allowed: the [`ReadGrant`] for it, under audit id `audit`. Denied: the
    /// reason. Either way the caller records the verdict ([`PolicyEvent::AuditStarted`]) before
    /// anything runs.
    pub fn decide(
        &self,
        principal: &Principal,
        operation: Operation,
        admission: Admission,
        now_ms: u64,
        audit: u64,
    ) -> Result<ReadGrant, DenyReason> {
        match self.deny_reason(principal, operation, admission, now_ms) {
            Some(reason) => Err(reason),
            None => Ok(ReadGrant {
                principal: principal.clone(),
                operation,
                audit,
            }),
        }
    }

    /// The tools `principal` may call at `now_ms` (what the MCP server lists): none when
    /// history is not admitted, agents are disabled, or the actor holds no live grant.
    pub fn tools_for(
        &self,
        principal: &Principal,
        admission: Admission,
        now_ms: u64,
    ) -> Vec<Operation> {
        Operation::ALL
            .into_iter()
            .filter(|op| {
                self.deny_reason(principal, *op, admission, now_ms)
                    .is_none()
            })
            .collect()
    }

    /// The grants approving `manifest` for `actor` at `now_ms`: one per operation it names.
    /// A revocation sticks: for an actor revoked since its last grant, a manifest presented
    /// again (each `annal mcp --manifest` start presents it) grants nothing, unless the owner
    /// approves it again explicitly (`reapprove`), which is journaled as
    /// [`GrantSource::ManifestReapproved`]. Only an owner's grant or that lifts a revocation.
    pub fn manifest_approval(
        &self,
        actor: &ActorId,
        manifest: &manifest::Manifest,
        reapprove: bool,
        now_ms: u64,
    ) -> Vec<PolicyEvent> {
        let source = match (self.revoked.contains(actor), reapprove) {
            (true, false) => return Vec::new(),
            (true, true) => GrantSource::ManifestReapproved,
            (false, _) => GrantSource::Manifest,
        };
        manifest
            .operations()
            .iter()
            .map(|operation| Self::grant_event(actor, *operation, source, manifest.terms(), now_ms))
            .collect()
    }

    /// The grant event for `actor` and `operation` under `terms`, issued at `now_ms`.
    pub fn grant_event(
        actor: &ActorId,
        operation: Operation,
        source: GrantSource,
        terms: GrantTerms,
        now_ms: u64,
    ) -> PolicyEvent {
        PolicyEvent::GrantIssued {
            actor: actor.clone(),
            operation,
            source,
            issued_at_ms: now_ms,
            expires_at_ms: now_ms.saturating_add(terms.expires_after_secs * MS_PER_SEC),
            idle_timeout_ms: terms.idle_timeout_secs * MS_PER_SEC,
        }
    }
}

/// Serde as the fixed code string (the journal's spelling).
macro_rules! serde_as_code {
    ($type:ty) => {
        impl Serialize for $type {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.code())
            }
        }

        impl<'de> Deserialize<'de> for $type {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = String::deserialize(d)?;
                Self::from_code(&text).ok_or_else(|| serde::de::Error::custom("unknown code"))
            }
        }
    };
}

serde_as_code!(Verdict);
serde_as_code!(AuditOutcome);
