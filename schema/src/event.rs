//! The v0 history event: a CloudEvents 1.0 envelope around closed `data`.
//!
//! Read leniently, write strictly. Deserialization accepts what the published JSON Schema
//! accepts (and the reference writes), so one reference-written record with, say, a process
//! name as `bundle_id` never makes a reader refuse its chunk. It still refuses anything the
//! schema refuses: unknown fields at every level, `null` where a value is optional, out-of-range
//! numbers, unknown enum strings, ids of the wrong form. It is stricter than the schema in three
//! documented places: an event `type` that disagrees with the payload `kind` (the reference never
//! writes one; the event type is not stored but computed from the payload, so a mismatched pair
//! cannot even be built), application names that are padded or span lines (the reference's own
//! rule), and values annal cannot represent (a time before the Unix epoch, an integer beyond
//! `u64`).
//!
//! What annal itself writes must also pass its narrower write rules
//! ([`Event::check_write_rules`]): names without control characters, URLs, paths, query strings
//! or (display names) window titles, capabilities as identifiers, UTC times with `Z`. A value read leniently that breaks them is still a valid
//! [`Event`] to hold and return.
//!
//! Serialization is compact JSON in the reference implementation's field order, so an event read
//! from a reference chunk re-serializes to the identical bytes.

use std::fmt;

use serde::ser::{SerializeMap, SerializeStruct};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::HealthCategory;
use crate::ids::{
    BundleId, Capability, DisplayName, InvalidId, OpaqueId, Sequence, SourceUrn, Subject,
    deserialize_json_integer,
};
use crate::time::EventTime;

/// The `dataschema` of every v0 event.
pub const DATASCHEMA_V0: &str = "urn:cua-driver:schema:history-event:v0";
/// The CloudEvents `specversion`.
pub const SPEC_VERSION: &str = "1.0";
/// The `datacontenttype` of every v0 event.
pub const DATA_CONTENT_TYPE: &str = "application/json";

/// Most entries in `evidence_kinds`.
pub const EVIDENCE_KINDS_MAX_ITEMS: usize = 16;
/// Largest `returned_events` in an access payload: one read returns at most one query limit.
pub const RETURNED_EVENTS_MAX: u8 = crate::tools::QUERY_LIMIT_MAX_EVENTS;

/// One history event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Unique id of this event within its source.
    pub id: OpaqueId,
    /// The history stream that produced it.
    pub source: SourceUrn,
    /// CloudEvents subject (`control`, `session`, `action/<id>`, `access`, `writer`).
    pub subject: Subject,
    /// When it happened.
    pub time: EventTime,
    /// The closed metadata payload.
    pub data: EventData,
}

impl Event {
    /// The CloudEvents `type`, implied by the payload.
    pub fn event_type(&self) -> EventType {
        self.data.payload.event_type()
    }

    /// Parses compact or pretty JSON bytes under the read rules, refusing anything
    /// off-contract.
    pub fn from_json_slice(bytes: &[u8]) -> Result<Self, EventError> {
        serde_json::from_slice(bytes).map_err(EventError::from_json)
    }

    /// Parses a JSON value under the read rules, refusing anything off-contract.
    pub fn from_json_value(value: serde_json::Value) -> Result<Self, EventError> {
        serde_json::from_value(value).map_err(EventError::from_json)
    }

    /// Compact JSON in the reference's field order.
    pub fn to_json_vec(&self) -> Vec<u8> {
        let mut out = Vec::new();
        // It reserves a typical event's length itself.
        self.write_compact_json(&mut out);
        out
    }

    /// The draft this event was, without `id`, `source` and `sequence` (the fields the writer
    /// assigns). `process_model` and `caller_category` are single-valued in v0, so nothing else
    /// is lost.
    pub fn to_draft(&self) -> EventDraft {
        EventDraft {
            subject: self.subject.clone(),
            time: self.time.clone(),
            session_id: self.data.session_id.clone(),
            action_id: self.data.action_id.clone(),
            platform: self.data.platform,
            capability: self.data.capability.clone(),
            application: self.data.application.clone(),
            payload: self.data.payload.clone(),
        }
    }

    /// Checks annal's write rules, which are narrower than the read rules: an event read from a
    /// reference chunk may break them and still be valid to hold and return, but annal must not
    /// write one that does. Names the first offending field in wire order.
    pub fn check_write_rules(&self) -> Result<(), WriteRuleViolation> {
        check_write_rules(
            &self.subject,
            &self.time,
            self.data.capability.as_ref(),
            self.data.application.as_ref(),
        )
    }
}

/// An event before the writer has assigned its identity. Capture has no sequence: the writer
/// assigns `id`, `source` and `sequence` at dequeue, so capture hands it one of these.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventDraft {
    /// CloudEvents subject (`control`, `session`, `action/<id>`, `access`, `writer`).
    pub subject: Subject,
    /// When it happened (at capture, not at dequeue).
    pub time: EventTime,
    /// Keyed (opaque) session id; never the raw label.
    pub session_id: Option<OpaqueId>,
    /// Opaque id pairing an action's started and completed events.
    pub action_id: Option<OpaqueId>,
    /// The desktop platform.
    pub platform: Platform,
    /// The Cua capability an action used.
    pub capability: Option<Capability>,
    /// Fixed application identity fields, when known.
    pub application: Option<Application>,
    /// What happened.
    pub payload: Payload,
}

impl EventDraft {
    /// The event this draft becomes once the writer assigns its identity. `process_model` and
    /// `caller_category` have one value each in v0, so they are filled here.
    pub fn into_event(self, id: OpaqueId, source: SourceUrn, sequence: Sequence) -> Event {
        Event {
            id,
            source,
            subject: self.subject,
            time: self.time,
            data: EventData {
                session_id: self.session_id,
                action_id: self.action_id,
                sequence,
                platform: self.platform,
                process_model: ProcessModel::InDaemon,
                capability: self.capability,
                caller_category: CallerCategory::CuaRuntime,
                application: self.application,
                payload: self.payload,
            },
        }
    }

    /// Checks annal's write rules before the draft is queued, as [`Event::check_write_rules`]
    /// does for an event (a draft's identity fields cannot break them).
    pub fn check_write_rules(&self) -> Result<(), WriteRuleViolation> {
        check_write_rules(
            &self.subject,
            &self.time,
            self.capability.as_ref(),
            self.application.as_ref(),
        )
    }
}

/// The write-rule check shared by [`Event`] and [`EventDraft`]. Ids, sources and sequences have
/// one rule set, so only these fields can break a write rule.
fn check_write_rules(
    subject: &Subject,
    time: &EventTime,
    capability: Option<&Capability>,
    application: Option<&Application>,
) -> Result<(), WriteRuleViolation> {
    if !subject.meets_write_rules() {
        return Err(WriteRuleViolation::Subject);
    }
    if !time.meets_write_rules() {
        return Err(WriteRuleViolation::Time);
    }
    if capability.is_some_and(|c| !c.meets_write_rules()) {
        return Err(WriteRuleViolation::Capability);
    }
    if let Some(application) = application {
        if application
            .bundle_id()
            .is_some_and(|b| !b.meets_write_rules())
        {
            return Err(WriteRuleViolation::BundleId);
        }
        if application
            .display_name()
            .is_some_and(|d| !d.meets_write_rules())
        {
            return Err(WriteRuleViolation::DisplayName);
        }
    }
    Ok(())
}

/// The field of an event that breaks annal's write rules. Names the field, never its value (the
/// value may be content that must not reach a log).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WriteRuleViolation {
    /// `subject` holds a control character.
    Subject,
    /// `time` is not `YYYY-MM-DDTHH:MM:SS[.fraction]Z` within annal's range (see
    /// [`crate::time`]).
    Time,
    /// `data.capability` is not `[a-z0-9._-]` starting with a letter.
    Capability,
    /// `data.application.bundle_id` holds whitespace or a control character, a URL, a path or a
    /// query string ([`BundleId::new`]).
    BundleId,
    /// `data.application.display_name` holds a control character or is padded, or holds a URL,
    /// a path, a query string or a window title's separator ([`DisplayName::new`]).
    DisplayName,
    /// An engine-journal record's `time_ms` is beyond annal's time range.
    JournalTime,
    /// An engine-journal record's `event` holds a value outside its bounds.
    JournalEvent,
}

impl WriteRuleViolation {
    /// The offending field's path in the event JSON, such as `data.capability`.
    pub const fn field(self) -> &'static str {
        match self {
            Self::Subject => "subject",
            Self::Time => "time",
            Self::Capability => "data.capability",
            Self::BundleId => "data.application.bundle_id",
            Self::DisplayName => "data.application.display_name",
            Self::JournalTime => "time_ms",
            Self::JournalEvent => "event",
        }
    }
}

impl fmt::Display for WriteRuleViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}` breaks annal's write rules", self.field())
    }
}

impl std::error::Error for WriteRuleViolation {}

/// Why bytes are not a v0 event. It says where parsing stopped and what kind of failure it was,
/// never the offending value (it may be content that must not reach a log).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventError {
    /// What kind of failure.
    pub kind: EventErrorKind,
    /// 1-based line where parsing stopped (0 if unknown).
    pub line: usize,
    /// 1-based column where parsing stopped (0 if unknown).
    pub column: usize,
}

/// The kinds of [`EventError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum EventErrorKind {
    /// Not well-formed JSON.
    Syntax,
    /// The input ended early.
    Eof,
    /// Well-formed JSON that breaks the v0 contract.
    Contract,
}

impl EventError {
    fn from_json(error: serde_json::Error) -> Self {
        use serde_json::error::Category;
        let kind = match error.classify() {
            Category::Syntax | Category::Io => EventErrorKind::Syntax,
            Category::Eof => EventErrorKind::Eof,
            Category::Data => EventErrorKind::Contract,
        };
        Self {
            kind,
            line: error.line(),
            column: error.column(),
        }
    }
}

impl fmt::Display for EventError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.kind {
            EventErrorKind::Syntax => "malformed JSON",
            EventErrorKind::Eof => "truncated JSON",
            EventErrorKind::Contract => "JSON that breaks the v0 event contract",
        };
        write!(f, "{what} at line {} column {}", self.line, self.column)
    }
}

impl std::error::Error for EventError {}

/// The seven event types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum EventType {
    /// A user lifecycle operation.
    #[serde(rename = "cua-driver.history.control.v0")]
    Control,
    /// A Cua-mediated action began.
    #[serde(rename = "cua-driver.history.action_started.v0")]
    ActionStarted,
    /// A Cua-mediated action's validated outcome.
    #[serde(rename = "cua-driver.history.action_completed.v0")]
    ActionCompleted,
    /// A driver session began.
    #[serde(rename = "cua-driver.history.session_started.v0")]
    SessionStarted,
    /// A driver session ended.
    #[serde(rename = "cua-driver.history.session_ended.v0")]
    SessionEnded,
    /// A local CLI or agent query returned events.
    #[serde(rename = "cua-driver.history.access.v0")]
    Access,
    /// A fixed writer-health or dropped-event marker.
    #[serde(rename = "cua-driver.history.health.v0")]
    Health,
}

impl EventType {
    /// Every type.
    pub const ALL: [EventType; 7] = [
        Self::Control,
        Self::ActionStarted,
        Self::ActionCompleted,
        Self::SessionStarted,
        Self::SessionEnded,
        Self::Access,
        Self::Health,
    ];

    /// The exact wire string.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Control => "cua-driver.history.control.v0",
            Self::ActionStarted => "cua-driver.history.action_started.v0",
            Self::ActionCompleted => "cua-driver.history.action_completed.v0",
            Self::SessionStarted => "cua-driver.history.session_started.v0",
            Self::SessionEnded => "cua-driver.history.session_ended.v0",
            Self::Access => "cua-driver.history.access.v0",
            Self::Health => "cua-driver.history.health.v0",
        }
    }
}

/// The closed `data` object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventData {
    /// Keyed (opaque) session id; never the raw label.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub session_id: Option<OpaqueId>,
    /// Opaque id pairing an action's started and completed events.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub action_id: Option<OpaqueId>,
    /// Position in the stream, assigned by the writer.
    pub sequence: Sequence,
    /// The desktop platform.
    pub platform: Platform,
    /// Where the driver runs (always `in_daemon` in v0).
    pub process_model: ProcessModel,
    /// The Cua capability an action used.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub capability: Option<Capability>,
    /// Who called the driver (always `cua_runtime` in v0).
    pub caller_category: CallerCategory,
    /// Fixed application identity fields, when known.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub application: Option<Application>,
    /// What happened.
    pub payload: Payload,
}

/// Deserializes an optional field that, when present, must hold a value (`null` is refused:
/// the JSON Schema has no `null` in any enum or type).
fn present<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(d).map(Some)
}

/// [`present`] for an integer field, read by the one shared integer reader.
fn present_integer<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    deserialize_json_integer(d).map(Some)
}

macro_rules! wire_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident => $wire:literal,)+ }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum $name {
            $($(#[$vmeta])* #[serde(rename = $wire)] $variant,)+
        }

        impl $name {
            /// Every value.
            pub const ALL: &'static [$name] = &[$($name::$variant,)+];

            /// The exact wire string.
            pub const fn as_str(self) -> &'static str {
                match self { $($name::$variant => $wire,)+ }
            }
        }
    };
}

wire_enum!(
    /// The desktop platform.
    Platform {
        /// macOS.
        Macos => "macos",
        /// Windows.
        Windows => "windows",
        /// Linux.
        Linux => "linux",
    }
);

wire_enum!(
    /// The driver's process model; v0 has one.
    ProcessModel {
        /// The driver runs inside the desktop daemon.
        InDaemon => "in_daemon",
    }
);

wire_enum!(
    /// The caller category; v0 has one.
    CallerCategory {
        /// A Cua agent runtime.
        CuaRuntime => "cua_runtime",
    }
);

/// Application identity: at least one of the two fixed fields.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "WireApplication")]
pub struct Application {
    /// Platform application identifier.
    #[serde(skip_serializing_if = "Option::is_none")]
    bundle_id: Option<BundleId>,
    /// Human-facing application name.
    #[serde(skip_serializing_if = "Option::is_none")]
    display_name: Option<DisplayName>,
}

impl Application {
    /// An identity with at least one field; `None` when both are absent.
    pub fn new(bundle_id: Option<BundleId>, display_name: Option<DisplayName>) -> Option<Self> {
        (bundle_id.is_some() || display_name.is_some()).then_some(Self {
            bundle_id,
            display_name,
        })
    }

    /// The identity a capture driver names, checked with annal's write rules
    /// ([`BundleId::new`], [`DisplayName::new`]): the Rust capture API's one constructor from
    /// raw names. The error names the field and the rule it breaks, never the value.
    pub fn from_names(
        bundle_id: Option<String>,
        display_name: Option<String>,
    ) -> Result<Self, InvalidApplication> {
        let bundle_id = bundle_id
            .map(BundleId::new)
            .transpose()
            .map_err(InvalidApplication::BundleId)?;
        let display_name = display_name
            .map(DisplayName::new)
            .transpose()
            .map_err(InvalidApplication::DisplayName)?;
        Self::new(bundle_id, display_name).ok_or(InvalidApplication::Empty)
    }

    /// The identity with only the fields that pass annal's write rules, or `None` if neither
    /// does: what capture keeps of an identity a caller built with the read rules
    /// (`new_lenient`, or a deserialized `Application`), so a URL, path or window title never
    /// reaches the writer and the action is still recorded.
    pub fn into_writable(self) -> Option<Self> {
        Self::new(
            self.bundle_id.filter(BundleId::meets_write_rules),
            self.display_name.filter(DisplayName::meets_write_rules),
        )
    }

    /// The bundle id, if known.
    pub fn bundle_id(&self) -> Option<&BundleId> {
        self.bundle_id.as_ref()
    }

    /// The display name, if known.
    pub fn display_name(&self) -> Option<&DisplayName> {
        self.display_name.as_ref()
    }
}

/// Why [`Application::from_names`] refused an identity: the field and the rule it breaks (with
/// what to give instead), never the value, which may be content seed 000 forbids in history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum InvalidApplication {
    /// `bundle_id` breaks annal's write rules.
    BundleId(InvalidId),
    /// `display_name` breaks annal's write rules.
    DisplayName(InvalidId),
    /// Neither field was given.
    Empty,
}

impl InvalidApplication {
    /// The refused field, as the socket's `action_started` spells it.
    pub const fn field(self) -> &'static str {
        match self {
            Self::BundleId(_) => "application.bundle_id",
            Self::DisplayName(_) => "application.display_name",
            Self::Empty => "application",
        }
    }
}

impl fmt::Display for InvalidApplication {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BundleId(reason) | Self::DisplayName(reason) => {
                write!(f, "`{}`: {reason}", self.field())
            }
            Self::Empty => f.write_str("`application` needs a `bundle_id` or a `display_name`"),
        }
    }
}

impl std::error::Error for InvalidApplication {}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WireApplication {
    #[serde(default, deserialize_with = "present")]
    bundle_id: Option<BundleId>,
    #[serde(default, deserialize_with = "present")]
    display_name: Option<DisplayName>,
}

impl TryFrom<WireApplication> for Application {
    type Error = &'static str;
    fn try_from(w: WireApplication) -> Result<Self, Self::Error> {
        Application::new(w.bundle_id, w.display_name).ok_or("application needs at least one field")
    }
}

/// What an event records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Payload {
    /// A user lifecycle operation.
    Control {
        /// Which operation.
        operation: ControlOperation,
    },
    /// An action began.
    ActionStarted,
    /// An action's validated outcome.
    ActionCompleted(ActionOutcome),
    /// A driver session began or ended.
    Session {
        /// Which end of the session.
        phase: SessionPhase,
    },
    /// A query returned events.
    Access {
        /// Who read.
        operation: AccessOperation,
        /// How many events the read returned.
        returned_events: ReturnedEvents,
    },
    /// A health marker.
    Health {
        /// The fixed category.
        category: HealthCategory,
        /// How many occurrences (for `events_dropped`, how many events were dropped).
        count: u64,
    },
}

impl Payload {
    /// The event type this payload implies.
    pub fn event_type(&self) -> EventType {
        match self {
            Self::Control { .. } => EventType::Control,
            Self::ActionStarted => EventType::ActionStarted,
            Self::ActionCompleted(_) => EventType::ActionCompleted,
            Self::Session {
                phase: SessionPhase::Started,
            } => EventType::SessionStarted,
            Self::Session {
                phase: SessionPhase::Ended,
            } => EventType::SessionEnded,
            Self::Access { .. } => EventType::Access,
            Self::Health { .. } => EventType::Health,
        }
    }

    /// The wire `kind`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Control { .. } => "control",
            Self::ActionStarted => "action_started",
            Self::ActionCompleted(_) => "action_completed",
            Self::Session { .. } => "session",
            Self::Access { .. } => "access",
            Self::Health { .. } => "health",
        }
    }
}

/// The validated outcome of an action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionOutcome {
    /// What the action achieved.
    pub effect: Effect,
    /// How input reached the target.
    pub route: Route,
    /// Whether delivery was background or foreground, when known.
    pub delivery: Option<Delivery>,
    /// How many units (clicks, key presses) were delivered, when counted.
    pub delivered_count: Option<u32>,
    /// Which read-backs confirmed the effect.
    pub evidence_kinds: EvidenceKinds,
    /// What a caller could do next, when the action did not fully succeed.
    pub escalation_kind: Option<EscalationKind>,
}

impl ActionOutcome {
    /// The plainest outcome: `effect` reached through `route`, with nothing else known (no
    /// delivery mode, count, evidence or escalation). What most hooks report.
    pub fn new(effect: Effect, route: Route) -> Self {
        Self {
            effect,
            route,
            delivery: None,
            delivered_count: None,
            evidence_kinds: EvidenceKinds::default(),
            escalation_kind: None,
        }
    }
}

/// At most [`EVIDENCE_KINDS_MAX_ITEMS`] evidence kinds.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EvidenceKinds(Vec<EvidenceKind>);

impl EvidenceKinds {
    /// `None` when more than [`EVIDENCE_KINDS_MAX_ITEMS`] are given.
    pub fn new(kinds: Vec<EvidenceKind>) -> Option<Self> {
        (kinds.len() <= EVIDENCE_KINDS_MAX_ITEMS).then_some(Self(kinds))
    }

    /// The kinds, in recorded order.
    pub fn as_slice(&self) -> &[EvidenceKind] {
        &self.0
    }
}

/// `returned_events` of an access payload: 0..=200.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ReturnedEvents(u8);

impl ReturnedEvents {
    /// `None` above [`RETURNED_EVENTS_MAX`].
    pub fn new(count: usize) -> Option<Self> {
        u8::try_from(count)
            .ok()
            .filter(|c| *c <= RETURNED_EVENTS_MAX)
            .map(Self)
    }

    /// The count.
    pub fn get(self) -> u8 {
        self.0
    }
}

wire_enum!(
    /// A user lifecycle operation.
    ControlOperation {
        /// Capture was enabled.
        Enable => "enable",
        /// Capture was disabled.
        Disable => "disable",
        /// Capture was paused.
        Pause => "pause",
        /// Capture was resumed.
        Resume => "resume",
        /// Buffered events were flushed.
        Flush => "flush",
        /// History was deleted.
        Delete => "delete",
    }
);

wire_enum!(
    /// What an action achieved.
    Effect {
        /// Read-back confirmed the effect.
        Confirmed => "confirmed",
        /// Part of the effect was confirmed.
        Partial => "partial",
        /// No read-back was possible.
        Unverifiable => "unverifiable",
        /// Read-back suggests nothing changed.
        SuspectedNoop => "suspected_noop",
        /// The driver refused the action.
        Refused => "refused",
        /// The action failed.
        Failed => "failed",
    }
);

wire_enum!(
    /// How input reached the target.
    Route {
        /// Accessibility API.
        Accessibility => "accessibility",
        /// Synthetic events posted to the target.
        SyntheticEvents => "synthetic_events",
        /// Global input injection.
        GlobalInput => "global_input",
        /// A system API.
        SystemApi => "system_api",
        /// The browser DOM.
        Dom => "dom",
        /// Trusted browser input.
        TrustedInput => "trusted_input",
        /// Not known.
        Unknown => "unknown",
    }
);

wire_enum!(
    /// Whether delivery was background or foreground.
    Delivery {
        /// Without activating the target.
        Background => "background",
        /// With the target in front.
        Foreground => "foreground",
        /// Delivery does not apply.
        NotApplicable => "not_applicable",
        /// Not known.
        Unknown => "unknown",
    }
);

wire_enum!(
    /// A read-back that confirmed an effect.
    EvidenceKind {
        /// Accessibility read-back.
        AccessibilityReadback => "accessibility_readback",
        /// Browser read-back.
        BrowserReadback => "browser_readback",
        /// Value read-back.
        ValueReadback => "value_readback",
        /// A window changed.
        WindowChange => "window_change",
    }
);

wire_enum!(
    /// What a caller could do next.
    EscalationKind {
        /// Activate the target first.
        ActivateTarget => "activate_target",
        /// Retry with a pixel target.
        RetryWithPixelTarget => "retry_with_pixel_target",
        /// Retry with a page action.
        RetryWithPageAction => "retry_with_page_action",
        /// Refresh page state.
        RefreshPageState => "refresh_page_state",
        /// Ask the user for a permission.
        RequestPermission => "request_permission",
        /// Elevate access.
        ElevateAccess => "elevate_access",
        /// Capture a wider scope.
        ExpandCaptureScope => "expand_capture_scope",
        /// Prepare the session.
        PrepareSession => "prepare_session",
        /// Retry with foreground delivery.
        RetryWithForegroundDelivery => "retry_with_foreground_delivery",
    }
);

wire_enum!(
    /// Which end of a session.
    SessionPhase {
        /// The session began.
        Started => "started",
        /// The session ended.
        Ended => "ended",
    }
);

wire_enum!(
    /// Who read history.
    AccessOperation {
        /// An agent through `history_query`.
        AgentQuery => "agent_query",
        /// The local CLI.
        LocalCli => "local_cli",
    }
);

/// The payload as it appears on the wire: every field any kind may carry, each refused as `null`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WirePayload {
    kind: WireKind,
    #[serde(default, deserialize_with = "present")]
    operation: Option<WireOperation>,
    #[serde(default, deserialize_with = "present")]
    effect: Option<Effect>,
    #[serde(default, deserialize_with = "present")]
    route: Option<Route>,
    #[serde(default, deserialize_with = "present")]
    delivery: Option<Delivery>,
    #[serde(default, deserialize_with = "present_integer")]
    delivered_count: Option<u64>,
    #[serde(default, deserialize_with = "present")]
    evidence_kinds: Option<Vec<EvidenceKind>>,
    #[serde(default, deserialize_with = "present")]
    escalation_kind: Option<EscalationKind>,
    #[serde(default, deserialize_with = "present")]
    phase: Option<SessionPhase>,
    #[serde(default, deserialize_with = "present_integer")]
    returned_events: Option<u64>,
    #[serde(default, deserialize_with = "present")]
    category: Option<HealthCategory>,
    #[serde(default, deserialize_with = "present_integer")]
    count: Option<u64>,
}

/// `operation` is shared by two payload kinds with disjoint vocabularies; each is read through
/// its own enum, so every wire string is written once (in `wire_enum!`).
#[derive(Deserialize, Clone, Copy)]
#[serde(untagged)]
enum WireOperation {
    Control(ControlOperation),
    Access(AccessOperation),
}

#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "snake_case")]
enum WireKind {
    Control,
    ActionStarted,
    ActionCompleted,
    Session,
    Access,
    Health,
}

impl WirePayload {
    /// True when only the fields named in `allowed` are present.
    fn only(&self, allowed: &[&str]) -> bool {
        let present = [
            ("operation", self.operation.is_some()),
            ("effect", self.effect.is_some()),
            ("route", self.route.is_some()),
            ("delivery", self.delivery.is_some()),
            ("delivered_count", self.delivered_count.is_some()),
            ("evidence_kinds", self.evidence_kinds.is_some()),
            ("escalation_kind", self.escalation_kind.is_some()),
            ("phase", self.phase.is_some()),
            ("returned_events", self.returned_events.is_some()),
            ("category", self.category.is_some()),
            ("count", self.count.is_some()),
        ];
        present
            .iter()
            .all(|(name, is_present)| !is_present || allowed.contains(name))
    }

    fn into_payload(self) -> Result<Payload, &'static str> {
        const FIELD_NOT_ALLOWED: &str = "payload has a field its kind does not allow";
        const MISSING: &str = "payload lacks a field its kind requires";
        match self.kind {
            WireKind::Control => {
                if !self.only(&["operation"]) {
                    return Err(FIELD_NOT_ALLOWED);
                }
                let WireOperation::Control(operation) = self.operation.ok_or(MISSING)? else {
                    return Err("control payload with an access operation");
                };
                Ok(Payload::Control { operation })
            }
            WireKind::ActionStarted => {
                if !self.only(&[]) {
                    return Err(FIELD_NOT_ALLOWED);
                }
                Ok(Payload::ActionStarted)
            }
            WireKind::ActionCompleted => {
                let allowed = [
                    "effect",
                    "route",
                    "delivery",
                    "delivered_count",
                    "evidence_kinds",
                    "escalation_kind",
                ];
                if !self.only(&allowed) {
                    return Err(FIELD_NOT_ALLOWED);
                }
                let evidence_kinds = EvidenceKinds::new(self.evidence_kinds.ok_or(MISSING)?)
                    .ok_or("too many evidence kinds")?;
                let delivered_count = self
                    .delivered_count
                    .map(u32::try_from)
                    .transpose()
                    .map_err(|_| "delivered_count out of range")?;
                Ok(Payload::ActionCompleted(ActionOutcome {
                    effect: self.effect.ok_or(MISSING)?,
                    route: self.route.ok_or(MISSING)?,
                    delivery: self.delivery,
                    delivered_count,
                    evidence_kinds,
                    escalation_kind: self.escalation_kind,
                }))
            }
            WireKind::Session => {
                if !self.only(&["phase"]) {
                    return Err(FIELD_NOT_ALLOWED);
                }
                Ok(Payload::Session {
                    phase: self.phase.ok_or(MISSING)?,
                })
            }
            WireKind::Access => {
                if !self.only(&["operation", "returned_events"]) {
                    return Err(FIELD_NOT_ALLOWED);
                }
                let WireOperation::Access(operation) = self.operation.ok_or(MISSING)? else {
                    return Err("access payload with a control operation");
                };
                let returned = self.returned_events.ok_or(MISSING)?;
                let returned_events = usize::try_from(returned)
                    .ok()
                    .and_then(ReturnedEvents::new)
                    .ok_or("returned_events out of range")?;
                Ok(Payload::Access {
                    operation,
                    returned_events,
                })
            }
            WireKind::Health => {
                if !self.only(&["category", "count"]) {
                    return Err(FIELD_NOT_ALLOWED);
                }
                Ok(Payload::Health {
                    category: self.category.ok_or(MISSING)?,
                    count: self.count.ok_or(MISSING)?,
                })
            }
        }
    }
}

impl<'de> Deserialize<'de> for Payload {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        WirePayload::deserialize(d)?
            .into_payload()
            .map_err(serde::de::Error::custom)
    }
}

impl Serialize for Payload {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("kind", self.kind())?;
        match self {
            Self::Control { operation } => map.serialize_entry("operation", operation)?,
            Self::ActionStarted => {}
            Self::ActionCompleted(outcome) => {
                map.serialize_entry("effect", &outcome.effect)?;
                map.serialize_entry("route", &outcome.route)?;
                if let Some(delivery) = &outcome.delivery {
                    map.serialize_entry("delivery", delivery)?;
                }
                if let Some(count) = &outcome.delivered_count {
                    map.serialize_entry("delivered_count", count)?;
                }
                map.serialize_entry("evidence_kinds", outcome.evidence_kinds.as_slice())?;
                if let Some(escalation) = &outcome.escalation_kind {
                    map.serialize_entry("escalation_kind", escalation)?;
                }
            }
            Self::Session { phase } => map.serialize_entry("phase", phase)?,
            Self::Access {
                operation,
                returned_events,
            } => {
                map.serialize_entry("operation", operation)?;
                map.serialize_entry("returned_events", &returned_events.get())?;
            }
            Self::Health { category, count } => {
                map.serialize_entry("category", category)?;
                map.serialize_entry("count", count)?;
            }
        }
        map.end()
    }
}

/// Single-value wire constants: anything else fails to deserialize.
#[derive(Deserialize)]
enum WireSpecVersion {
    #[serde(rename = "1.0")]
    V1,
}

#[derive(Deserialize)]
enum WireContentType {
    #[serde(rename = "application/json")]
    Json,
}

#[derive(Deserialize)]
enum WireDataSchema {
    #[serde(rename = "urn:cua-driver:schema:history-event:v0")]
    V0,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WireEvent {
    #[allow(dead_code)]
    specversion: WireSpecVersion,
    id: OpaqueId,
    source: SourceUrn,
    #[serde(rename = "type")]
    event_type: EventType,
    subject: Subject,
    time: EventTime,
    #[allow(dead_code)]
    datacontenttype: WireContentType,
    #[allow(dead_code)]
    dataschema: WireDataSchema,
    data: EventData,
}

impl<'de> Deserialize<'de> for Event {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let wire = WireEvent::deserialize(d)?;
        if wire.event_type != wire.data.payload.event_type() {
            return Err(serde::de::Error::custom(
                "event type and payload kind disagree",
            ));
        }
        Ok(Event {
            id: wire.id,
            source: wire.source,
            subject: wire.subject,
            time: wire.time,
            data: wire.data,
        })
    }
}

impl Serialize for Event {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("Event", 9)?;
        st.serialize_field("specversion", SPEC_VERSION)?;
        st.serialize_field("id", &self.id)?;
        st.serialize_field("source", &self.source)?;
        st.serialize_field("type", self.event_type().as_str())?;
        st.serialize_field("subject", &self.subject)?;
        st.serialize_field("time", &self.time)?;
        st.serialize_field("datacontenttype", DATA_CONTENT_TYPE)?;
        st.serialize_field("dataschema", DATASCHEMA_V0)?;
        st.serialize_field("data", &self.data)?;
        st.end()
    }
}
