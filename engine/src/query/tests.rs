//! The planner against a naive full-scan oracle, and its edge cases.

use std::time::Duration;

use annal_schema::EventType;
use annal_schema::tools::QueryRequest;
use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::keys::RootKey;
use crate::profile::ChunkId;

fn key() -> SessionIdKey {
    RootKey::from_bytes([3; 32]).session_id_key()
}

fn entry(sequence: u64, time_s: u64, session: Option<[u8; 16]>) -> IndexEntry {
    IndexEntry {
        sequence,
        time: Duration::from_secs(time_s),
        session,
        event_type: EventType::ActionStarted,
        location: RecordLocation {
            chunk_id: ChunkId([(sequence % 7) as u8; 16]),
            position: sequence,
            offset: sequence * 100,
            len: 90,
            sequence,
        },
    }
}

fn request(value: serde_json::Value) -> QueryRequest {
    QueryRequest::parse(&value).unwrap()
}

fn sequences(locations: &[RecordLocation]) -> Vec<u64> {
    locations.iter().map(|l| l.sequence).collect()
}

/// The naive semantics: filter everything, keep the newest `limit`, ascending.
fn oracle(request: &QueryRequest, entries: &[IndexEntry], cutoff: RetentionCutoff) -> Vec<u64> {
    let session = request.session_id().map(|v| {
        let mut ids = vec![key().session_id(v).to_bytes()];
        if let Ok(id) = OpaqueId::new(v) {
            ids.push(id.to_bytes());
        }
        ids
    });
    let mut all: Vec<u64> = entries
        .iter()
        .filter(|e| request.since_sequence().is_none_or(|s| e.sequence >= s))
        .filter(|e| request.until_sequence().is_none_or(|u| e.sequence <= u))
        .filter(|e| cutoff.admits(e.time))
        .filter(|e| match &session {
            None => true,
            Some(ids) => e.session.is_some_and(|s| ids.contains(&s)),
        })
        .map(|e| e.sequence)
        .collect();
    all.sort_unstable();
    let keep = all.len().saturating_sub(usize::from(request.limit()));
    all.split_off(keep)
}

#[test]
fn newest_limit_ascending_with_inclusive_bounds() {
    let index = Index::from_entries((1..=10).map(|s| entry(s, s, None)).collect());
    let all = sequences(&plan(
        &request(json!({})),
        &index,
        &key(),
        RetentionCutoff::NONE,
    ));
    assert_eq!(all, (1..=10).collect::<Vec<_>>());
    let newest = plan(
        &request(json!({"limit": 3})),
        &index,
        &key(),
        RetentionCutoff::NONE,
    );
    assert_eq!(sequences(&newest), [8, 9, 10]);
    let bounded = plan(
        &request(json!({"since_sequence": 3, "until_sequence": 6, "limit": 2})),
        &index,
        &key(),
        RetentionCutoff::NONE,
    );
    assert_eq!(sequences(&bounded), [5, 6], "inclusive, newest two");
    let single = plan(
        &request(json!({"since_sequence": 4, "until_sequence": 4})),
        &index,
        &key(),
        RetentionCutoff::NONE,
    );
    assert_eq!(sequences(&single), [4]);
    let beyond = plan(
        &request(json!({"since_sequence": 11})),
        &index,
        &key(),
        RetentionCutoff::NONE,
    );
    assert!(beyond.is_empty());
}

#[test]
fn a_session_matches_by_raw_label_or_opaque_id_and_never_otherwise() {
    let label_id = key().session_id("label-a").to_bytes();
    let other = key().session_id("label-b").to_bytes();
    let index = Index::from_entries(vec![
        entry(1, 1, Some(label_id)),
        entry(2, 2, Some(other)),
        entry(3, 3, None),
        entry(4, 4, Some(label_id)),
    ]);
    let by_label = plan(
        &request(json!({"session_id": "label-a"})),
        &index,
        &key(),
        RetentionCutoff::NONE,
    );
    assert_eq!(sequences(&by_label), [1, 4]);
    let hex = OpaqueId::from_bytes(label_id);
    let by_id = plan(
        &request(json!({"session_id": hex.as_str()})),
        &index,
        &key(),
        RetentionCutoff::NONE,
    );
    assert_eq!(sequences(&by_id), [1, 4]);
    let unknown = plan(
        &request(json!({"session_id": "nobody"})),
        &index,
        &key(),
        RetentionCutoff::NONE,
    );
    assert!(
        unknown.is_empty(),
        "a session filter never matches events without it"
    );
    // Another namespace's key derives other ids: the same label finds nothing.
    let foreign = RootKey::from_bytes([4; 32]).session_id_key();
    assert!(
        plan(
            &request(json!({"session_id": "label-a"})),
            &index,
            &foreign,
            RetentionCutoff::NONE
        )
        .is_empty()
    );
}

#[test]
fn retention_is_exact_by_event_time() {
    let day = 86_400;
    let now = Duration::from_secs(100 * day);
    let index = Index::from_entries(vec![
        entry(1, 93 * day - 1, None),
        entry(2, 93 * day, None),
        entry(3, 99 * day, None),
    ]);
    let cutoff = RetentionCutoff::new(now, 7);
    let visible = plan(&request(json!({})), &index, &key(), cutoff);
    assert_eq!(
        sequences(&visible),
        [2, 3],
        "one second older than the cutoff is invisible"
    );
}

#[test]
fn push_refuses_a_sequence_that_does_not_increase() {
    let mut index = Index::new();
    index.push(entry(5, 1, None)).unwrap();
    assert_eq!(
        index.push(entry(5, 1, None)),
        Err(OutOfOrder {
            sequence: 5,
            after: 5
        })
    );
    assert!(index.push(entry(9, 1, None)).is_ok());
    assert_eq!(index.len(), 2);
}

fn sessions() -> Vec<Option<[u8; 16]>> {
    vec![
        None,
        Some(key().session_id("s0").to_bytes()),
        Some(key().session_id("s1").to_bytes()),
        Some(key().session_id("s2").to_bytes()),
    ]
}

fn request_strategy() -> impl Strategy<Value = QueryRequest> {
    (
        prop::option::of(1u64..=200),
        prop::option::of(0usize..6),
        prop::option::of(1u64..400),
        prop::option::of(1u64..400),
    )
        .prop_filter_map("since <= until", |(limit, session, since, until)| {
            let mut map = serde_json::Map::new();
            if let Some(limit) = limit {
                map.insert("limit".into(), json!(limit));
            }
            if let Some(session) = session {
                let value = match session {
                    0..=2 => format!("s{session}"),
                    3 => OpaqueId::from_bytes(key().session_id("s1").to_bytes())
                        .as_str()
                        .to_owned(),
                    4 => "0123456789abcdef0123456789abcdef".to_owned(),
                    _ => "unknown".to_owned(),
                };
                map.insert("session_id".into(), json!(value));
            }
            if let Some(since) = since {
                map.insert("since_sequence".into(), json!(since));
            }
            if let Some(until) = until {
                map.insert("until_sequence".into(), json!(until));
            }
            QueryRequest::parse(&serde_json::Value::Object(map)).ok()
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn the_planner_agrees_with_a_full_scan(
        gaps in prop::collection::vec((1u64..5, 0usize..4, 0u64..1_000), 0..300),
        request in request_strategy(),
        retention_days in prop::option::of(1u32..10),
    ) {
        let all_sessions = sessions();
        let mut sequence = 0;
        let entries: Vec<IndexEntry> = gaps
            .iter()
            .map(|(gap, session, time)| {
                sequence += gap;
                entry(sequence, time * 1_000, all_sessions[*session])
            })
            .collect();
        let index = Index::from_entries(entries.clone());
        let cutoff = retention_days.map_or(RetentionCutoff::NONE, |days| {
            RetentionCutoff::new(Duration::from_secs(1_000_000), days)
        });
        let planned = sequences(&plan(&request, &index, &key(), cutoff));
        prop_assert_eq!(planned.clone(), oracle(&request, &entries, cutoff));
        prop_assert!(planned.len() <= usize::from(request.limit()));
        prop_assert!(planned.windows(2).all(|w| w[0] < w[1]));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, failure_persistence: None, ..ProptestConfig::default() })]

    /// Pages are disjoint, each is ascending, and the first n pages of limit L together are
    /// the unpaged answer of limit n * L; `has_more` is true exactly when another page follows.
    #[test]
    fn pages_are_disjoint_and_together_equal_the_unpaged_answer(
        gaps in prop::collection::vec((1u64..5, 0usize..4, 0u64..1_000), 0..300),
        page_limit in 1u8..=40,
        pages in 1u8..=5,
        session in prop::option::of(0usize..4),
        since in prop::option::of(1u64..100),
    ) {
        let all_sessions = sessions();
        let mut sequence = 0;
        let entries: Vec<IndexEntry> = gaps
            .iter()
            .map(|(gap, session, time)| {
                sequence += gap;
                entry(sequence, time * 1_000, all_sessions[*session])
            })
            .collect();
        let index = Index::from_entries(entries);
        let mut filters = serde_json::Map::new();
        if let Some(session) = session.and_then(|s| all_sessions[s]) {
            filters.insert("session_id".into(), json!(OpaqueId::from_bytes(session).as_str()));
        }
        if let Some(since) = since {
            filters.insert("since_sequence".into(), json!(since));
        }
        let mut paged = serde_json::Value::Object(filters.clone());
        paged["limit"] = json!(page_limit);
        let mut unpaged = serde_json::Value::Object(filters);
        unpaged["limit"] = json!(u16::from(page_limit) * u16::from(pages));
        let paged = request(paged);
        let unpaged = request(unpaged);

        let mut collected: Vec<u64> = Vec::new();
        let mut before = None;
        for _ in 0..pages {
            let page = plan_page(&paged, &index, &key(), RetentionCutoff::NONE, before);
            let got = sequences(&page.locations);
            prop_assert!(got.windows(2).all(|w| w[0] < w[1]));
            prop_assert!(got.iter().all(|s| collected.iter().all(|c| c > s)), "pages overlap");
            let next = plan_page(&paged, &index, &key(), RetentionCutoff::NONE, got.first().copied());
            prop_assert_eq!(page.has_more, !got.is_empty() && !next.locations.is_empty());
            let mut older = got.clone();
            older.extend(collected);
            collected = older;
            if !page.has_more {
                break;
            }
            before = got.first().copied();
        }
        prop_assert_eq!(collected, sequences(&plan(&unpaged, &index, &key(), RetentionCutoff::NONE)));
    }
}

#[test]
fn a_page_below_the_first_sequence_is_empty() {
    let index = Index::from_entries((1..=5).map(|s| entry(s, s, None)).collect());
    for before in [0, 1] {
        let page = plan_page(
            &request(json!({})),
            &index,
            &key(),
            RetentionCutoff::NONE,
            Some(before),
        );
        assert!(page.locations.is_empty(), "{before}");
        assert!(!page.has_more);
    }
    let page = plan_page(
        &request(json!({"limit": 1})),
        &index,
        &key(),
        RetentionCutoff::NONE,
        Some(3),
    );
    assert_eq!(sequences(&page.locations), [2]);
    assert!(page.has_more);
}

#[test]
fn forgetting_lost_sequences_drops_exactly_those_entries() {
    let mut index = Index::from_entries((1..=10).map(|s| entry(s, s, None)).collect());
    index.forget_sequences(&(7..=12));
    let left: Vec<u64> = index.entries().iter().map(|e| e.sequence).collect();
    assert_eq!(left, [1, 2, 3, 4, 5, 6]);
    // A range that holds nothing indexed changes nothing.
    index.forget_sequences(&(20..=30));
    assert_eq!(index.len(), 6);
    // The next appended entry still follows the last kept one.
    assert!(index.push(entry(13, 13, None)).is_ok());
}
