//! Fuzz targets for every engine parser of outside input, as seeded proptest runs (coverage-
//! guided fuzzing needs a nightly toolchain these machines do not have): structured inputs and
//! mutations of real valid files. Each asserts no panic, a typed refusal, and that nothing a
//! mutation touched is ever accepted as authentic.
//!
//! A `harness = false` target so its count reaches `.ci/run`'s output: `FIGURE fuzz.cases N`.
//! `ANNAL_FUZZ_CASES` sets the cases per target (default `FUZZ_CASES_PER_TARGET`; a long run:
//! `ANNAL_FUZZ_CASES=1000000 cargo test --release -p annal-engine --test fuzz`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use annal_engine::entropy::SeededEntropy;
use annal_engine::index::{IndexKey, chunk_index_of, read_index_file, write_index_file};
use annal_engine::journal::JournalRecord;
use annal_engine::policy::cursor::{CursorBook, CursorKey};
use annal_engine::policy::manifest::{CONTRACT_EXAMPLE_MANIFEST, Manifest};
use annal_engine::policy::{ActorId, Principal, parse_query_arguments};
use annal_engine::profile::{TailRule, read_chunk};
use annal_engine::seal::{SealKey, chain_tip, read_seals, seal_chunk};
use annal_engine::storage::{Area, FileName};
use annal_engine::store::{History, StoreReader, StoreWriter};
use annal_schema::tools::QueryRequest;
use common::{fixture, fixture_drafts, fixture_key, fixture_keys, new_store, open_write};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

/// Cases per target in a CI run.
const FUZZ_CASES_PER_TARGET: u32 = 256;

/// One edit of a valid input.
#[derive(Debug, Clone)]
enum Mutation {
    /// XOR one byte.
    Flip { at: usize, mask: u8 },
    /// Cut the input at this length.
    Truncate { len: usize },
    /// Insert bytes here.
    Insert { at: usize, bytes: Vec<u8> },
    /// Remove a range.
    Remove { at: usize, len: usize },
    /// Copy a range over another place.
    Splice { from: usize, to: usize, len: usize },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 1u8..=255).prop_map(|(at, mask)| Mutation::Flip { at, mask }),
        any::<usize>().prop_map(|len| Mutation::Truncate { len }),
        (any::<usize>(), prop::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(at, bytes)| Mutation::Insert { at, bytes }),
        (any::<usize>(), 1usize..64).prop_map(|(at, len)| Mutation::Remove { at, len }),
        (any::<usize>(), any::<usize>(), 1usize..64).prop_map(|(from, to, len)| Mutation::Splice {
            from,
            to,
            len
        }),
    ]
}

/// Applies `mutations` to `bytes`; returns the lowest offset any of them touched.
fn mutate(bytes: &mut Vec<u8>, mutations: &[Mutation]) -> usize {
    let mut lowest = usize::MAX;
    for m in mutations {
        let n = bytes.len().max(1);
        match m {
            Mutation::Flip { at, mask } => {
                if !bytes.is_empty() {
                    let at = at % n;
                    bytes[at] ^= mask;
                    lowest = lowest.min(at);
                }
            }
            Mutation::Truncate { len } => {
                let len = len % n;
                bytes.truncate(len);
                lowest = lowest.min(len);
            }
            Mutation::Insert { at, bytes: extra } => {
                let at = at % n;
                bytes.splice(at..at, extra.iter().copied());
                lowest = lowest.min(at);
            }
            Mutation::Remove { at, len } => {
                let at = at % n;
                let end = (at + len).min(bytes.len());
                bytes.drain(at..end);
                lowest = lowest.min(at);
            }
            Mutation::Splice { from, to, len } => {
                let from = from % n;
                let to = to % n;
                let end = (from + len).min(bytes.len());
                let copy: Vec<u8> = bytes[from..end].to_vec();
                for (i, b) in copy.into_iter().enumerate() {
                    if let Some(slot) = bytes.get_mut(to + i) {
                        if *slot != b {
                            lowest = lowest.min(to + i);
                        }
                        *slot = b;
                    }
                }
            }
        }
    }
    lowest
}

fn mutations() -> impl Strategy<Value = Vec<Mutation>> {
    prop::collection::vec(mutation(), 1..4)
}

/// Arbitrary JSON values, a few levels deep, from the vocabulary the parsers know.
fn json_value() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::Bool),
        any::<i64>().prop_map(|n| serde_json::json!(n)),
        any::<u64>().prop_map(|n| serde_json::json!(n)),
        any::<f64>().prop_map(|f| serde_json::json!(f)),
        "[a-z_]{0,12}".prop_map(serde_json::Value::String),
        ".{0,40}".prop_map(serde_json::Value::String),
    ];
    leaf.prop_recursive(3, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    Just("limit".to_owned()),
                    Just("session_id".to_owned()),
                    Just("since_sequence".to_owned()),
                    Just("until_sequence".to_owned()),
                    Just("cursor".to_owned()),
                    Just("kind".to_owned()),
                    Just("event".to_owned()),
                    Just("sequence".to_owned()),
                    "[a-z_]{1,10}",
                ],
                inner,
                0..6
            )
            .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

struct Targets {
    cases: u32,
    total: u64,
}

impl Targets {
    /// Runs one target for `self.cases` cases; panics with its name and input on a failure.
    fn run<S: Strategy>(
        &mut self,
        name: &str,
        strategy: S,
        test: impl Fn(S::Value) -> Result<(), TestCaseError>,
    ) where
        S::Value: std::fmt::Debug,
    {
        let mut runner = TestRunner::new(Config {
            cases: self.cases,
            failure_persistence: None,
            ..Config::default()
        });
        if let Err(failure) = runner.run(&strategy, test) {
            panic!("fuzz target {name} failed: {failure}");
        }
        println!("fuzz: {name}: {} cases", self.cases);
        self.total += u64::from(self.cases);
    }
}

fn main() {
    if !annal_engine::test_support::suite_selected("fuzz") {
        return;
    }
    let cases =
        annal_engine::test_support::env_parsed("ANNAL_FUZZ_CASES").unwrap_or(FUZZ_CASES_PER_TARGET);
    let mut targets = Targets { cases, total: 0 };
    chunks(&mut targets);
    journal(&mut targets);
    requests(&mut targets);
    manifests(&mut targets);
    cursors(&mut targets);
    derived_files(&mut targets);
    println!("FIGURE fuzz.cases {} cases", targets.total);
}

/// The chunk header and record reader, and its torn-tail classifier.
fn chunks(targets: &mut Targets) {
    let fx = fixture();
    let keys = fixture_keys();
    targets.run("chunk_reader.mutated_fixture", mutations(), |edits| {
        let mut bytes = fx.chunk_bytes.clone();
        let lowest = mutate(&mut bytes, &edits);
        for rule in [TailRule::MayBeTorn, TailRule::MustBeClean] {
            let reading = read_chunk(&bytes, &keys, Some(fx.chunk_id), rule);
            // Whatever authenticates is the fixture's own record at that position, before the
            // first byte an edit touched.
            for (i, record) in reading.verdict.records().iter().enumerate() {
                prop_assert_eq!(&record.plaintext, fx.records[i].plaintext.as_bytes());
                prop_assert!(record.offset + record.len <= lowest as u64);
            }
        }
        Ok(())
    });
    targets.run(
        "chunk_reader.arbitrary_bytes",
        (prop::collection::vec(any::<u8>(), 0..1024), any::<bool>()),
        |(tail, with_header)| {
            let mut bytes = if with_header {
                fx.chunk_bytes[..97].to_vec()
            } else {
                Vec::new()
            };
            bytes.extend(tail);
            for rule in [TailRule::MayBeTorn, TailRule::MustBeClean] {
                let reading = read_chunk(&bytes, &keys, Some(fx.chunk_id), rule);
                prop_assert!(reading.verdict.records().is_empty());
            }
            Ok(())
        },
    );
}

/// Journal records (decrypted plaintext JSON).
fn journal(targets: &mut Targets) {
    let valid: Vec<Vec<u8>> = [
        r#"{"dataschema":"urn:annal:schema:engine-journal:v1","sequence":1,"time_ms":1,"stream":"0123456789abcdef0123456789abcdef","event":{"kind":"control_applied","operation":"enable","caller":"owner_cli"}}"#,
        r#"{"dataschema":"urn:annal:schema:engine-journal:v1","sequence":2,"time_ms":2,"stream":"0123456789abcdef0123456789abcdef","event":{"kind":"chunk_quarantined","chunk":"0123456789abcdef0123456789abcdef","caller":"owner_cli"}}"#,
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    for sample in &valid {
        assert!(
            JournalRecord::from_json_slice(sample).is_ok(),
            "a valid sample: {}",
            String::from_utf8_lossy(sample)
        );
    }
    targets.run(
        "journal_record.mutated",
        (0..valid.len(), mutations()),
        |(which, edits)| {
            let mut bytes = valid[which].clone();
            mutate(&mut bytes, &edits);
            if let Ok(record) = JournalRecord::from_json_slice(&bytes) {
                // Accepted: it is a record of the closed schema, and it round-trips.
                let again = JournalRecord::from_json_slice(&record.to_json_vec());
                prop_assert!(again.is_ok());
            }
            Ok(())
        },
    );
    targets.run("journal_record.arbitrary_json", json_value(), |value| {
        let bytes = serde_json::to_vec(&value).unwrap_or_default();
        let _ = JournalRecord::from_json_slice(&bytes);
        Ok(())
    });
}

/// `history_query` arguments (with the paging extension).
fn requests(targets: &mut Targets) {
    targets.run("query_request.arbitrary_json", json_value(), |value| {
        let contract = QueryRequest::parse(&value);
        let extended = parse_query_arguments(&value);
        // The extension accepts exactly what the contract accepts, plus `cursor`.
        if value.get("cursor").is_none() {
            prop_assert_eq!(contract.is_ok(), extended.is_ok());
        }
        if let Ok(request) = contract {
            prop_assert!((1..=200).contains(&request.limit()));
        }
        Ok(())
    });
}

/// Bounded-mode manifests: never a panic, an error never echoes the input (a planted value or
/// key), and a key written twice is never accepted.
fn manifests(targets: &mut Targets) {
    const PLANT: &str = "zqplantqz";
    targets.run(
        "manifest.mutated_example",
        (mutations(), 0u8..3),
        |(edits, plant)| {
            let mut bytes = CONTRACT_EXAMPLE_MANIFEST.as_bytes().to_vec();
            match plant {
                1 => bytes.extend_from_slice(format!("\nnotes: {PLANT}\n").as_bytes()),
                2 => bytes.extend_from_slice(format!("\n{PLANT}: 1\n").as_bytes()),
                _ => {}
            }
            mutate(&mut bytes, &edits);
            let text = String::from_utf8_lossy(&bytes);
            if let Err(error) = Manifest::parse(&text) {
                prop_assert!(!error.to_string().contains(PLANT), "{}", error);
            }
            Ok(())
        },
    );
    // Any top-level field written again, before or after the example, with any value: refused.
    targets.run(
        "manifest.duplicate_key",
        (
            prop::sample::select(
                &[
                    "version",
                    "expires_after",
                    "idle_timeout",
                    "resources",
                    "allow",
                ][..],
            ),
            ".{0,12}",
            any::<bool>(),
        ),
        |(field, value, before)| {
            let again = format!("{field}: {:?}\n", value);
            let text = if before {
                format!("{again}{CONTRACT_EXAMPLE_MANIFEST}")
            } else {
                format!("{CONTRACT_EXAMPLE_MANIFEST}{again}")
            };
            prop_assert!(Manifest::parse(&text).is_err(), "accepted: {}", text);
            Ok(())
        },
    );
    targets.run("manifest.arbitrary_text", ".{0,400}", |text| {
        let _ = Manifest::parse(&text);
        Ok(())
    });
}

/// Paging cursors: a mutated cursor is never redeemed.
fn cursors(targets: &mut Targets) {
    let key = Arc::new(CursorKey::new(&fixture_key().cursor_key()));
    let principal = Principal::Agent(ActorId::new("fuzz-agent").unwrap());
    let request = QueryRequest::parse(&serde_json::json!({"limit": 5})).unwrap();
    targets.run(
        "cursor.mutated",
        (any::<u64>(), mutations()),
        |(seed, edits)| {
            let mut book = CursorBook::new(Arc::clone(&key), [7; 16]);
            let cursor = book
                .issue(
                    &principal,
                    &request,
                    100,
                    1_000,
                    &mut SeededEntropy::new(seed),
                )
                .unwrap();
            let mut bytes = cursor.clone().into_bytes();
            mutate(&mut bytes, &edits);
            let text = String::from_utf8_lossy(&bytes).into_owned();
            let redeemed = book.redeem(&text, &principal, &request, 1_001);
            if text != cursor {
                prop_assert!(redeemed.is_err(), "a mutated cursor was redeemed");
            }
            Ok(())
        },
    );
    targets.run("cursor.arbitrary_text", ".{0,400}", |text| {
        let mut book = CursorBook::new(Arc::clone(&key), [7; 16]);
        prop_assert!(book.redeem(&text, &principal, &request, 1).is_err());
        Ok(())
    });
}

/// Index and seal files: written for real, then mutated in place.
fn derived_files(targets: &mut Targets) {
    let (_dir, layout) = new_store();
    let storage = open_write(&layout);
    let mut config = common::writer_config();
    config.max_records_per_chunk = 4;
    let mut writer = StoreWriter::<History>::open_with_entropy(
        Arc::clone(&storage),
        fixture_keys(),
        config,
        common::clock(),
        Box::new(SeededEntropy::new(1)),
    )
    .unwrap();
    let seal_key = SealKey::from_purpose_key(&fixture_key().seal_key());
    let mut tip = None;
    for batch in fixture_drafts().chunks(4) {
        let receipt = writer.append(batch.to_vec()).unwrap();
        writer.sync().unwrap();
        for closed in receipt.closed {
            tip = Some(seal_chunk(storage.as_ref(), &closed, tip.as_ref(), &seal_key).unwrap());
        }
    }
    drop(writer);
    let seals = read_seals(storage.as_ref(), &seal_key).unwrap();
    let original = chain_tip(&seals).cloned().unwrap();
    let seal_name = seals
        .iter()
        .find(|s| s.seal.as_ref().ok() == Some(&original))
        .map(|s| s.file_name.clone())
        .unwrap();
    let seal_dir = layout.sidecar().unwrap().join("seals");
    let seal_bytes = std::fs::read(seal_dir.join(&seal_name)).unwrap();
    targets.run("seal_file.mutated", mutations(), |edits| {
        let mut bytes = seal_bytes.clone();
        mutate(&mut bytes, &edits);
        std::fs::write(seal_dir.join(&seal_name), &bytes).unwrap();
        let reads = read_seals(storage.as_ref(), &seal_key).unwrap();
        let read = reads.iter().find(|r| r.file_name == seal_name).unwrap();
        if bytes != seal_bytes {
            prop_assert!(read.seal.is_err(), "a mutated seal verified");
        }
        Ok(())
    });
    std::fs::write(seal_dir.join(&seal_name), &seal_bytes).unwrap();

    let index_key = IndexKey::new(&fixture_key().index_key());
    let report = StoreReader::<History>::new(Arc::clone(&storage))
        .read(&fixture_keys())
        .unwrap();
    let chunk = report
        .chunks
        .iter()
        .find_map(chunk_index_of)
        .expect("a sealed chunk gets an index");
    write_index_file(storage.as_ref(), &index_key, &chunk).unwrap();
    let chunk_len = storage
        .open_read(
            Area::Chunks,
            &annal_engine::store::chunk_file_name(chunk.chunk_id),
        )
        .unwrap()
        .len();
    let index_name: FileName = annal_engine::index::index_file_name(chunk.chunk_id);
    let index_path = layout
        .sidecar()
        .unwrap()
        .join("index")
        .join(index_name.as_str());
    let index_bytes = std::fs::read(&index_path).unwrap();
    targets.run("index_file.mutated", mutations(), |edits| {
        let mut bytes = index_bytes.clone();
        mutate(&mut bytes, &edits);
        std::fs::write(&index_path, &bytes).unwrap();
        let read = read_index_file(storage.as_ref(), &index_key, chunk.chunk_id, chunk_len);
        match read {
            Ok(index) => prop_assert_eq!(index, chunk.clone(), "a mutated index was accepted"),
            Err(_) => prop_assert!(bytes != index_bytes, "the valid file was refused"),
        }
        Ok(())
    });
}
