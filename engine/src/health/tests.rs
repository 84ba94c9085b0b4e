//! The health fold: the precedence table, recovery per source, drops, and replay determinism.

use proptest::prelude::*;

use super::*;
use crate::test_strategies;

/// Everything working: admitted, enabled, not paused, nothing pending.
fn ready() -> HealthInputs {
    HealthInputs {
        admitted: true,
        enabled: true,
        paused: false,
        pending_drops: 0,
    }
}

fn at(at_ms: u64, kind: SignalKind) -> Signal {
    Signal { at_ms, kind }
}

/// Makes `category` hold: by changing an input or appending a signal.
fn produce(category: HealthCategory, inputs: &mut HealthInputs, signals: &mut Vec<Signal>) {
    let t = u64::try_from(signals.len()).unwrap();
    let mut push = |kind| signals.push(at(t, kind));
    match category {
        HealthCategory::Ready => {}
        HealthCategory::NotAdmitted => inputs.admitted = false,
        HealthCategory::Disabled => inputs.enabled = false,
        HealthCategory::Paused => inputs.paused = true,
        HealthCategory::KeyUnavailable => push(SignalKind::KeyFailed {
            category: KeyFault::KeyUnavailable,
        }),
        HealthCategory::KeyLocked => push(SignalKind::KeyFailed {
            category: KeyFault::KeyLocked,
        }),
        HealthCategory::KeyCorrupt => push(SignalKind::KeyFailed {
            category: KeyFault::KeyCorrupt,
        }),
        HealthCategory::KeyDestroyFailed => push(SignalKind::KeyFailed {
            category: KeyFault::KeyDestroyFailed,
        }),
        HealthCategory::StorageUnavailable => push(SignalKind::StorageFailed {
            category: StorageFault::StorageUnavailable,
        }),
        HealthCategory::StorageCorrupt => push(SignalKind::StorageFailed {
            category: StorageFault::StorageCorrupt,
        }),
        HealthCategory::QuotaReached => push(SignalKind::QuotaReached),
        HealthCategory::EventsDropped => push(SignalKind::DropsObserved { count: 1 }),
        HealthCategory::WriterStopped => push(SignalKind::RestartLimitReached {
            child: Child::Writer,
        }),
    }
}

#[test]
fn precedence_is_a_permutation_of_the_thirteen_categories_with_ready_last() {
    for category in HealthCategory::ALL {
        assert_eq!(PRECEDENCE.iter().filter(|c| **c == category).count(), 1);
        assert_eq!(PRECEDENCE[rank(category)], category);
    }
    assert_eq!(PRECEDENCE[12], HealthCategory::Ready);
}

#[test]
fn the_documented_order() {
    use HealthCategory::*;
    assert_eq!(
        PRECEDENCE,
        [
            NotAdmitted,
            KeyDestroyFailed,
            KeyCorrupt,
            KeyLocked,
            KeyUnavailable,
            StorageCorrupt,
            WriterStopped,
            StorageUnavailable,
            QuotaReached,
            Disabled,
            Paused,
            EventsDropped,
            Ready,
        ]
    );
}

#[test]
fn each_category_alone_shows_as_itself() {
    for category in HealthCategory::ALL {
        let (mut inputs, mut signals) = (ready(), Vec::new());
        produce(category, &mut inputs, &mut signals);
        assert_eq!(replay(inputs, &signals), category, "{category}");
    }
}

#[test]
fn every_category_wins_over_every_one_below_it_in_either_order() {
    for (i, high) in PRECEDENCE.iter().enumerate() {
        for low in &PRECEDENCE[i + 1..] {
            for order in [[*high, *low], [*low, *high]] {
                let (mut inputs, mut signals) = (ready(), Vec::new());
                for category in order {
                    produce(category, &mut inputs, &mut signals);
                }
                assert_eq!(replay(inputs, &signals), *high, "{high} over {low}");
            }
        }
    }
}

#[test]
fn every_combination_shows_its_highest_category() {
    let faults = &PRECEDENCE[..12];
    for mask in 0u32..(1 << faults.len()) {
        let (mut inputs, mut signals) = (ready(), Vec::new());
        let mut want = HealthCategory::Ready;
        for (bit, category) in faults.iter().enumerate().rev() {
            if mask & (1 << bit) != 0 {
                produce(*category, &mut inputs, &mut signals);
                want = *category;
            }
        }
        assert_eq!(replay(inputs, &signals), want, "mask {mask:#b}");
    }
}

#[test]
fn a_recovery_clears_the_earlier_failures_of_its_own_source_only() {
    let key = |category| at(1, SignalKind::KeyFailed { category });
    let storage = |category| at(2, SignalKind::StorageFailed { category });
    let signals = [
        key(KeyFault::KeyLocked),
        key(KeyFault::KeyCorrupt),
        storage(StorageFault::StorageUnavailable),
        at(3, SignalKind::KeyRecovered),
    ];
    assert_eq!(
        replay(ready(), &signals),
        HealthCategory::StorageUnavailable
    );
    let mut more = signals.to_vec();
    more.push(at(4, SignalKind::StorageRecovered));
    assert_eq!(replay(ready(), &more), HealthCategory::Ready);
    // A failure after the recovery counts again.
    more.push(key(KeyFault::KeyLocked));
    assert_eq!(replay(ready(), &more), HealthCategory::KeyLocked);
    let quota = [
        at(1, SignalKind::QuotaReached),
        at(2, SignalKind::QuotaCleared),
    ];
    assert_eq!(replay(ready(), &quota), HealthCategory::Ready);
}

/// A rolled-back store stays `storage_corrupt` however many writes succeed after it; only a
/// comparison with the checkpoint that finds the chain not older clears it, and that clears
/// nothing transient.
#[test]
fn storage_corrupt_outlasts_every_write_and_only_a_verified_checkpoint_clears_it() {
    let corrupt = at(
        1,
        SignalKind::StorageFailed {
            category: StorageFault::StorageCorrupt,
        },
    );
    let unavailable = at(
        2,
        SignalKind::StorageFailed {
            category: StorageFault::StorageUnavailable,
        },
    );
    let recovered = at(3, SignalKind::StorageRecovered);
    let verified = at(4, SignalKind::CheckpointVerified);
    assert_eq!(
        replay(ready(), &[corrupt, recovered, recovered]),
        HealthCategory::StorageCorrupt
    );
    assert_eq!(
        replay(ready(), &[corrupt, unavailable, recovered]),
        HealthCategory::StorageCorrupt
    );
    assert_eq!(
        replay(ready(), &[corrupt, unavailable, verified]),
        HealthCategory::StorageUnavailable,
        "a verified checkpoint says nothing about a failing disk"
    );
    assert_eq!(
        replay(ready(), &[corrupt, unavailable, verified, recovered]),
        HealthCategory::Ready
    );
}

#[test]
fn a_child_failure_lasts_until_that_child_restarts() {
    let failed = at(
        1,
        SignalKind::ChildFailed {
            child: Child::Writer,
            category: FailureCategory::StorageUnavailable,
        },
    );
    assert_eq!(
        replay(ready(), &[failed]),
        HealthCategory::StorageUnavailable
    );
    let other = at(
        2,
        SignalKind::ChildRestarted {
            child: Child::Query,
        },
    );
    assert_eq!(
        replay(ready(), &[failed, other]),
        HealthCategory::StorageUnavailable
    );
    for clear in [
        SignalKind::ChildRestarted {
            child: Child::Writer,
        },
        SignalKind::ChildStarted {
            child: Child::Writer,
        },
    ] {
        assert_eq!(
            replay(ready(), &[failed, at(3, clear)]),
            HealthCategory::Ready
        );
    }
}

#[test]
fn every_failure_category_shows_as_its_health_category() {
    for child in Child::ALL {
        for category in [
            FailureCategory::KeyUnavailable,
            FailureCategory::KeyLocked,
            FailureCategory::KeyCorrupt,
            FailureCategory::StorageUnavailable,
            FailureCategory::StorageCorrupt,
            FailureCategory::WriterStopped,
        ] {
            let signal = at(0, SignalKind::ChildFailed { child, category });
            assert_eq!(replay(ready(), &[signal]), category.health());
        }
        assert_eq!(
            FailureCategory::for_crash(child).health(),
            child.down_category()
        );
    }
}

#[test]
fn a_stopped_or_given_up_child_shows_its_down_category_until_started() {
    for child in Child::ALL {
        for down in [
            SignalKind::ChildStopped { child },
            SignalKind::RestartLimitReached { child },
        ] {
            assert_eq!(replay(ready(), &[at(0, down)]), child.down_category());
            let started = at(1, SignalKind::ChildStarted { child });
            assert_eq!(
                replay(ready(), &[at(0, down), started]),
                HealthCategory::Ready
            );
        }
    }
    assert_eq!(Child::Writer.down_category(), HealthCategory::WriterStopped);
}

#[test]
fn a_give_up_after_a_storage_failure_shows_writer_stopped() {
    let child = Child::Writer;
    let signals = [
        at(
            0,
            SignalKind::ChildFailed {
                child,
                category: FailureCategory::StorageUnavailable,
            },
        ),
        at(1, SignalKind::RestartLimitReached { child }),
    ];
    assert_eq!(replay(ready(), &signals), HealthCategory::WriterStopped);
}

#[test]
fn events_dropped_shows_while_drops_are_pending() {
    let observed = |count| at(0, SignalKind::DropsObserved { count });
    let marked = |count| at(1, SignalKind::DropsMarked { count });
    assert_eq!(
        replay(ready(), &[observed(3), marked(2)]),
        HealthCategory::EventsDropped
    );
    assert_eq!(
        replay(ready(), &[observed(3), marked(2), marked(1)]),
        HealthCategory::Ready
    );
    // Marking more than was observed never underflows.
    assert_eq!(
        replay(ready(), &[marked(5), observed(1), marked(1)]),
        HealthCategory::Ready
    );
    // Drops still in the capture counter count too.
    let counted = HealthInputs {
        pending_drops: 1,
        ..ready()
    };
    assert_eq!(replay(counted, &[]), HealthCategory::EventsDropped);
}

#[test]
fn key_faults_map_from_health_categories() {
    for fault in [
        KeyFault::KeyUnavailable,
        KeyFault::KeyLocked,
        KeyFault::KeyCorrupt,
        KeyFault::KeyDestroyFailed,
    ] {
        assert_eq!(KeyFault::from_health(fault.health()), Some(fault));
    }
    assert_eq!(KeyFault::from_health(HealthCategory::Ready), None);
    // The key-custody error table lands on a key fault for every error.
    let error = crate::keys::KeyError::Locked {
        detail: String::new(),
    };
    assert_eq!(
        KeyFault::from_health(error.category()),
        Some(KeyFault::KeyLocked)
    );
}

proptest! {
    #[test]
    fn replaying_the_same_signals_gives_the_same_health(
        signals in proptest::collection::vec(test_strategies::signal(), 0..64),
        admitted: bool,
        enabled: bool,
        paused: bool,
        pending_drops in 0..3u64,
    ) {
        let inputs = HealthInputs { admitted, enabled, paused, pending_drops };
        let first = replay(inputs, &signals);
        prop_assert_eq!(first, replay(inputs, &signals.clone()));
        // Folding incrementally, from any split point, is the same fold.
        let split = signals.len() / 2;
        let mut first_half = HealthFold::default();
        for s in &signals[..split] {
            first_half.apply(s);
        }
        // The fold is plain data: a copy resumes it (as a checkpoint would).
        let mut fold = first_half;
        for s in &signals[split..] {
            fold.apply(s);
        }
        prop_assert_eq!(fold.category(&inputs), first);
        // The result is always the highest category that holds.
        let holding: Vec<_> = PRECEDENCE.iter().filter(|c| fold.holds(**c, &inputs)).collect();
        prop_assert_eq!(*holding[0], first);
    }

    #[test]
    fn recovering_everything_returns_to_ready(
        signals in proptest::collection::vec(test_strategies::signal(), 0..64),
    ) {
        let mut all = signals.clone();
        all.push(at(0, SignalKind::StorageRecovered));
        all.push(at(0, SignalKind::CheckpointVerified));
        all.push(at(0, SignalKind::KeyRecovered));
        all.push(at(0, SignalKind::QuotaCleared));
        all.push(at(0, SignalKind::DropsMarked { count: u64::MAX }));
        for child in Child::ALL {
            all.push(at(0, SignalKind::ChildStarted { child }));
        }
        prop_assert_eq!(replay(ready(), &all), HealthCategory::Ready);
    }
}

#[test]
fn a_key_load_ends_an_outstanding_key_failure_but_not_a_failed_destroy() {
    let fold = |kinds: &[SignalKind]| {
        let mut fold = HealthFold::default();
        for kind in kinds {
            fold.apply(&at(0, *kind));
        }
        fold
    };
    // Given nothing failed, a load has nothing to end.
    assert!(!fold(&[]).key_load_ends_a_failure());
    // Given a key failure of an earlier generation, a load ends it.
    for fault in [
        KeyFault::KeyUnavailable,
        KeyFault::KeyLocked,
        KeyFault::KeyCorrupt,
    ] {
        let failed = fold(&[SignalKind::KeyFailed { category: fault }]);
        assert!(failed.key_load_ends_a_failure(), "{fault:?}");
        // When the writer signals the recovery, then nothing is outstanding.
        let recovered = fold(&[
            SignalKind::KeyFailed { category: fault },
            SignalKind::KeyRecovered,
        ]);
        assert!(!recovered.key_load_ends_a_failure());
    }
    // Given a failed destroy, a load ends nothing.
    assert!(
        !fold(&[
            SignalKind::KeyFailed {
                category: KeyFault::KeyUnavailable
            },
            SignalKind::KeyFailed {
                category: KeyFault::KeyDestroyFailed
            },
        ])
        .key_load_ends_a_failure()
    );
}

#[test]
fn a_childs_name_is_the_one_the_journal_writes() {
    for child in Child::ALL {
        assert_eq!(
            serde_json::to_value(child).unwrap(),
            serde_json::Value::String(child.as_str().to_owned())
        );
    }
}
