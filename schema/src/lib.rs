//! annal-schema: the v0 history event contract and the history tools' I/O, as closed types.
//!
//! Nothing here does I/O. Every type rejects what the contract forbids at deserialization, so an
//! event that breaks the contract cannot be read or returned (ARCHITECTURE.md section 2,
//! `shared/contracts/history-event-v0.schema.json`).
//!
//! Read leniently, write strictly: deserialization accepts what the published JSON Schema and the
//! reference implementation accept (a reader must not refuse a whole chunk over one
//! reference-written name), while the constructors and [`Event::check_write_rules`] hold what
//! annal itself writes to narrower rules. `docs/event-contract.md` lists both.
//!
//! # Layout
//!
//! - [`event`]: the CloudEvents envelope, closed `data`, the payload enum and every enumerated
//!   field, with the reference's field order on output; [`EventDraft`], an event before the
//!   writer assigns its identity.
//! - `compact` (private): [`Event::write_compact_json`], the writer's fast path to the same
//!   bytes as serde_json.
//! - [`ids`]: bounded identifier and name newtypes (`OpaqueId`, `Sequence`, `Capability`,
//!   `BundleId`, `DisplayName`, `Subject`, `SourceUrn`).
//! - [`time`]: RFC 3339 event time, kept verbatim (UTC with `Z` when annal writes it).
//! - [`tools`]: tool and capability names, `history_status` / `history_query` I/O, the query
//!   request parser and the tools' closed input schemas.
//! - [`health`]: the 13 fixed health categories.
//! - [`error_code`]: the fixed structured error codes of the tools.
//! - [`privacy`]: the field names that must never be persisted or returned.
#![forbid(unsafe_code)]

mod compact;
pub mod error_code;
pub mod event;
pub mod health;
pub mod ids;
pub mod privacy;
pub mod time;
pub mod tools;

pub use error_code::ErrorCode;
pub use event::{
    AccessOperation, ActionOutcome, Application, CallerCategory, ControlOperation, DATASCHEMA_V0,
    Delivery, Effect, EscalationKind, Event, EventData, EventDraft, EventError, EventErrorKind,
    EventType, EvidenceKind, EvidenceKinds, InvalidApplication, Payload, Platform, ProcessModel,
    ReturnedEvents, Route, SessionPhase, WriteRuleViolation,
};
pub use health::HealthCategory;
pub use ids::{
    BundleId, Capability, DisplayName, InvalidId, OpaqueId, Sequence, SourceUrn, Subject,
};
pub use time::{EventTime, InvalidTime};
