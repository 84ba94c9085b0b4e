//! proptest strategies shared by the unit tests of the pure core (signals, journal events,
//! commands).

use crate::policy::{
    AUDIT_RETURNED_EVENTS_MAX, ActorId, AuditOutcome, CursorRefusal, DenyReason,
    GRANT_LIFETIME_MAX_SECS, GrantSource, Operation, PolicyEvent, Principal, Refusal, Verdict,
};
use std::num::NonZeroU64;

use annal_schema::ControlOperation;
use proptest::prelude::*;

use crate::health::{Child, FailureCategory, KeyFault, Signal, SignalKind, StorageFault};
use crate::journal::{
    CallerKind, Command, ContractSource, JOURNAL_TIME_MAX_MS, JournalEvent, OnQuota, PruneReason,
    QUOTA_MAX_BYTES, QUOTA_MIN_BYTES, RETENTION_MAX_DAYS, RETENTION_MIN_DAYS, TORN_TAIL_MAX_BYTES,
};
use crate::keys::KeyReference;
use crate::profile::ChunkId;

pub fn child() -> impl Strategy<Value = Child> {
    proptest::sample::select(Child::ALL.to_vec())
}

pub fn failure() -> impl Strategy<Value = FailureCategory> {
    proptest::sample::select(vec![
        FailureCategory::KeyUnavailable,
        FailureCategory::KeyLocked,
        FailureCategory::KeyCorrupt,
        FailureCategory::StorageUnavailable,
        FailureCategory::StorageCorrupt,
        FailureCategory::WriterStopped,
    ])
}

pub fn storage_fault() -> impl Strategy<Value = StorageFault> {
    prop_oneof![
        Just(StorageFault::StorageUnavailable),
        Just(StorageFault::StorageCorrupt)
    ]
}

pub fn key_fault() -> impl Strategy<Value = KeyFault> {
    proptest::sample::select(vec![
        KeyFault::KeyUnavailable,
        KeyFault::KeyLocked,
        KeyFault::KeyCorrupt,
        KeyFault::KeyDestroyFailed,
    ])
}

pub fn signal_kind() -> impl Strategy<Value = SignalKind> {
    prop_oneof![
        child().prop_map(|child| SignalKind::ChildStarted { child }),
        (child(), failure())
            .prop_map(|(child, category)| SignalKind::ChildFailed { child, category }),
        child().prop_map(|child| SignalKind::ChildRestarted { child }),
        child().prop_map(|child| SignalKind::ChildStopped { child }),
        child().prop_map(|child| SignalKind::RestartLimitReached { child }),
        storage_fault().prop_map(|category| SignalKind::StorageFailed { category }),
        Just(SignalKind::StorageRecovered),
        Just(SignalKind::CheckpointVerified),
        key_fault().prop_map(|category| SignalKind::KeyFailed { category }),
        Just(SignalKind::KeyRecovered),
        Just(SignalKind::QuotaReached),
        Just(SignalKind::QuotaCleared),
        (1..1_000u64).prop_map(|count| SignalKind::DropsObserved { count }),
        (1..1_000u64).prop_map(|count| SignalKind::DropsMarked { count }),
    ]
}

/// A signal within bounds.
pub fn signal() -> impl Strategy<Value = Signal> {
    (0..=JOURNAL_TIME_MAX_MS, signal_kind()).prop_map(|(at_ms, kind)| Signal { at_ms, kind })
}

pub fn caller() -> impl Strategy<Value = CallerKind> {
    proptest::sample::select(CallerKind::ALL.to_vec())
}

pub fn on_quota() -> impl Strategy<Value = OnQuota> {
    prop_oneof![Just(OnQuota::StopCapture), Just(OnQuota::EvictOldest)]
}

pub fn operation() -> impl Strategy<Value = ControlOperation> {
    proptest::sample::select(ControlOperation::ALL.to_vec())
}

pub fn reference() -> impl Strategy<Value = KeyReference> {
    "[A-Za-z0-9._-]{1,128}".prop_map(|s| KeyReference::new(&s).expect("a valid reference"))
}

pub fn chunk() -> impl Strategy<Value = ChunkId> {
    any::<[u8; 16]>().prop_map(ChunkId)
}

/// An event within bounds.
pub fn event() -> impl Strategy<Value = JournalEvent> {
    prop_oneof![
        (operation(), caller())
            .prop_map(|(operation, caller)| JournalEvent::ControlApplied { operation, caller }),
        (RETENTION_MIN_DAYS..=RETENTION_MAX_DAYS, caller())
            .prop_map(|(days, caller)| JournalEvent::RetentionSet { days, caller }),
        (QUOTA_MIN_BYTES..=QUOTA_MAX_BYTES, on_quota(), caller()).prop_map(
            |(bytes, on_quota, caller)| JournalEvent::QuotaSet {
                bytes,
                on_quota,
                caller
            }
        ),
        (1..=u64::MAX, reference()).prop_map(|(epoch, reference)| {
            JournalEvent::KeyEpochStarted {
                epoch: NonZeroU64::new(epoch).expect("epoch >= 1"),
                reference,
            }
        }),
        signal().prop_map(JournalEvent::SupervisorSignalled),
        (1..=u64::MAX).prop_map(|count| JournalEvent::DropsRecorded { count }),
        (
            1..=u64::MAX,
            proptest::option::of(proptest::prelude::any::<[u8; 16]>()),
            proptest::option::of(1..=u64::MAX),
        )
            .prop_map(
                |(high_water, boot, in_flight_max)| JournalEvent::SequenceMarked {
                    high_water,
                    boot: boot.map(crate::boot::BootId::from_bytes),
                    in_flight_max,
                }
            ),
        (1..=u64::MAX, 0..=1_000u64).prop_map(|(first_sequence, more)| {
            JournalEvent::RecordsLost {
                first_sequence,
                last_sequence: first_sequence.saturating_add(more),
            }
        }),
        (chunk(), 1..=TORN_TAIL_MAX_BYTES).prop_map(|(chunk, bytes_left_out)| {
            JournalEvent::TornTailRecorded {
                chunk,
                bytes_left_out,
            }
        }),
        (chunk(), caller())
            .prop_map(|(chunk, caller)| JournalEvent::ChunkQuarantined { chunk, caller }),
        (
            chunk(),
            prop_oneof![Just(PruneReason::Retention), Just(PruneReason::EvictOldest)],
            0..=JOURNAL_TIME_MAX_MS,
            1..=crate::profile::MAX_RECORDS_PER_CHUNK,
        )
            .prop_map(|(chunk, reason, last_time_ms, records)| {
                JournalEvent::ChunkPruned {
                    chunk,
                    reason,
                    last_time_ms,
                    records,
                }
            }),
        policy_event().prop_map(JournalEvent::Policy),
        prop_oneof![
            Just(ControlOperation::Disable),
            Just(ControlOperation::Pause)
        ]
        .prop_map(|operation| JournalEvent::ContractObserved {
            operation,
            source: ContractSource::StateFile,
            sequence: 0,
        }),
        (operation(), 1..=u64::MAX).prop_filter_map(
            "flush says nothing about on and off",
            |(operation, sequence)| (operation != ControlOperation::Flush).then_some(
                JournalEvent::ContractObserved {
                    operation,
                    source: ContractSource::ControlEvent,
                    sequence,
                }
            )
        ),
        (1..=u64::MAX, 0..=u64::MAX).prop_map(|(reserved, below)| {
            JournalEvent::SequenceReleased {
                reserved,
                high_water: reserved - below % reserved,
            }
        }),
        (1..=u64::MAX, 0..=65_536u64).prop_map(|(first_sequence, more)| {
            JournalEvent::SequencesSkipped {
                first_sequence,
                last_sequence: first_sequence.saturating_add(more),
            }
        }),
    ]
}

pub fn actor() -> impl Strategy<Value = ActorId> {
    "[a-z0-9][a-z0-9._-]{0,63}".prop_map(|s| ActorId::new(&s).expect("a valid actor id"))
}

pub fn policy_operation() -> impl Strategy<Value = Operation> {
    proptest::sample::select(Operation::ALL.to_vec())
}

/// A policy event within bounds.
pub fn policy_event() -> impl Strategy<Value = PolicyEvent> {
    let principal = || prop_oneof![Just(Principal::Owner), actor().prop_map(Principal::Agent)];
    let verdict = prop_oneof![
        Just(Verdict::Allowed),
        proptest::sample::select(DenyReason::ALL.to_vec()).prop_map(Verdict::Denied),
    ];
    let outcome = prop_oneof![
        Just(AuditOutcome::Completed),
        proptest::sample::select(DenyReason::ALL.to_vec())
            .prop_map(|r| AuditOutcome::Refused(Refusal::Denied(r))),
        proptest::sample::select(CursorRefusal::ALL.to_vec())
            .prop_map(|r| AuditOutcome::Refused(Refusal::Cursor(r))),
        proptest::sample::select(annal_schema::ErrorCode::ALL.to_vec())
            .prop_map(|c| AuditOutcome::Refused(Refusal::Contract(c))),
    ];
    prop_oneof![
        (
            actor(),
            policy_operation(),
            prop_oneof![Just(GrantSource::Owner), Just(GrantSource::Manifest)],
            0..=JOURNAL_TIME_MAX_MS / 2,
            0..=JOURNAL_TIME_MAX_MS / 2,
            1_000..=GRANT_LIFETIME_MAX_SECS * 1_000,
        )
            .prop_map(
                |(actor, operation, source, issued_at_ms, lifetime, idle_timeout_ms)| {
                    PolicyEvent::GrantIssued {
                        actor,
                        operation,
                        source,
                        issued_at_ms,
                        expires_at_ms: issued_at_ms + lifetime,
                        idle_timeout_ms,
                    }
                }
            ),
        (actor(), policy_operation())
            .prop_map(|(actor, operation)| PolicyEvent::GrantWithdrawn { actor, operation }),
        actor().prop_map(|actor| PolicyEvent::ActorRevoked { actor }),
        any::<bool>().prop_map(|enabled| PolicyEvent::AgentsSwitched { enabled }),
        any::<bool>().prop_map(|enabled| PolicyEvent::OwnerAccessSwitched { enabled }),
        (
            1..=u64::MAX,
            0..=JOURNAL_TIME_MAX_MS,
            principal(),
            policy_operation(),
            verdict
        )
            .prop_map(|(audit, at_ms, principal, operation, verdict)| {
                PolicyEvent::AuditStarted {
                    audit,
                    at_ms,
                    principal,
                    operation,
                    verdict,
                }
            }),
        (1..=u64::MAX, outcome, 0..=AUDIT_RETURNED_EVENTS_MAX).prop_map(
            |(audit, outcome, returned_events)| PolicyEvent::AuditFinished {
                audit,
                outcome,
                returned_events,
            }
        ),
        (1..=u64::MAX, 0..=JOURNAL_TIME_MAX_MS, principal()).prop_map(
            |(audit, at_ms, principal)| PolicyEvent::UnknownToolRefused {
                audit,
                at_ms,
                principal,
            }
        ),
    ]
}

/// Any command, in bounds or not (small numbers so that marks collide often).
pub fn command() -> impl Strategy<Value = Command> {
    prop_oneof![
        Just(Command::Enable),
        Just(Command::Disable),
        Just(Command::Pause),
        Just(Command::Resume),
        Just(Command::Flush),
        (0..4_000u32).prop_map(|days| Command::SetRetention { days }),
        (
            prop_oneof![
                0..QUOTA_MIN_BYTES * 2,
                QUOTA_MAX_BYTES - 10..QUOTA_MAX_BYTES + 10
            ],
            on_quota()
        )
            .prop_map(|(bytes, on_quota)| Command::SetQuota { bytes, on_quota }),
        (0..100u64).prop_map(|count| Command::RecordDrops { count }),
        (0..100u64).prop_map(|high_water| Command::MarkSequence {
            high_water,
            boot: None,
            in_flight_max: None,
        }),
        (
            1..5u64,
            prop_oneof![Just("a.history.v1"), Just("b.history.v1")]
        )
            .prop_map(|(epoch, reference)| Command::StartKeyEpoch {
                epoch: NonZeroU64::new(epoch).expect("epoch >= 1"),
                reference: KeyReference::new(reference).expect("a valid reference"),
            }),
        signal().prop_map(Command::RecordSignal),
        (operation(), 0..4u64, any::<bool>()).prop_map(|(operation, sequence, from_file)| {
            Command::ObserveContract {
                operation,
                source: if from_file {
                    ContractSource::StateFile
                } else {
                    ContractSource::ControlEvent
                },
                sequence,
            }
        }),
        (0..100u64).prop_map(|high_water| Command::ReleaseSequences { high_water }),
        (0..100u64, 0..100u64).prop_map(|(first_sequence, last_sequence)| Command::RecordSkip {
            first_sequence,
            last_sequence,
        }),
    ]
}
