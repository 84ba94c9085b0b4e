//! The owner's filters over a real store (sealed chunks, a lazily loaded index, records read by
//! location): a filtered page equals the naive answer (every event, filtered, newest `limit`),
//! and what the index rules out is never read: [`QueryService::records_read`] counts the
//! records read from their chunks with the cache off.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use annal_engine::query::{
    EventPage, OwnerFilter, OwnerFilterParts, QueryService, ReaderKeys, RetentionCutoff,
};
use annal_engine::seal::{Seal, seal_chunk};
use annal_engine::storage::StoreLayout;
use annal_schema::tools::QueryRequest;
use annal_schema::{Effect, Event, EventDraft, EventType};
use serde_json::{Value, json};

/// Records per chunk: 600 events make 38 chunks, all but the newest sealed (and deferred).
const RECORDS_PER_CHUNK: u64 = 16;

/// Events written.
const EVENTS: u64 = 600;

/// Time of the first event, in ms since the epoch (2026-12-04T10:00:00Z); one a second after.
const T0_MS: u64 = 1_796_378_400_000;

/// Event `i` (from 0): a cycle of five kinds over two applications, times a second apart.
fn draft(i: u64) -> EventDraft {
    let time =
        annal_schema::EventTime::from_unix(Duration::from_millis(T0_MS + i * 1_000)).unwrap();
    let (app, capability) = if i.is_multiple_of(2) {
        (
            json!({"bundle_id": "org.mozilla.firefox", "display_name": "Firefox"}),
            "ui.click",
        )
    } else {
        (json!({"display_name": "Text Editor"}), "ui.type_text")
    };
    let effect = ["confirmed", "failed", "partial"][(i % 3) as usize];
    let (event_type, payload, identity) = match i % 5 {
        0 | 1 => ("action_started", json!({"kind": "action_started"}), true),
        2 | 3 => (
            "action_completed",
            json!({"kind": "action_completed", "effect": effect, "route": "accessibility", "evidence_kinds": []}),
            true,
        ),
        _ => (
            "session_started",
            json!({"kind": "session", "phase": "started"}),
            false,
        ),
    };
    let mut data = json!({
        "sequence": 1, "platform": "linux", "process_model": "in_daemon",
        "caller_category": "cua_runtime", "payload": payload,
    });
    if identity {
        data["capability"] = json!(capability);
        data["application"] = app;
    }
    Event::from_json_value(json!({
        "specversion": "1.0", "id": "2645d7d2275f3eca5f668ff450660365",
        "source": "urn:cua-driver:history:6dd3aa1eef99854a9a3d39ba1e2315f1",
        "type": format!("cua-driver.history.{event_type}.v0"), "subject": "action/1",
        "time": time.as_str(), "datacontenttype": "application/json",
        "dataschema": "urn:cua-driver:schema:history-event:v0", "data": data,
    }))
    .unwrap()
    .to_draft()
}

/// A store of [`EVENTS`] events in sealed chunks of [`RECORDS_PER_CHUNK`].
fn store() -> (tempfile::TempDir, StoreLayout) {
    let (dir, layout) = common::new_store();
    let storage = common::open_write(&layout);
    let key = common::seal_key();
    let mut config = common::writer_config();
    config.max_records_per_chunk = RECORDS_PER_CHUNK;
    let mut writer =
        annal_engine::store::StoreWriter::<annal_engine::store::History>::open_with_entropy(
            Arc::clone(&storage),
            common::fixture_keys(),
            config,
            common::clock(),
            Box::new(annal_engine::entropy::SeededEntropy::new(11)),
        )
        .unwrap();
    let mut tip: Option<Seal> = None;
    let drafts: Vec<EventDraft> = (0..EVENTS).map(draft).collect();
    for batch in drafts.chunks(50) {
        let receipt = writer.append(batch.to_vec()).unwrap();
        writer.sync().unwrap();
        for closed in receipt.closed {
            tip = Some(seal_chunk(storage.as_ref(), &closed, tip.as_ref(), &key).unwrap());
        }
    }
    (dir, layout)
}

/// A read-only reader with its cache off: every event it returns or examines is read.
fn reader(layout: &StoreLayout) -> QueryService {
    let root = common::fixture_key();
    let keys = ReaderKeys {
        history: common::fixture_keys(),
        session: Arc::new(root.session_id_key()),
        index: Arc::new(annal_engine::index::IndexKey::new(&root.index_key())),
        seal: Arc::new(common::seal_key()),
    };
    let mut reader = QueryService::open(common::open_read(layout), keys, None).unwrap();
    reader.set_hot_cache_max_bytes(0);
    reader
}

fn request(value: Value) -> QueryRequest {
    QueryRequest::parse(&value).unwrap()
}

fn filter(parts: OwnerFilterParts) -> OwnerFilter {
    OwnerFilter::new(parts).unwrap()
}

fn sequences(page: &EventPage) -> Vec<u64> {
    page.events.iter().map(|e| e.data.sequence.get()).collect()
}

/// Sequence `s` (from 1) is event `s - 1`, at this time.
fn time_of(sequence: u64) -> u64 {
    T0_MS + (sequence - 1) * 1_000
}

/// Filtered pages equal the naive answer, across chunk loads and the read batches, with and
/// without the request's own bounds; a filtered-out event is never returned.
#[test]
fn a_filtered_page_is_the_naive_answer() {
    let (_dir, layout) = store();
    let mut naive_reader = reader(&layout);
    let mut everything = Vec::new();
    let mut before = None;
    loop {
        let page = naive_reader
            .page(
                &request(json!({"limit": 200})),
                RetentionCutoff::NONE,
                before,
            )
            .unwrap();
        before = page.events.first().map(|e| e.data.sequence.get());
        let more = page.has_more;
        everything.splice(0..0, page.events);
        if !more {
            break;
        }
    }
    assert_eq!(everything.len() as u64, EVENTS);
    let filters = [
        OwnerFilterParts {
            application: Some("FIREFOX".into()),
            ..Default::default()
        },
        OwnerFilterParts {
            capability: Some("ui.type_text".into()),
            outcome: Some(Effect::Failed),
            ..Default::default()
        },
        OwnerFilterParts {
            text: Some("editor".into()),
            since_ms: Some(time_of(100)),
            until_ms: Some(time_of(420)),
            ..Default::default()
        },
        OwnerFilterParts {
            outcome: Some(Effect::Partial),
            ..Default::default()
        },
        OwnerFilterParts {
            text: Some("terminal".into()),
            ..Default::default()
        },
        OwnerFilterParts {
            since_ms: Some(time_of(590)),
            ..Default::default()
        },
    ];
    let requests = [
        json!({"limit": 3}),
        json!({"limit": 200}),
        json!({"limit": 50, "since_sequence": 40, "until_sequence": 500}),
    ];
    for parts in filters {
        let filter = filter(parts);
        for value in &requests {
            let request = request(value.clone());
            let since = request.since_sequence().unwrap_or(1);
            let until = request.until_sequence().unwrap_or(u64::MAX);
            let matching: Vec<u64> = everything
                .iter()
                .filter(|e| (since..=until).contains(&e.data.sequence.get()))
                .filter(|e| filter.admits_event(e))
                .map(|e| e.data.sequence.get())
                .collect();
            let limit = usize::from(request.limit());
            let expected = &matching[matching.len().saturating_sub(limit)..];
            let mut fresh = reader(&layout);
            let page = fresh
                .page_filtered(&request, &filter, RetentionCutoff::NONE, None)
                .unwrap();
            assert_eq!(sequences(&page), expected, "{filter:?} {value}");
            assert_eq!(page.has_more, matching.len() > limit, "{filter:?} {value}");
            assert!(page.events.iter().all(|e| filter.admits_event(e)));
        }
    }
}

/// What the index rules out is never read: a time window reads only what it returns, a
/// window with nothing in it reads nothing, and an outcome filter reads only the
/// `action_completed` records it examines (never an `action_started` or a session event).
/// Capability and application are not in the index: their candidates are read.
#[test]
fn what_the_index_rules_out_is_never_read() {
    let (_dir, layout) = store();
    let all = request(json!({"limit": 200}));
    let mut reader = reader(&layout);

    let newest_ten = filter(OwnerFilterParts {
        since_ms: Some(time_of(EVENTS - 9)),
        ..Default::default()
    });
    let page = reader
        .page_filtered(&all, &newest_ten, RetentionCutoff::NONE, None)
        .unwrap();
    assert_eq!(sequences(&page), (EVENTS - 9..=EVENTS).collect::<Vec<_>>());
    assert_eq!(
        reader.records_read(),
        10,
        "only the returned records were read"
    );

    let before = reader.records_read();
    let nothing = filter(OwnerFilterParts {
        since_ms: Some(time_of(EVENTS) + 1),
        text: Some("firefox".into()),
        ..Default::default()
    });
    let page = reader
        .page_filtered(&all, &nothing, RetentionCutoff::NONE, None)
        .unwrap();
    assert!(page.events.is_empty());
    assert_eq!(
        reader.records_read(),
        before,
        "an empty window reads nothing"
    );

    // Event i is action_completed when i % 5 is 2 or 3: 240 of 600. Of those, effect failed
    // when i % 3 == 1: the page keeps the newest 200 matches or all; either way no record of
    // another type is read.
    let completed = (0..EVENTS).filter(|i| matches!(i % 5, 2 | 3)).count() as u64;
    let failed = filter(OwnerFilterParts {
        outcome: Some(Effect::Failed),
        ..Default::default()
    });
    let before = reader.records_read();
    let page = reader
        .page_filtered(&all, &failed, RetentionCutoff::NONE, None)
        .unwrap();
    let read = reader.records_read() - before;
    assert!(!page.events.is_empty());
    assert!(
        page.events
            .iter()
            .all(|e| e.event_type() == EventType::ActionCompleted)
    );
    assert_eq!(
        read, completed,
        "every action_completed examined, nothing else"
    );

    // An application filter inside a window: the window's candidates, every type, are read.
    let window = filter(OwnerFilterParts {
        since_ms: Some(time_of(EVENTS - 19)),
        application: Some("text editor".into()),
        ..Default::default()
    });
    let before = reader.records_read();
    let page = reader
        .page_filtered(&all, &window, RetentionCutoff::NONE, None)
        .unwrap();
    assert_eq!(reader.records_read() - before, 20);
    assert!(page.events.iter().all(|e| window.admits_event(e)));
    assert!(!page.events.is_empty());
}
