//! Property tests of the codec, the reader and the writer.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use annal_engine::profile::{ChunkVerdict, CorruptReason, RecordSealer, TailRule, read_chunk};
use annal_engine::store::{History, StoreWriter};
use common::{
    clock, content, fixture, fixture_drafts, fixture_keys, new_store, open_write, read_events,
    writer_config,
};
use proptest::prelude::*;

/// Builds valid v0 events from the fixture's templates: template `t`, new sequence and id.
fn events_from(spec: &[(usize, u64)]) -> Vec<String> {
    let fx = fixture();
    let mut sequence = 0u64;
    spec.iter()
        .enumerate()
        .map(|(i, (template, gap))| {
            sequence += gap;
            let r = &fx.records[*template % fx.records.len()];
            let old_seq = format!("\"sequence\":{},", template % fx.records.len() + 1);
            let old_id = &r.plaintext[27..59];
            assert!(r.plaintext[..27].ends_with("\"id\":\""));
            let new = r
                .plaintext
                .replace(&old_seq, &format!("\"sequence\":{sequence},"))
                .replace(old_id, &format!("{:032x}", i + 1));
            assert!(new.contains(&format!("\"sequence\":{sequence}")));
            new
        })
        .collect()
}

fn spec_strategy() -> impl Strategy<Value = Vec<(usize, u64)>> {
    prop::collection::vec((0usize..16, 1u64..1_000_000), 0..24)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn sealed_chunks_read_back_identical(spec in spec_strategy(), prefix in any::<[u8; 4]>()) {
        let fx = fixture();
        let events = events_from(&spec);
        let header = annal_engine::profile::ChunkHeader::new(
            1, &fx.key_reference, &fx.stream_id, fx.chunk_id, prefix).unwrap();
        let mut sealer = RecordSealer::new(&fixture_keys(), &header).unwrap();
        let mut chunk = sealer.header_bytes().to_vec();
        for e in &events {
            chunk.extend(sealer.seal(e.as_bytes()).unwrap());
        }
        let reading = read_chunk(&chunk, &fixture_keys(), Some(fx.chunk_id), TailRule::MustBeClean);
        let ChunkVerdict::Complete { records } = reading.verdict else {
            panic!("not complete: {:?}", reading.verdict);
        };
        prop_assert_eq!(records.len(), events.len());
        for (r, e) in records.iter().zip(&events) {
            prop_assert_eq!(&r.plaintext, e.as_bytes());
        }
    }

    #[test]
    fn store_writer_round_trips_any_batches(
        templates in prop::collection::vec(0usize..16, 0..24),
        split in 0usize..24,
        max_records in 1u64..6,
    ) {
        let all = fixture_drafts();
        let drafts: Vec<_> = templates.iter().map(|t| all[*t].clone()).collect();
        let (_dir, layout) = new_store();
        let mut config = writer_config();
        config.max_records_per_chunk = max_records;
        let split = split.min(drafts.len());
        // Two writer generations, each with one batch.
        for part in [&drafts[..split], &drafts[split..]] {
            let mut writer =
                StoreWriter::<History>::open(open_write(&layout), fixture_keys(), config.clone(), clock())
                    .unwrap();
            writer.append(part.to_vec()).unwrap();
            writer.sync().unwrap();
        }
        let events = read_events(&layout);
        prop_assert_eq!(content(&events), drafts.clone());
        let sequences: Vec<u64> = events.iter().map(|e| e.data.sequence.get()).collect();
        prop_assert_eq!(sequences, (1..=drafts.len() as u64).collect::<Vec<_>>());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn a_flipped_byte_never_changes_the_valid_events(
        at in 0usize..11_046,
        mask in 1u8..=255,
        newest in any::<bool>(),
    ) {
        let rule = if newest { TailRule::MayBeTorn } else { TailRule::MustBeClean };
        let fx = fixture();
        let mut bytes = fx.chunk_bytes.clone();
        bytes[at] ^= mask;
        let reading = read_chunk(&bytes, &fixture_keys(), Some(fx.chunk_id), rule);
        // Every byte of this chunk is inside the header or a record, so the verdict is never
        // Complete...
        prop_assert!(!matches!(reading.verdict, ChunkVerdict::Complete { .. }),
            "flip at {} gave Complete", at);
        // ...and whatever is still returned is an unchanged prefix ending before the flip.
        for (i, r) in reading.verdict.records().iter().enumerate() {
            prop_assert_eq!(&r.plaintext, fx.records[i].plaintext.as_bytes());
            prop_assert!((r.offset + r.len) as usize <= at);
        }
    }

    #[test]
    fn any_truncation_is_torn_complete_or_a_short_header(len in 0usize..=11_046) {
        let fx = fixture();
        let reading =
            read_chunk(&fx.chunk_bytes[..len], &fixture_keys(), Some(fx.chunk_id), TailRule::MayBeTorn);
        let older =
            read_chunk(&fx.chunk_bytes[..len], &fixture_keys(), Some(fx.chunk_id), TailRule::MustBeClean);
        // Outside the newest chunk a cut inside a record is corruption, never a torn tail.
        let older_is_torn = matches!(older.verdict, ChunkVerdict::TornTail { .. });
        prop_assert!(!older_is_torn, "a cut to {} was torn outside the newest chunk", len);
        let boundaries: Vec<usize> = std::iter::once(97)
            .chain(fx.records.iter().map(|r| r.offset + r.len))
            .collect();
        let whole = boundaries.iter().filter(|b| **b <= len).count();
        match reading.verdict {
            ChunkVerdict::Corrupt { record_index: None, offset: 0, reason: CorruptReason::MalformedHeader } => {
                prop_assert!(len < 97);
            }
            ChunkVerdict::Complete { records } => {
                prop_assert!(boundaries.contains(&len));
                prop_assert_eq!(records.len(), whole - 1);
            }
            ChunkVerdict::TornTail { records, valid_len } => {
                prop_assert!(!boundaries.contains(&len));
                prop_assert_eq!(records.len(), whole - 1);
                prop_assert_eq!(valid_len as usize, boundaries[whole - 1]);
            }
            other => prop_assert!(false, "truncation to {} gave {:?}", len, other),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic_and_never_authenticate(
        tail in prop::collection::vec(any::<u8>(), 0..512),
        with_header in any::<bool>(),
    ) {
        let fx = fixture();
        let mut bytes = if with_header { fx.chunk_bytes[..97].to_vec() } else { Vec::new() };
        bytes.extend(&tail);
        for rule in [TailRule::MayBeTorn, TailRule::MustBeClean] {
            let reading = read_chunk(&bytes, &fixture_keys(), Some(fx.chunk_id), rule);
            prop_assert!(reading.verdict.records().is_empty());
        }
    }
}
