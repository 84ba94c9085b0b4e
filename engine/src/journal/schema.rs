//! The engine journal's closed schema and its [`Stream`] binding.
//!
//! The domain type is [`JournalEvent`] (past tense, what happened). What is stored is a private
//! wire form, versioned apart from it under [`JOURNAL_DATASCHEMA_V1`]: a record is compact JSON
//!
//! ```text
//! {"dataschema":"urn:annal:schema:engine-journal:v1","sequence":N,"time_ms":T,
//!  "stream":"<32 hex>","event":{"kind":"...",...}}
//! ```
//!
//! closed at every level (`deny_unknown_fields`, no `null`, no optional fields, closed enums).
//! Every string is bounded and charset-checked: a key reference (the header's rules) and
//! 32-hex ids. Nothing free-form can be journaled: no labels, arguments, paths or messages. The
//! same bounds are the writer's rules ([`Stream::check_write_rules`]) and the reader's
//! ([`JournalSchema::parse`]), so what annal writes it reads back, and a record outside them is
//! refused either way. A record of another `dataschema` is
//! [`PlaintextFault::UnsupportedDataschema`]; anything else off-schema is
//! [`PlaintextFault::InvalidEvent`]. `docs/format.md` ("Engine journal") lists every field.

use std::num::NonZeroU64;
use std::time::Duration;

use annal_schema::{ControlOperation, OpaqueId, Sequence, WriteRuleViolation};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::boot::BootId;
use crate::health::{Child, FailureCategory, KeyFault, Signal, SignalKind, StorageFault};
use crate::keys::{JournalKeys, KeyReference};
use crate::policy::{
    ActorId, AuditOutcome, GrantSource, Operation, PolicyEvent, Principal, Verdict,
};
use crate::profile::{ChunkId, MAX_RECORDS_PER_CHUNK, PlaintextFault, RecordSchema};
use crate::storage::Area;
use crate::store::{CHUNK_SIZE_LIMIT_BYTES, RecordIdentity, Stream};

/// The `dataschema` of every engine-journal record this version writes and reads.
pub const JOURNAL_DATASCHEMA_V1: &str = "urn:annal:schema:engine-journal:v1";

/// Fewest days of query-visible retention the owner may set.
pub const RETENTION_MIN_DAYS: u32 = 1;

/// Most days of query-visible retention the owner may set (ten years).
pub const RETENTION_MAX_DAYS: u32 = 3_650;

/// Smallest quota the owner may set, in bytes (1 MiB: below it, one chunk and its seal would
/// not fit).
pub const QUOTA_MIN_BYTES: u64 = 1_048_576;

/// Largest quota the owner may set, in bytes (1 TiB).
pub const QUOTA_MAX_BYTES: u64 = 1 << 40;

/// Latest time a journal record or signal may carry, in milliseconds since the Unix epoch: the
/// last millisecond of year 2500, the end of annal's time range (`annal_schema::time`).
pub const JOURNAL_TIME_MAX_MS: u64 = 16_756_761_599_999;

/// Most bytes a torn tail may leave out: more than any chunk the writer makes (a chunk rotates
/// before [`CHUNK_SIZE_LIMIT_BYTES`], and a single record larger than that gets a chunk of its
/// own).
pub const TORN_TAIL_MAX_BYTES: u64 =
    CHUNK_SIZE_LIMIT_BYTES + crate::profile::MAX_RECORD_LEN_BYTES as u64;

/// Who asked for an operation: a closed kind, never an actor's name or any argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CallerKind {
    /// The machine's owner, through the `annal` CLI.
    OwnerCli,
    /// The agent runtime embedding the engine, through its Rust API.
    Embedder,
    /// The engine's own components (supervisor, writer, key custody), in the daemon or inside
    /// an embedder.
    Daemon,
    /// An agent over MCP or the local socket.
    Agent,
}

impl CallerKind {
    /// Every caller kind.
    pub const ALL: [CallerKind; 4] = [Self::OwnerCli, Self::Embedder, Self::Daemon, Self::Agent];
}

/// What capture does at the quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum OnQuota {
    /// Capture stops (`quota_reached`); reads and their audit records keep working. The
    /// default.
    #[default]
    StopCapture,
    /// The oldest chunks are evicted to make room.
    EvictOldest,
}

/// Why a sealed chunk was pruned (`store::prune`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum PruneReason {
    /// Its last event is older than the retention cutoff: nothing in it is visible any more.
    Retention,
    /// The store was at its quota and the owner chose `evict_oldest`.
    EvictOldest,
}

/// Where annal read another implementation's lifecycle state (the contract keeps it in two
/// places: `docs/design.md`, "One truth about on and off").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ContractSource {
    /// The contract store's `state.json` (`{"enabled":bool,"paused":bool}`).
    StateFile,
    /// The newest lifecycle `control` event of the history stream (by `data.sequence`).
    ControlEvent,
}

/// One thing that happened to the engine, in the past tense. Closed: every field is a bounded
/// number, a closed enum or a bounded, charset-checked id.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum JournalEvent {
    /// A lifecycle operation took effect.
    ControlApplied {
        /// Which operation.
        operation: ControlOperation,
        /// Who asked for it.
        caller: CallerKind,
    },
    /// Query-visible retention was set.
    RetentionSet {
        /// The new retention, in days ([`RETENTION_MIN_DAYS`]..=[`RETENTION_MAX_DAYS`]).
        days: u32,
        /// Who set it.
        caller: CallerKind,
    },
    /// The store quota was set.
    QuotaSet {
        /// The new quota, in bytes ([`QUOTA_MIN_BYTES`]..=[`QUOTA_MAX_BYTES`]).
        bytes: u64,
        /// What capture does at the quota.
        on_quota: OnQuota,
        /// Who set it.
        caller: CallerKind,
    },
    /// A key epoch began: chunks from now on are sealed under this epoch and reference.
    KeyEpochStarted {
        /// The epoch (>= 1; part of every chunk key).
        epoch: NonZeroU64,
        /// The credential-store name of its root key (the header's `key_reference` rules).
        reference: KeyReference,
    },
    /// A supervision or store fact was observed (health is a fold over these).
    SupervisorSignalled(Signal),
    /// The capture path dropped this many events (added to the lifetime total).
    DropsRecorded {
        /// How many (>= 1).
        count: u64,
    },
    /// The history stream's sequences were reserved through `high_water`: durable before any
    /// history record uses one, so none is ever reused.
    SequenceMarked {
        /// The highest sequence reserved (>= 1).
        high_water: u64,
        /// The boot of the machine the reservation was made in (`None` in journals written
        /// before boot ids were journaled): after a crash in the same boot, the next writer
        /// may release what was not written ([`super::Command::RecoverSequences`]).
        boot: Option<BootId>,
        /// The reserving writer never runs more than this many sequences past its last sync
        /// (or its floor at open) (`None` in journals written before that rule): after a
        /// crash in another boot, the skip stops this far above what is certainly durable
        /// ([`super::Command::SkipAfterCrash`]).
        in_flight_max: Option<u64>,
    },
    /// The history records of these sequences were reported lost by a failed append or sync,
    /// and counted as dropped. A failed sync may have left them on disk all the same: no query
    /// answers them, in this life or a later one ([`super::State::lost`]).
    RecordsLost {
        /// The first lost sequence (>= 1).
        first_sequence: u64,
        /// The last lost sequence (>= `first_sequence`).
        last_sequence: u64,
    },
    /// A chunk's torn tail (what follows its last authenticated record after a crash) was left
    /// out of it.
    TornTailRecorded {
        /// The chunk.
        chunk: ChunkId,
        /// How many bytes were left out (1..=[`TORN_TAIL_MAX_BYTES`]).
        bytes_left_out: u64,
    },
    /// A corrupt chunk was quarantined by an explicit repair.
    ChunkQuarantined {
        /// The chunk.
        chunk: ChunkId,
        /// Who ran the repair.
        caller: CallerKind,
    },
    /// A sealed (or a crashed generation's torn) history chunk was pruned: recorded before its
    /// file is removed, so a chunk is never gone without this record (a seal stays, and
    /// `verify` reports its chunk as pruned).
    ChunkPruned {
        /// The chunk.
        chunk: ChunkId,
        /// Why.
        reason: PruneReason,
        /// Event time of its last record, in milliseconds since the Unix epoch (from its seal,
        /// or a torn chunk's records; at most [`JOURNAL_TIME_MAX_MS`]).
        last_time_ms: u64,
        /// How many records it held (from its seal, or a torn chunk's records;
        /// 1..=`MAX_RECORDS_PER_CHUNK`).
        records: u64,
    },
    /// A policy fact: a grant, a revocation, the agents switch, an audit record.
    Policy(PolicyEvent),
    /// At open, the contract's state (written by another implementation, or by annal before a
    /// crash between its writes) said `operation`. A narrowing (`disable`, `delete`, `pause`)
    /// is taken; a widening (`enable`, `resume`) never is. A control event read is never read
    /// again: the projection keeps the highest `sequence` read ([`super::State::contract_read_through`]).
    ContractObserved {
        /// What the contract said (never `flush`; from `state_file` only `disable` or `pause`).
        operation: ControlOperation,
        /// Where it said so.
        source: ContractSource,
        /// The control event's `data.sequence` (>= 1); 0 for `state_file`.
        sequence: u64,
    },
    /// Of the sequences reserved through `reserved`, none above `high_water` was handed out
    /// (a clean stop), or none above it can have been seen (an open after a crash in the
    /// reservation's boot, with the store's files made durable first); the rest is released,
    /// so the next writer goes on at `high_water + 1` (no gap). Applies only while the mark is
    /// still `reserved`.
    SequenceReleased {
        /// The reservation released (the mark it applies to).
        reserved: u64,
        /// The highest sequence handed out (1..=`reserved`).
        high_water: u64,
    },
    /// A writer opened above sequences that no record holds: reserved by a writer that did
    /// not stop cleanly (a crash), some maybe handed out and lost with it. A gap with this
    /// cause, not a drop: none of them was an event captured and lost.
    SequencesSkipped {
        /// The first sequence skipped (>= 1).
        first_sequence: u64,
        /// The last sequence skipped (>= `first_sequence`).
        last_sequence: u64,
    },
}

/// Which bound an event or record breaks. Names the field, never its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum BoundViolation {
    /// `time_ms` is after [`JOURNAL_TIME_MAX_MS`].
    #[error("`time_ms` is beyond annal's time range")]
    TimeMs,
    /// `days` is outside [`RETENTION_MIN_DAYS`]..=[`RETENTION_MAX_DAYS`].
    #[error("`days` is outside the retention bounds")]
    RetentionDays,
    /// `bytes` is outside [`QUOTA_MIN_BYTES`]..=[`QUOTA_MAX_BYTES`].
    #[error("`bytes` is outside the quota bounds")]
    QuotaBytes,
    /// A drop `count` is 0.
    #[error("a drop `count` is 0")]
    DropCount,
    /// `high_water` is 0.
    #[error("`high_water` is 0")]
    HighWater,
    /// A lost range starts at 0 or ends before it starts.
    #[error("a lost range is empty or starts at 0")]
    LostRange,
    /// `bytes_left_out` is 0 or above [`TORN_TAIL_MAX_BYTES`].
    #[error("`bytes_left_out` is outside its bounds")]
    TornTailBytes,
    /// A signal's `at_ms` is after [`JOURNAL_TIME_MAX_MS`].
    #[error("a signal's `at_ms` is beyond annal's time range")]
    SignalTime,
    /// A policy record's audit id, count or times are outside their bounds.
    #[error("a policy record is outside its bounds")]
    Policy,
    /// A pruned chunk's `last_time_ms` or `records` is outside its bounds.
    #[error("a pruned chunk's time or record count is outside its bounds")]
    ChunkPruned,
    /// A contract observation names `flush`, a `state_file` widening, or a sequence that does not
    /// fit its source.
    #[error("a contract observation is outside its bounds")]
    ContractObserved,
    /// A release's `high_water` is 0 or above its `reserved`.
    #[error("a released `high_water` is 0 or above the reservation")]
    SequenceReleased,
}

impl JournalEvent {
    /// `count` drops (>= 1) counted with no history marker to report them (no writer ran, or
    /// history was disabled): they join the lifetime total, and are signalled observed, so
    /// the next writer to open writes the marker the history owes them (`State::unmarked_drops`)
    /// and signals them marked. Journaled together, in one append, so a total is never kept
    /// without its owed marker.
    pub fn drops_owed_a_marker(count: u64, at_ms: u64) -> [JournalEvent; 2] {
        [
            JournalEvent::DropsRecorded { count },
            JournalEvent::SupervisorSignalled(Signal {
                at_ms,
                kind: SignalKind::DropsObserved { count },
            }),
        ]
    }

    /// Checks every bound of the event (the reader's and the writer's rule).
    pub fn check_bounds(&self) -> Result<(), BoundViolation> {
        match self {
            Self::ControlApplied { .. }
            | Self::KeyEpochStarted { .. }
            | Self::ChunkQuarantined { .. } => Ok(()),
            Self::RetentionSet { days, .. } => {
                ok_if(retention_in_bounds(*days), BoundViolation::RetentionDays)
            }
            Self::QuotaSet { bytes, .. } => {
                ok_if(quota_in_bounds(*bytes), BoundViolation::QuotaBytes)
            }
            Self::SupervisorSignalled(signal) => check_signal(signal),
            Self::DropsRecorded { count } => ok_if(*count >= 1, BoundViolation::DropCount),
            Self::SequenceMarked {
                high_water,
                in_flight_max,
                ..
            } => ok_if(
                *high_water >= 1 && in_flight_max.is_none_or(|max| max >= 1),
                BoundViolation::HighWater,
            ),
            Self::RecordsLost {
                first_sequence,
                last_sequence,
            } => ok_if(
                *first_sequence >= 1 && first_sequence <= last_sequence,
                BoundViolation::LostRange,
            ),
            Self::TornTailRecorded { bytes_left_out, .. } => ok_if(
                (1..=TORN_TAIL_MAX_BYTES).contains(bytes_left_out),
                BoundViolation::TornTailBytes,
            ),
            Self::ChunkPruned {
                last_time_ms,
                records,
                ..
            } => ok_if(
                *last_time_ms <= JOURNAL_TIME_MAX_MS
                    && (1..=MAX_RECORDS_PER_CHUNK).contains(records),
                BoundViolation::ChunkPruned,
            ),
            Self::Policy(event) => {
                ok_if(event.in_bounds(JOURNAL_TIME_MAX_MS), BoundViolation::Policy)
            }
            Self::ContractObserved {
                operation,
                source,
                sequence,
            } => ok_if(
                observation_in_bounds(*operation, *source, *sequence),
                BoundViolation::ContractObserved,
            ),
            Self::SequenceReleased {
                reserved,
                high_water,
            } => ok_if(
                *high_water >= 1 && high_water <= reserved,
                BoundViolation::SequenceReleased,
            ),
            Self::SequencesSkipped {
                first_sequence,
                last_sequence,
            } => ok_if(
                *first_sequence >= 1 && first_sequence <= last_sequence,
                BoundViolation::LostRange,
            ),
        }
    }
}

/// Whether an observation of the contract's state is well formed: never `flush` (it says
/// nothing about on and off); from `state_file` only a narrowing (`disable`, `pause`: the file
/// is read only when it is narrower than annal) with sequence 0; from a `control_event` a
/// sequence of at least 1.
fn observation_in_bounds(
    operation: ControlOperation,
    source: ContractSource,
    sequence: u64,
) -> bool {
    match source {
        ContractSource::StateFile => {
            matches!(
                operation,
                ControlOperation::Disable | ControlOperation::Pause
            ) && sequence == 0
        }
        ContractSource::ControlEvent => operation != ControlOperation::Flush && sequence >= 1,
    }
}

/// Whether `days` is a retention the owner may set.
pub fn retention_in_bounds(days: u32) -> bool {
    (RETENTION_MIN_DAYS..=RETENTION_MAX_DAYS).contains(&days)
}

/// Whether `bytes` is a quota the owner may set.
pub fn quota_in_bounds(bytes: u64) -> bool {
    (QUOTA_MIN_BYTES..=QUOTA_MAX_BYTES).contains(&bytes)
}

/// Checks a signal's bounds: its time, and drop counts of at least 1.
pub fn check_signal(signal: &Signal) -> Result<(), BoundViolation> {
    if signal.at_ms > JOURNAL_TIME_MAX_MS {
        return Err(BoundViolation::SignalTime);
    }
    match signal.kind {
        SignalKind::DropsObserved { count } | SignalKind::DropsMarked { count } => {
            ok_if(count >= 1, BoundViolation::DropCount)
        }
        _ => Ok(()),
    }
}

fn ok_if(holds: bool, otherwise: BoundViolation) -> Result<(), BoundViolation> {
    if holds { Ok(()) } else { Err(otherwise) }
}

/// One journal record: an event with the identity the writer gave it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalRecord {
    /// Its sequence in the journal (>= 1, strictly increasing, never reused).
    pub sequence: Sequence,
    /// When it was written, in milliseconds since the Unix epoch (from the injected clock).
    pub time_ms: u64,
    /// The journal stream (writer generation) of its chunk.
    pub stream: OpaqueId,
    /// What happened.
    pub event: JournalEvent,
}

impl JournalRecord {
    /// Checks every bound of the record.
    pub fn check_bounds(&self) -> Result<(), BoundViolation> {
        ok_if(self.time_ms <= JOURNAL_TIME_MAX_MS, BoundViolation::TimeMs)?;
        self.event.check_bounds()
    }

    /// Compact JSON of the stored form.
    pub fn to_json_vec(&self) -> Vec<u8> {
        let mut out = Vec::new();
        write_json(self, &mut out);
        out
    }

    /// Parses a stored record, refusing anything off-schema (see the module docs).
    pub fn from_json_slice(bytes: &[u8]) -> Result<Self, PlaintextFault> {
        match serde_json::from_slice::<WireRecordIn>(bytes) {
            Ok(wire) => {
                let record = wire.into_record();
                record
                    .check_bounds()
                    .map_err(|_| PlaintextFault::InvalidEvent)?;
                Ok(record)
            }
            Err(_) => {
                // Only on the failure path: tell another schema apart from a broken record.
                let value: serde_json::Value =
                    serde_json::from_slice(bytes).map_err(|_| PlaintextFault::InvalidEvent)?;
                match value.get("dataschema") {
                    Some(serde_json::Value::String(schema)) if schema != JOURNAL_DATASCHEMA_V1 => {
                        Err(PlaintextFault::UnsupportedDataschema)
                    }
                    _ => Err(PlaintextFault::InvalidEvent),
                }
            }
        }
    }
}

fn write_json(record: &JournalRecord, out: &mut Vec<u8>) {
    let wire = WireRecordOut {
        dataschema: JOURNAL_DATASCHEMA_V1,
        sequence: record.sequence.get(),
        time_ms: record.time_ms,
        stream: record.stream.as_str(),
        event: WireEvent::from_event(&record.event),
    };
    // Serializing these closed types into memory cannot fail (string keys, infallible
    // Serialize impls); if it ever did, the record would be empty and refused on read.
    if serde_json::to_writer(&mut *out, &wire).is_err() {
        debug_assert!(false, "serializing a journal record failed");
    }
}

/// The engine journal's record schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct JournalSchema;

impl RecordSchema for JournalSchema {
    type Event = JournalRecord;

    fn parse(plaintext: &[u8]) -> Result<JournalRecord, PlaintextFault> {
        JournalRecord::from_json_slice(plaintext)
    }

    fn sequence(event: &JournalRecord) -> u64 {
        event.sequence.get()
    }

    fn time_since_epoch(event: &JournalRecord) -> Duration {
        Duration::from_millis(event.time_ms)
    }
}

/// A journal record before the writer assigned its sequence and stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalEntry {
    /// When it is written, in milliseconds since the Unix epoch (from the injected clock).
    pub time_ms: u64,
    /// What happened.
    pub event: JournalEvent,
}

/// The engine journal: [`JournalRecord`]s in `engine/journal/`, sealed with journal keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Journal;

impl Stream for Journal {
    type Schema = JournalSchema;
    type Keys = JournalKeys;
    type Draft = JournalEntry;
    const AREA: Area = Area::Journal;
    const NAME: &'static str = "journal";

    fn check_write_rules(draft: &JournalEntry) -> Result<(), WriteRuleViolation> {
        if draft.time_ms > JOURNAL_TIME_MAX_MS {
            return Err(WriteRuleViolation::JournalTime);
        }
        draft
            .event
            .check_bounds()
            .map_err(|_| WriteRuleViolation::JournalEvent)
    }

    fn finish(draft: JournalEntry, identity: &RecordIdentity) -> JournalRecord {
        JournalRecord {
            sequence: identity.sequence,
            time_ms: draft.time_ms,
            stream: identity.stream_id.clone(),
            event: draft.event,
        }
    }

    fn encode(event: &JournalRecord, out: &mut Vec<u8>) {
        let start = out.len();
        write_json(event, out);
        // One check in debug builds and tests that what is written reads back as itself.
        debug_assert_eq!(
            out.get(start..).map(JournalRecord::from_json_slice),
            Some(Ok(event.clone())),
            "the writer's own journal JSON must read back as the record it wrote"
        );
    }
}

// ---- The stored form (v1). Private: only these types know the wire spelling. ----

/// The stored record, as written.
#[derive(Serialize)]
struct WireRecordOut<'a> {
    /// Always [`JOURNAL_DATASCHEMA_V1`].
    dataschema: &'static str,
    /// [`JournalRecord::sequence`].
    sequence: u64,
    /// [`JournalRecord::time_ms`].
    time_ms: u64,
    /// [`JournalRecord::stream`].
    stream: &'a str,
    /// [`JournalRecord::event`], in its stored form.
    event: WireEvent,
}

/// The stored record, as read.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WireRecordIn {
    /// Must be [`JOURNAL_DATASCHEMA_V1`]; checked while parsing, so never read afterwards.
    #[allow(dead_code)]
    dataschema: DataschemaV1,
    /// [`JournalRecord::sequence`].
    sequence: Sequence,
    /// [`JournalRecord::time_ms`].
    time_ms: u64,
    /// [`JournalRecord::stream`].
    stream: OpaqueId,
    /// [`JournalRecord::event`], in its stored form.
    event: WireEvent,
}

impl WireRecordIn {
    fn into_record(self) -> JournalRecord {
        JournalRecord {
            sequence: self.sequence,
            time_ms: self.time_ms,
            stream: self.stream,
            event: self.event.into_event(),
        }
    }
}

/// Accepts exactly [`JOURNAL_DATASCHEMA_V1`].
struct DataschemaV1;

impl<'de> Deserialize<'de> for DataschemaV1 {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        if text == JOURNAL_DATASCHEMA_V1 {
            Ok(Self)
        } else {
            Err(serde::de::Error::custom("unsupported dataschema"))
        }
    }
}

/// The stored event, internally tagged by `kind`. Each variant's fields are those of the
/// [`JournalEvent`] variant of the same name (a signal's `at_ms` is lifted beside it).
#[derive(Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
enum WireEvent {
    ControlApplied {
        operation: ControlOperation,
        caller: CallerKind,
    },
    RetentionSet {
        days: u32,
        caller: CallerKind,
    },
    QuotaSet {
        bytes: u64,
        on_quota: OnQuota,
        caller: CallerKind,
    },
    KeyEpochStarted {
        epoch: NonZeroU64,
        #[serde(with = "key_reference_text")]
        reference: KeyReference,
    },
    SupervisorSignalled {
        at_ms: u64,
        signal: WireSignal,
    },
    DropsRecorded {
        count: u64,
    },
    SequenceMarked {
        high_water: u64,
        #[serde(
            default,
            skip_serializing_if = "Option::is_none",
            deserialize_with = "present_boot"
        )]
        boot: Option<BootId>,
        #[serde(
            default,
            skip_serializing_if = "Option::is_none",
            deserialize_with = "present_count"
        )]
        in_flight_max: Option<u64>,
    },
    RecordsLost {
        first_sequence: u64,
        last_sequence: u64,
    },
    TornTailRecorded {
        #[serde(with = "chunk_hex")]
        chunk: ChunkId,
        bytes_left_out: u64,
    },
    ChunkQuarantined {
        #[serde(with = "chunk_hex")]
        chunk: ChunkId,
        caller: CallerKind,
    },
    ChunkPruned {
        #[serde(with = "chunk_hex")]
        chunk: ChunkId,
        reason: PruneReason,
        last_time_ms: u64,
        records: u64,
    },
    GrantIssued {
        actor: ActorId,
        operation: Operation,
        source: GrantSource,
        issued_at_ms: u64,
        expires_at_ms: u64,
        idle_timeout_ms: u64,
    },
    GrantWithdrawn {
        actor: ActorId,
        operation: Operation,
    },
    ActorRevoked {
        actor: ActorId,
    },
    AgentsSwitched {
        enabled: bool,
    },
    OwnerAccessSwitched {
        enabled: bool,
    },
    AuditStarted {
        audit: u64,
        at_ms: u64,
        principal: Principal,
        operation: Operation,
        verdict: Verdict,
    },
    AuditFinished {
        audit: u64,
        outcome: AuditOutcome,
        returned_events: u16,
    },
    UnknownToolRefused {
        audit: u64,
        at_ms: u64,
        principal: Principal,
    },
    OwnerExported {
        audit: u64,
        at_ms: u64,
        events: u64,
        first_sequence: u64,
        last_sequence: u64,
        encrypted: bool,
    },
    ContractObserved {
        operation: ControlOperation,
        source: ContractSource,
        sequence: u64,
    },
    SequenceReleased {
        reserved: u64,
        high_water: u64,
    },
    SequencesSkipped {
        first_sequence: u64,
        last_sequence: u64,
    },
}

/// A stored signal, internally tagged by `kind`; each variant's fields are those of the
/// [`SignalKind`] variant of the same name. Variants without data are empty structs so an
/// unknown field beside their tag is refused too.
#[derive(Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
enum WireSignal {
    ChildStarted {
        child: Child,
    },
    ChildFailed {
        child: Child,
        category: FailureCategory,
    },
    ChildRestarted {
        child: Child,
    },
    ChildStopped {
        child: Child,
    },
    RestartLimitReached {
        child: Child,
    },
    StorageFailed {
        category: StorageFault,
    },
    StorageRecovered {},
    CheckpointVerified {},
    KeyFailed {
        category: KeyFault,
    },
    KeyRecovered {},
    QuotaReached {},
    QuotaCleared {},
    DropsObserved {
        count: u64,
    },
    DropsMarked {
        count: u64,
    },
}

impl WireEvent {
    fn from_event(event: &JournalEvent) -> Self {
        match event {
            JournalEvent::ControlApplied { operation, caller } => Self::ControlApplied {
                operation: *operation,
                caller: *caller,
            },
            JournalEvent::RetentionSet { days, caller } => Self::RetentionSet {
                days: *days,
                caller: *caller,
            },
            JournalEvent::QuotaSet {
                bytes,
                on_quota,
                caller,
            } => Self::QuotaSet {
                bytes: *bytes,
                on_quota: *on_quota,
                caller: *caller,
            },
            JournalEvent::KeyEpochStarted { epoch, reference } => Self::KeyEpochStarted {
                epoch: *epoch,
                reference: reference.clone(),
            },
            JournalEvent::SupervisorSignalled(signal) => Self::SupervisorSignalled {
                at_ms: signal.at_ms,
                signal: WireSignal::from_kind(signal.kind),
            },
            JournalEvent::DropsRecorded { count } => Self::DropsRecorded { count: *count },
            JournalEvent::SequenceMarked {
                high_water,
                boot,
                in_flight_max,
            } => Self::SequenceMarked {
                high_water: *high_water,
                boot: *boot,
                in_flight_max: *in_flight_max,
            },
            JournalEvent::RecordsLost {
                first_sequence,
                last_sequence,
            } => Self::RecordsLost {
                first_sequence: *first_sequence,
                last_sequence: *last_sequence,
            },
            JournalEvent::TornTailRecorded {
                chunk,
                bytes_left_out,
            } => Self::TornTailRecorded {
                chunk: *chunk,
                bytes_left_out: *bytes_left_out,
            },
            JournalEvent::ChunkQuarantined { chunk, caller } => Self::ChunkQuarantined {
                chunk: *chunk,
                caller: *caller,
            },
            JournalEvent::ChunkPruned {
                chunk,
                reason,
                last_time_ms,
                records,
            } => Self::ChunkPruned {
                chunk: *chunk,
                reason: *reason,
                last_time_ms: *last_time_ms,
                records: *records,
            },
            JournalEvent::Policy(event) => Self::from_policy(event),
            JournalEvent::ContractObserved {
                operation,
                source,
                sequence,
            } => Self::ContractObserved {
                operation: *operation,
                source: *source,
                sequence: *sequence,
            },
            JournalEvent::SequenceReleased {
                reserved,
                high_water,
            } => Self::SequenceReleased {
                reserved: *reserved,
                high_water: *high_water,
            },
            JournalEvent::SequencesSkipped {
                first_sequence,
                last_sequence,
            } => Self::SequencesSkipped {
                first_sequence: *first_sequence,
                last_sequence: *last_sequence,
            },
        }
    }

    fn from_policy(event: &PolicyEvent) -> Self {
        match event.clone() {
            PolicyEvent::GrantIssued {
                actor,
                operation,
                source,
                issued_at_ms,
                expires_at_ms,
                idle_timeout_ms,
            } => Self::GrantIssued {
                actor,
                operation,
                source,
                issued_at_ms,
                expires_at_ms,
                idle_timeout_ms,
            },
            PolicyEvent::GrantWithdrawn { actor, operation } => {
                Self::GrantWithdrawn { actor, operation }
            }
            PolicyEvent::ActorRevoked { actor } => Self::ActorRevoked { actor },
            PolicyEvent::AgentsSwitched { enabled } => Self::AgentsSwitched { enabled },
            PolicyEvent::OwnerAccessSwitched { enabled } => Self::OwnerAccessSwitched { enabled },
            PolicyEvent::AuditStarted {
                audit,
                at_ms,
                principal,
                operation,
                verdict,
            } => Self::AuditStarted {
                audit,
                at_ms,
                principal,
                operation,
                verdict,
            },
            PolicyEvent::AuditFinished {
                audit,
                outcome,
                returned_events,
            } => Self::AuditFinished {
                audit,
                outcome,
                returned_events,
            },
            PolicyEvent::UnknownToolRefused {
                audit,
                at_ms,
                principal,
            } => Self::UnknownToolRefused {
                audit,
                at_ms,
                principal,
            },
            PolicyEvent::OwnerExported {
                audit,
                at_ms,
                events,
                first_sequence,
                last_sequence,
                encrypted,
            } => Self::OwnerExported {
                audit,
                at_ms,
                events,
                first_sequence,
                last_sequence,
                encrypted,
            },
        }
    }

    fn into_event(self) -> JournalEvent {
        match self {
            Self::ControlApplied { operation, caller } => {
                JournalEvent::ControlApplied { operation, caller }
            }
            Self::RetentionSet { days, caller } => JournalEvent::RetentionSet { days, caller },
            Self::QuotaSet {
                bytes,
                on_quota,
                caller,
            } => JournalEvent::QuotaSet {
                bytes,
                on_quota,
                caller,
            },
            Self::KeyEpochStarted { epoch, reference } => {
                JournalEvent::KeyEpochStarted { epoch, reference }
            }
            Self::SupervisorSignalled { at_ms, signal } => {
                JournalEvent::SupervisorSignalled(Signal {
                    at_ms,
                    kind: signal.into_kind(),
                })
            }
            Self::DropsRecorded { count } => JournalEvent::DropsRecorded { count },
            Self::SequenceMarked {
                high_water,
                boot,
                in_flight_max,
            } => JournalEvent::SequenceMarked {
                high_water,
                boot,
                in_flight_max,
            },
            Self::RecordsLost {
                first_sequence,
                last_sequence,
            } => JournalEvent::RecordsLost {
                first_sequence,
                last_sequence,
            },
            Self::TornTailRecorded {
                chunk,
                bytes_left_out,
            } => JournalEvent::TornTailRecorded {
                chunk,
                bytes_left_out,
            },
            Self::ChunkQuarantined { chunk, caller } => {
                JournalEvent::ChunkQuarantined { chunk, caller }
            }
            Self::ChunkPruned {
                chunk,
                reason,
                last_time_ms,
                records,
            } => JournalEvent::ChunkPruned {
                chunk,
                reason,
                last_time_ms,
                records,
            },
            Self::GrantIssued {
                actor,
                operation,
                source,
                issued_at_ms,
                expires_at_ms,
                idle_timeout_ms,
            } => JournalEvent::Policy(PolicyEvent::GrantIssued {
                actor,
                operation,
                source,
                issued_at_ms,
                expires_at_ms,
                idle_timeout_ms,
            }),
            Self::GrantWithdrawn { actor, operation } => {
                JournalEvent::Policy(PolicyEvent::GrantWithdrawn { actor, operation })
            }
            Self::ActorRevoked { actor } => {
                JournalEvent::Policy(PolicyEvent::ActorRevoked { actor })
            }
            Self::AgentsSwitched { enabled } => {
                JournalEvent::Policy(PolicyEvent::AgentsSwitched { enabled })
            }
            Self::OwnerAccessSwitched { enabled } => {
                JournalEvent::Policy(PolicyEvent::OwnerAccessSwitched { enabled })
            }
            Self::AuditStarted {
                audit,
                at_ms,
                principal,
                operation,
                verdict,
            } => JournalEvent::Policy(PolicyEvent::AuditStarted {
                audit,
                at_ms,
                principal,
                operation,
                verdict,
            }),
            Self::AuditFinished {
                audit,
                outcome,
                returned_events,
            } => JournalEvent::Policy(PolicyEvent::AuditFinished {
                audit,
                outcome,
                returned_events,
            }),
            Self::UnknownToolRefused {
                audit,
                at_ms,
                principal,
            } => JournalEvent::Policy(PolicyEvent::UnknownToolRefused {
                audit,
                at_ms,
                principal,
            }),
            Self::OwnerExported {
                audit,
                at_ms,
                events,
                first_sequence,
                last_sequence,
                encrypted,
            } => JournalEvent::Policy(PolicyEvent::OwnerExported {
                audit,
                at_ms,
                events,
                first_sequence,
                last_sequence,
                encrypted,
            }),
            Self::ContractObserved {
                operation,
                source,
                sequence,
            } => JournalEvent::ContractObserved {
                operation,
                source,
                sequence,
            },
            Self::SequenceReleased {
                reserved,
                high_water,
            } => JournalEvent::SequenceReleased {
                reserved,
                high_water,
            },
            Self::SequencesSkipped {
                first_sequence,
                last_sequence,
            } => JournalEvent::SequencesSkipped {
                first_sequence,
                last_sequence,
            },
        }
    }
}

impl WireSignal {
    fn from_kind(kind: SignalKind) -> Self {
        match kind {
            SignalKind::ChildStarted { child } => Self::ChildStarted { child },
            SignalKind::ChildFailed { child, category } => Self::ChildFailed { child, category },
            SignalKind::ChildRestarted { child } => Self::ChildRestarted { child },
            SignalKind::ChildStopped { child } => Self::ChildStopped { child },
            SignalKind::RestartLimitReached { child } => Self::RestartLimitReached { child },
            SignalKind::StorageFailed { category } => Self::StorageFailed { category },
            SignalKind::StorageRecovered => Self::StorageRecovered {},
            SignalKind::CheckpointVerified => Self::CheckpointVerified {},
            SignalKind::KeyFailed { category } => Self::KeyFailed { category },
            SignalKind::KeyRecovered => Self::KeyRecovered {},
            SignalKind::QuotaReached => Self::QuotaReached {},
            SignalKind::QuotaCleared => Self::QuotaCleared {},
            SignalKind::DropsObserved { count } => Self::DropsObserved { count },
            SignalKind::DropsMarked { count } => Self::DropsMarked { count },
        }
    }

    fn into_kind(self) -> SignalKind {
        match self {
            Self::ChildStarted { child } => SignalKind::ChildStarted { child },
            Self::ChildFailed { child, category } => SignalKind::ChildFailed { child, category },
            Self::ChildRestarted { child } => SignalKind::ChildRestarted { child },
            Self::ChildStopped { child } => SignalKind::ChildStopped { child },
            Self::RestartLimitReached { child } => SignalKind::RestartLimitReached { child },
            Self::StorageFailed { category } => SignalKind::StorageFailed { category },
            Self::StorageRecovered {} => SignalKind::StorageRecovered,
            Self::CheckpointVerified {} => SignalKind::CheckpointVerified,
            Self::KeyFailed { category } => SignalKind::KeyFailed { category },
            Self::KeyRecovered {} => SignalKind::KeyRecovered,
            Self::QuotaReached {} => SignalKind::QuotaReached,
            Self::QuotaCleared {} => SignalKind::QuotaCleared,
            Self::DropsObserved { count } => SignalKind::DropsObserved { count },
            Self::DropsMarked { count } => SignalKind::DropsMarked { count },
        }
    }
}

/// A key reference as its text, validated on the way in.
mod key_reference_text {
    use super::{Deserialize, Deserializer, KeyReference, Serializer};

    pub(super) fn serialize<S: Serializer>(
        reference: &KeyReference,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.serialize_str(reference.as_str())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<KeyReference, D::Error> {
        let text = String::deserialize(d)?;
        KeyReference::new(&text).map_err(|_| serde::de::Error::custom("invalid key reference"))
    }
}

/// A chunk id as 32 lower-case hex characters, validated on the way in.
/// A `boot` that is present is a boot id (never `null`: the stored form leaves an unknown boot
/// out).
fn present_boot<'de, D: Deserializer<'de>>(d: D) -> Result<Option<BootId>, D::Error> {
    BootId::deserialize(d).map(Some)
}

/// A count that is present is a number (never `null`).
fn present_count<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    u64::deserialize(d).map(Some)
}

mod chunk_hex {
    use super::{ChunkId, Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(chunk: &ChunkId, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&chunk.to_hex())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<ChunkId, D::Error> {
        let text = String::deserialize(d)?;
        ChunkId::from_hex(&text).ok_or_else(|| serde::de::Error::custom("invalid chunk id"))
    }
}
