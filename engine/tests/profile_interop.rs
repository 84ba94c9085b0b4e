//! Interoperability with the reference implementation at the chunk level.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use annal_engine::keys::HistoryKeys;
use annal_engine::profile::{ChunkVerdict, RecordSealer, TailRule, read_chunk};
use chacha20poly1305::aead::{Aead, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Key, KeyInit, Nonce};
use ciborium::Value;
use common::{fixture, fixture_key, fixture_keys, hex, unhex};

#[test]
fn reference_chunk_reads_complete_with_byte_identical_events() {
    let fx = fixture();
    let reading = read_chunk(
        &fx.chunk_bytes,
        &fixture_keys(),
        Some(fx.chunk_id),
        TailRule::MustBeClean,
    );
    let ChunkVerdict::Complete { records } = &reading.verdict else {
        panic!("expected Complete, got {:?}", reading.verdict);
    };
    assert_eq!(records.len(), 16);
    for (i, (ours, theirs)) in records.iter().zip(&fx.records).enumerate() {
        assert_eq!(ours.plaintext, theirs.plaintext.as_bytes(), "record {i}");
        assert_eq!(ours.offset as usize, theirs.offset, "record {i}");
        assert_eq!(ours.len as usize, theirs.len, "record {i}");
        assert_eq!(ours.position, i as u64);
        assert_eq!(ours.sequence(), i as u64 + 1);
    }
    let header = reading.header.unwrap();
    assert_eq!(hex(&header.bytes), fx.header_hex);
    assert_eq!(header.header, fx.header());
}

#[test]
fn header_bytes_equal_reference_for_the_same_inputs() {
    let fx = fixture();
    let ours = fx.header().encode().unwrap();
    assert_eq!(ours.len(), 97);
    assert_eq!(hex(&ours), fx.header_hex);
}

#[test]
fn annal_sealer_reproduces_the_reference_chunk_byte_for_byte() {
    // ChaCha20-Poly1305 is deterministic for a fixed key, IV, AAD and plaintext, so sealing the
    // fixture's plaintexts under the fixture's header must give the reference file exactly.
    let fx = fixture();
    let mut sealer = RecordSealer::new(&fixture_keys(), &fx.header()).unwrap();
    let mut chunk = sealer.header_bytes().to_vec();
    for record in &fx.records {
        chunk.extend(sealer.seal(record.plaintext.as_bytes()).unwrap());
    }
    assert_eq!(sealer.next_position(), 16);
    assert_eq!(chunk.len(), fx.chunk_bytes.len());
    assert!(
        chunk == fx.chunk_bytes,
        "annal's chunk differs from the reference's"
    );
}

/// Decodes a chunk without annal's reader: ciborium values, a hand-built Enc_structure and the
/// AEAD directly. Returns the plaintexts.
fn independent_decode(chunk: &[u8], chunk_key: &[u8; 32]) -> Vec<Vec<u8>> {
    let mut cursor = chunk;
    let header: Value = ciborium::de::from_reader(&mut cursor).unwrap();
    let header_bytes = &chunk[..chunk.len() - cursor.len()];
    let items = header.into_array().unwrap();
    assert_eq!(items.len(), 7);
    assert_eq!(items[0], Value::Integer(1.into()));
    assert_eq!(items[1], Value::Integer(24.into()));
    let prefix = items[6].as_bytes().unwrap().clone();
    let aead = ChaCha20Poly1305::new(&Key::from(*chunk_key));
    let mut out = Vec::new();
    let mut position = 0u64;
    while !cursor.is_empty() {
        let item: Value = ciborium::de::from_reader(&mut cursor).unwrap();
        let (tag, inner) = item.into_tag().unwrap();
        assert_eq!(tag, 16);
        let parts = inner.into_array().unwrap();
        let protected = parts[0].as_bytes().unwrap().clone();
        assert_eq!(protected, vec![0xa1, 0x01, 0x18, 0x18]);
        let unprotected = parts[1].as_map().unwrap();
        assert_eq!(unprotected.len(), 1);
        assert_eq!(unprotected[0].0, Value::Integer(5.into()));
        let iv = unprotected[0].1.as_bytes().unwrap().clone();
        let mut expected_iv = prefix.clone();
        expected_iv.extend(position.to_be_bytes());
        assert_eq!(iv, expected_iv);
        let enc_structure = Value::Array(vec![
            Value::Text("Encrypt0".into()),
            Value::Bytes(protected),
            Value::Bytes(header_bytes.to_vec()),
        ]);
        let mut aad = Vec::new();
        ciborium::ser::into_writer(&enc_structure, &mut aad).unwrap();
        let ciphertext = parts[2].as_bytes().unwrap();
        let nonce = Nonce::try_from(iv.as_slice()).unwrap();
        out.push(
            aead.decrypt(
                &nonce,
                Payload {
                    msg: ciphertext,
                    aad: &aad,
                },
            )
            .unwrap(),
        );
        position += 1;
    }
    out
}

#[test]
fn annal_chunk_decodes_through_an_independent_path() {
    let fx = fixture();
    let root = fixture_key();
    let keys = HistoryKeys::from_root(fixture_key());
    // A header annal chose itself (other chunk id, prefix and epoch), not the fixture's.
    let header = annal_engine::profile::ChunkHeader::new(
        3,
        "annal.test.v1",
        &fx.stream_id,
        annal_engine::profile::ChunkId([0x5a; 16]),
        [1, 2, 3, 4],
    )
    .unwrap();
    let mut sealer = RecordSealer::new(&keys, &header).unwrap();
    let mut chunk = sealer.header_bytes().to_vec();
    for record in &fx.records[..5] {
        chunk.extend(sealer.seal(record.plaintext.as_bytes()).unwrap());
    }
    let key = root.chunk_key(&[0x5a; 16], &fx.stream_id, 3);
    let plaintexts = independent_decode(&chunk, key.as_bytes());
    assert_eq!(plaintexts.len(), 5);
    for (ours, theirs) in plaintexts.iter().zip(&fx.records) {
        assert_eq!(ours, theirs.plaintext.as_bytes());
    }
    // The independent path must also accept the reference's own chunk (it is not vacuous)...
    let ref_key = unhex("efc1c03b524841aab76b62ed92503f5c6fba3a0cd2a7ee01995db464b2fccaa0");
    assert_eq!(
        independent_decode(&fx.chunk_bytes, &ref_key.try_into().unwrap()).len(),
        16
    );
    // ...and refuse our chunk under another key.
    let wrong = root.chunk_key(&[0x5b; 16], &fx.stream_id, 3);
    let result = std::panic::catch_unwind(|| independent_decode(&chunk, wrong.as_bytes()));
    assert!(result.is_err());
}

#[test]
fn fixture_ivs_match_records_json() {
    let fx = fixture();
    for (i, record) in fx.records.iter().enumerate() {
        let iv = annal_engine::profile::record::record_iv(fx.nonce_prefix, i as u64);
        assert_eq!(hex(&iv), record.iv_hex);
    }
}

/// The fixture's plaintexts with values the reference writes for real applications but annal
/// never writes itself: a process-name bundle id with a space (Linux), a Windows executable
/// name, a capability outside annal's charset, a non-`Z` offset, an integer written as a float.
fn reference_shaped_plaintexts() -> Vec<String> {
    let fx = fixture();
    let mut plaintexts: Vec<String> = fx.records.iter().map(|r| r.plaintext.clone()).collect();
    let edits: [(usize, &str, &str); 5] = [
        (
            2,
            "\"bundle_id\":\"com.example.TextEditor\"",
            "\"bundle_id\":\"Web Content\"",
        ),
        (
            4,
            "\"bundle_id\":\"org.example.terminal\"",
            "\"bundle_id\":\"Code - Insiders.exe\"",
        ),
        (
            6,
            "\"capability\":\"browser.input.click\"",
            "\"capability\":\"Browser Input.Click\"",
        ),
        (
            7,
            "\"time\":\"2026-11-30T22:14:04.270813878Z\"",
            "\"time\":\"2026-12-01T00:14:04.270813878+02:00\"",
        ),
        (8, "\"sequence\":9,", "\"sequence\":9.0,"),
    ];
    for (index, from, to) in edits {
        assert!(
            plaintexts[index].contains(from),
            "record {index} lacks {from}"
        );
        plaintexts[index] = plaintexts[index].replace(from, to);
    }
    plaintexts
}

#[test]
fn reference_shaped_values_read_as_the_reference_writes_them() {
    let fx = fixture();
    let plaintexts = reference_shaped_plaintexts();
    let mut sealer = RecordSealer::new(&fixture_keys(), &fx.header()).unwrap();
    let mut chunk = sealer.header_bytes().to_vec();
    for plaintext in &plaintexts {
        chunk.extend(sealer.seal(plaintext.as_bytes()).unwrap());
    }
    let reading = read_chunk(
        &chunk,
        &fixture_keys(),
        Some(fx.chunk_id),
        TailRule::MustBeClean,
    );
    let ChunkVerdict::Complete { records } = &reading.verdict else {
        panic!(
            "one reference-shaped record refused the chunk: {:?}",
            reading.verdict
        );
    };
    assert_eq!(records.len(), 16);
    for (record, plaintext) in records.iter().zip(&plaintexts) {
        assert_eq!(
            record.plaintext,
            plaintext.as_bytes(),
            "returned byte for byte"
        );
    }
    let app = |i: usize| {
        records[i]
            .event
            .data
            .application
            .as_ref()
            .and_then(|a| a.bundle_id())
            .map(|b| b.as_str().to_owned())
    };
    assert_eq!(app(2).as_deref(), Some("Web Content"));
    assert_eq!(app(4).as_deref(), Some("Code - Insiders.exe"));
    assert_eq!(records[8].sequence(), 9);
    // The offset is honoured: the same instant as the fixture's `Z` time.
    let original =
        annal_schema::Event::from_json_slice(fx.records[7].plaintext.as_bytes()).unwrap();
    assert_eq!(
        records[7].event.time.since_epoch(),
        original.time.since_epoch()
    );
    // What annal reads it does not necessarily write: the write rules refuse these values.
    for i in [2, 4, 6, 7] {
        assert!(records[i].event.check_write_rules().is_err(), "record {i}");
    }
    assert!(records[0].event.check_write_rules().is_ok());
}

#[test]
fn values_the_reference_never_accepts_are_still_refused() {
    let fx = fixture();
    for (from, to) in [
        (
            "\"bundle_id\":\"com.example.TextEditor\"",
            "\"bundle_id\":\" padded\"",
        ),
        (
            "\"bundle_id\":\"com.example.TextEditor\"",
            "\"bundle_id\":\"two\\nlines\"",
        ),
        ("\"sequence\":3,", "\"sequence\":3.5,"),
    ] {
        let bad = fx.records[2].plaintext.replace(from, to);
        let mut sealer = RecordSealer::new(&fixture_keys(), &fx.header()).unwrap();
        let mut chunk = sealer.header_bytes().to_vec();
        chunk.extend(sealer.seal(bad.as_bytes()).unwrap());
        assert_eq!(
            read_chunk(
                &chunk,
                &fixture_keys(),
                Some(fx.chunk_id),
                TailRule::MayBeTorn
            )
            .verdict,
            ChunkVerdict::Corrupt {
                record_index: Some(0),
                offset: 97,
                reason: annal_engine::profile::CorruptReason::InvalidEvent
            },
            "{to}"
        );
    }
}
