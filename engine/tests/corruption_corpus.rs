//! The named corruption corpus: each case derives a damaged chunk from the reference fixture and
//! asserts the exact verdict and reason documented in docs/format.md, both where the chunk must
//! end cleanly (any chunk but the newest of its stream) and, where they differ, where a torn
//! tail is a crash's leftovers (the newest chunk of its stream).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use annal_engine::keys::{HistoryKeys, RootKey};
use annal_engine::profile::{
    ChunkHeader, ChunkId, ChunkVerdict, CorruptReason, RecordSealer, TailRule, read_chunk,
};
use common::{Fixture, fixture, fixture_key, fixture_keys};

/// The verdict on a chunk that must end cleanly (not the newest of its stream).
fn verdict(fx: &Fixture, bytes: &[u8]) -> ChunkVerdict {
    read_chunk(
        bytes,
        &fixture_keys(),
        Some(fx.chunk_id),
        TailRule::MustBeClean,
    )
    .verdict
}

/// The verdict on the newest chunk of its stream, where a torn tail is a crash.
fn newest(fx: &Fixture, bytes: &[u8]) -> ChunkVerdict {
    read_chunk(
        bytes,
        &fixture_keys(),
        Some(fx.chunk_id),
        TailRule::MayBeTorn,
    )
    .verdict
}

fn corrupt(record_index: Option<u64>, offset: usize, reason: CorruptReason) -> ChunkVerdict {
    ChunkVerdict::Corrupt {
        record_index,
        offset: offset as u64,
        reason,
    }
}

/// The fixture with the byte at `at` XOR-ed with `mask`.
fn flipped(fx: &Fixture, at: usize, mask: u8) -> Vec<u8> {
    let mut bytes = fx.chunk_bytes.clone();
    bytes[at] ^= mask;
    bytes
}

/// Offset of record `i`.
fn off(fx: &Fixture, i: usize) -> usize {
    fx.records[i].offset
}

fn assert_torn(v: &ChunkVerdict, records: usize, valid_len: usize) {
    match v {
        ChunkVerdict::TornTail {
            records: got,
            valid_len: len,
        } => {
            assert_eq!(got.len(), records);
            assert_eq!(*len as usize, valid_len);
        }
        other => panic!("expected TornTail, got {other:?}"),
    }
}

#[test]
fn intact_fixture_is_complete() {
    let fx = fixture();
    assert_eq!(verdict(&fx, &fx.chunk_bytes).records().len(), 16);
    assert_eq!(verdict(&fx, &fx.chunk_bytes).name(), "complete");
}

#[test]
fn truncated_last_record() {
    let fx = fixture();
    let cut = &fx.chunk_bytes[..fx.chunk_bytes.len() - 10];
    assert_torn(&newest(&fx, cut), 15, off(&fx, 15));
    assert_eq!(
        verdict(&fx, cut),
        corrupt(Some(15), off(&fx, 15), CorruptReason::TruncatedRecord)
    );
}

#[test]
fn truncated_last_record_inside_its_iv() {
    let fx = fixture();
    let cut = &fx.chunk_bytes[..off(&fx, 15) + 15];
    assert_torn(&newest(&fx, cut), 15, off(&fx, 15));
    assert_eq!(
        verdict(&fx, cut),
        corrupt(Some(15), off(&fx, 15), CorruptReason::TruncatedRecord)
    );
}

#[test]
fn truncated_last_record_after_one_byte() {
    let fx = fixture();
    let cut = &fx.chunk_bytes[..off(&fx, 15) + 1];
    assert_torn(&newest(&fx, cut), 15, off(&fx, 15));
    assert_eq!(
        verdict(&fx, cut),
        corrupt(Some(15), off(&fx, 15), CorruptReason::TruncatedRecord)
    );
}

#[test]
fn zero_filled_tail() {
    // A filesystem that extended the file before the data reached the disk.
    let fx = fixture();
    let mut bytes = fx.chunk_bytes[..off(&fx, 15)].to_vec();
    bytes.extend([0u8; 300]);
    assert_torn(&newest(&fx, &bytes), 15, off(&fx, 15));
    assert_eq!(
        verdict(&fx, &bytes),
        corrupt(Some(15), off(&fx, 15), CorruptReason::TrailingGarbage)
    );
}

#[test]
fn torn_record_followed_by_zeros_fails_authentication_and_is_a_tail_only_in_the_newest_chunk() {
    // Part of a record, then zeros: the zeros complete the byte string, so the item decodes
    // and fails authentication. In the newest chunk whatever follows the last authenticated
    // record is the tail.
    let fx = fixture();
    let mut bytes = fx.chunk_bytes[..off(&fx, 15) + 100].to_vec();
    bytes.extend(vec![0u8; fx.records[15].len - 100]);
    assert_eq!(
        verdict(&fx, &bytes),
        corrupt(Some(15), off(&fx, 15), CorruptReason::AuthenticationFailed)
    );
    assert_torn(&newest(&fx, &bytes), 15, off(&fx, 15));
}

#[test]
fn truncated_inside_the_header() {
    let fx = fixture();
    assert_eq!(
        verdict(&fx, &fx.chunk_bytes[..50]),
        corrupt(None, 0, CorruptReason::MalformedHeader)
    );
}

#[test]
fn flipped_ciphertext_byte() {
    let fx = fixture();
    let bytes = flipped(&fx, off(&fx, 5) + 40, 0x01);
    assert_eq!(
        verdict(&fx, &bytes),
        corrupt(Some(5), off(&fx, 5), CorruptReason::AuthenticationFailed)
    );
}

#[test]
fn flipped_tag_byte() {
    let fx = fixture();
    let last = off(&fx, 5) + fx.records[5].len - 1;
    let bytes = flipped(&fx, last, 0x80);
    assert_eq!(
        verdict(&fx, &bytes),
        corrupt(Some(5), off(&fx, 5), CorruptReason::AuthenticationFailed)
    );
}

#[test]
fn flipped_protected_header_byte() {
    // d0 83 44 a1 01 18 [18]: the algorithm value becomes 25.
    let fx = fixture();
    let bytes = flipped(&fx, off(&fx, 2) + 6, 0x01);
    assert_eq!(
        verdict(&fx, &bytes),
        corrupt(Some(2), off(&fx, 2), CorruptReason::WrongAlgorithm)
    );
}

#[test]
fn flipped_protected_header_label() {
    // d0 83 44 a1 [01] 18 18: label 1 (alg) becomes 3 (content type).
    let fx = fixture();
    let bytes = flipped(&fx, off(&fx, 2) + 4, 0x02);
    assert_eq!(
        verdict(&fx, &bytes),
        corrupt(Some(2), off(&fx, 2), CorruptReason::MalformedRecord)
    );
}

#[test]
fn flipped_iv_prefix_byte() {
    let fx = fixture();
    let bytes = flipped(&fx, off(&fx, 7) + 10, 0x01);
    assert_eq!(
        verdict(&fx, &bytes),
        corrupt(Some(7), off(&fx, 7), CorruptReason::IvPrefixMismatch)
    );
}

#[test]
fn flipped_iv_counter_byte() {
    let fx = fixture();
    let bytes = flipped(&fx, off(&fx, 7) + 21, 0x01);
    assert_eq!(
        verdict(&fx, &bytes),
        corrupt(Some(7), off(&fx, 7), CorruptReason::IvPositionMismatch)
    );
}

#[test]
fn records_swapped() {
    let fx = fixture();
    let mut bytes = fx.chunk_bytes[..off(&fx, 3)].to_vec();
    bytes.extend(fx.record_bytes(4));
    bytes.extend(fx.record_bytes(3));
    bytes.extend(&fx.chunk_bytes[off(&fx, 5)..]);
    assert_eq!(bytes.len(), fx.chunk_bytes.len());
    let expected = corrupt(Some(3), off(&fx, 3), CorruptReason::IvPositionMismatch);
    assert_eq!(verdict(&fx, &bytes), expected);
    assert_eq!(newest(&fx, &bytes), expected);
}

#[test]
fn last_two_records_swapped() {
    let fx = fixture();
    let mut bytes = fx.chunk_bytes[..off(&fx, 14)].to_vec();
    bytes.extend(fx.record_bytes(15));
    bytes.extend(fx.record_bytes(14));
    assert_eq!(bytes.len(), fx.chunk_bytes.len());
    let expected = corrupt(Some(14), off(&fx, 14), CorruptReason::IvPositionMismatch);
    assert_eq!(verdict(&fx, &bytes), expected);
    assert_eq!(newest(&fx, &bytes), expected);
}

#[test]
fn record_duplicated() {
    let fx = fixture();
    let mut bytes = fx.chunk_bytes[..off(&fx, 4)].to_vec();
    bytes.extend(fx.record_bytes(3));
    bytes.extend(&fx.chunk_bytes[off(&fx, 4)..]);
    let expected = corrupt(Some(4), off(&fx, 4), CorruptReason::IvPositionMismatch);
    assert_eq!(verdict(&fx, &bytes), expected);
    assert_eq!(newest(&fx, &bytes), expected);
}

#[test]
fn duplicated_last_record_appended() {
    // A copy of the last record appended again: it authenticates under its own IV (position
    // 15), so the key wrote it and no crash did. Corrupt in the newest chunk too: tamper
    // evidence must not depend on where the replay sits.
    let fx = fixture();
    let mut bytes = fx.chunk_bytes.clone();
    bytes.extend(fx.record_bytes(15));
    let expected = corrupt(
        Some(16),
        fx.chunk_bytes.len(),
        CorruptReason::IvPositionMismatch,
    );
    assert_eq!(verdict(&fx, &bytes), expected);
    assert_eq!(newest(&fx, &bytes), expected);
}

#[test]
fn duplicated_last_record_followed_by_a_torn_one() {
    // The replayed copy, then the torn prefix of the record the writer would have put after
    // it: the torn bytes cannot make the replay a crash's leftovers.
    let fx = fixture();
    let mut plaintexts: Vec<&[u8]> = fx.records.iter().map(|r| r.plaintext.as_bytes()).collect();
    plaintexts.push(b"never authenticated: only its first bytes reach the file");
    let resealed = sealed(&fx, &plaintexts);
    assert_eq!(&resealed[..fx.chunk_bytes.len()], fx.chunk_bytes.as_slice());
    let mut bytes = fx.chunk_bytes.clone();
    bytes.extend(fx.record_bytes(15));
    bytes.extend(&resealed[fx.chunk_bytes.len()..fx.chunk_bytes.len() + 30]);
    let expected = corrupt(
        Some(16),
        fx.chunk_bytes.len(),
        CorruptReason::IvPositionMismatch,
    );
    assert_eq!(verdict(&fx, &bytes), expected);
    assert_eq!(newest(&fx, &bytes), expected);
    // The same torn prefix without the replay before it is a crash's tail.
    let mut torn = fx.chunk_bytes.clone();
    torn.extend(&resealed[fx.chunk_bytes.len()..fx.chunk_bytes.len() + 30]);
    assert_torn(&newest(&fx, &torn), 16, fx.chunk_bytes.len());
}

#[test]
fn duplicated_last_record_followed_by_zeros() {
    let fx = fixture();
    let mut bytes = fx.chunk_bytes.clone();
    bytes.extend(fx.record_bytes(15));
    bytes.extend([0u8; 200]);
    let expected = corrupt(
        Some(16),
        fx.chunk_bytes.len(),
        CorruptReason::IvPositionMismatch,
    );
    assert_eq!(verdict(&fx, &bytes), expected);
    assert_eq!(newest(&fx, &bytes), expected);
}

#[test]
fn last_record_moved_up_over_a_removed_one() {
    // Record 14 cut out, record 15 closes the gap: at position 14 sits a record that
    // authenticates at position 15. Reordered, not torn.
    let fx = fixture();
    let mut bytes = fx.chunk_bytes[..off(&fx, 14)].to_vec();
    bytes.extend(fx.record_bytes(15));
    let expected = corrupt(Some(14), off(&fx, 14), CorruptReason::IvPositionMismatch);
    assert_eq!(verdict(&fx, &bytes), expected);
    assert_eq!(newest(&fx, &bytes), expected);
}

#[test]
fn an_earlier_record_replayed_after_garbage_at_the_tail() {
    // Garbage where record 15 was, then a copy of record 3: the copy authenticates under its
    // own IV, so the bytes before it are no crash's leftovers either.
    let fx = fixture();
    let mut bytes = fx.chunk_bytes[..off(&fx, 15)].to_vec();
    bytes.extend(b"\x01\x02garbage");
    bytes.extend(fx.record_bytes(3));
    let expected = corrupt(Some(15), off(&fx, 15), CorruptReason::TrailingGarbage);
    assert_eq!(verdict(&fx, &bytes), expected);
    assert_eq!(newest(&fx, &bytes), expected);
}

#[test]
fn an_earlier_record_replayed_after_a_torn_one() {
    // Record 15 torn after 100 bytes, then a copy of record 0: whatever the torn bytes decode
    // as, the copy of record 0 inside the tail still authenticates at its own position, so the
    // tail is no crash's leftovers.
    let fx = fixture();
    let mut bytes = fx.chunk_bytes[..off(&fx, 15) + 100].to_vec();
    bytes.extend(fx.record_bytes(0));
    let older = verdict(&fx, &bytes);
    assert!(
        matches!(
            older,
            ChunkVerdict::Corrupt {
                record_index: Some(15),
                ..
            }
        ),
        "{older:?}"
    );
    assert_eq!(newest(&fx, &bytes), older);
}

/// A chunk of the same stream (same root key) with another id and nonce prefix, holding the
/// fixture's plaintexts; returns its records.
fn other_chunk_records(fx: &Fixture, prefix: [u8; 4]) -> Vec<Vec<u8>> {
    let header = ChunkHeader::new(
        1,
        &fx.key_reference,
        &fx.stream_id,
        ChunkId([9; 16]),
        prefix,
    )
    .unwrap();
    let mut sealer = RecordSealer::new(&fixture_keys(), &header).unwrap();
    fx.records
        .iter()
        .map(|r| sealer.seal(r.plaintext.as_bytes()).unwrap())
        .collect()
}

fn splice(fx: &Fixture, at: usize, record: &[u8]) -> Vec<u8> {
    let mut bytes = fx.chunk_bytes[..off(fx, at)].to_vec();
    bytes.extend(record);
    bytes.extend(&fx.chunk_bytes[off(fx, at) + fx.records[at].len..]);
    bytes
}

#[test]
fn record_spliced_from_another_chunk() {
    let fx = fixture();
    let other = other_chunk_records(&fx, [1, 2, 3, 4]);
    let bytes = splice(&fx, 6, &other[6]);
    assert_eq!(
        verdict(&fx, &bytes),
        corrupt(Some(6), off(&fx, 6), CorruptReason::IvPrefixMismatch)
    );
}

#[test]
fn record_spliced_from_another_chunk_with_the_same_prefix() {
    // Even with a colliding nonce prefix and the right position, the other chunk's key and AAD
    // differ, so authentication fails.
    let fx = fixture();
    let other = other_chunk_records(&fx, fx.nonce_prefix);
    let bytes = splice(&fx, 6, &other[6]);
    assert_eq!(
        verdict(&fx, &bytes),
        corrupt(Some(6), off(&fx, 6), CorruptReason::AuthenticationFailed)
    );
}

#[test]
fn trailing_garbage() {
    let fx = fixture();
    let mut bytes = fx.chunk_bytes.clone();
    bytes.extend(b"garbage after the last record");
    assert_eq!(
        verdict(&fx, &bytes),
        corrupt(
            Some(16),
            fx.chunk_bytes.len(),
            CorruptReason::TrailingGarbage
        )
    );
    assert_torn(&newest(&fx, &bytes), 16, fx.chunk_bytes.len());
}

#[test]
fn trailing_partial_record_at_the_wrong_position_is_garbage_in_an_older_chunk() {
    let fx = fixture();
    let mut bytes = fx.chunk_bytes.clone();
    bytes.extend(&fx.record_bytes(0)[..100]);
    assert_eq!(
        verdict(&fx, &bytes),
        corrupt(
            Some(16),
            fx.chunk_bytes.len(),
            CorruptReason::TrailingGarbage
        )
    );
    assert_torn(&newest(&fx, &bytes), 16, fx.chunk_bytes.len());
}

#[test]
fn empty_file() {
    let fx = fixture();
    assert_eq!(
        verdict(&fx, &[]),
        corrupt(None, 0, CorruptReason::MalformedHeader)
    );
}

#[test]
fn header_only() {
    let fx = fixture();
    assert_eq!(
        verdict(&fx, &fx.chunk_bytes[..97]),
        ChunkVerdict::Complete {
            records: Vec::new()
        }
    );
}

#[test]
fn wrong_key() {
    let fx = fixture();
    let wrong = RootKey::from_bytes([7; 32]);
    assert_eq!(
        read_chunk(
            &fx.chunk_bytes,
            &HistoryKeys::from_root(wrong),
            Some(fx.chunk_id),
            TailRule::MustBeClean
        )
        .verdict,
        corrupt(Some(0), 97, CorruptReason::AuthenticationFailed)
    );
}

// Header layout: 87 | 01 | 18 18 | 01 | 72 "fixture.history.v1" (5..24) | 78 20 stream (24..58)
// | 78 20 chunk id (58..92) | 44 prefix (92..97).

#[test]
fn header_version_changed() {
    let fx = fixture();
    assert_eq!(
        verdict(&fx, &flipped(&fx, 1, 0x03)),
        corrupt(None, 0, CorruptReason::UnsupportedProfileVersion)
    );
}

#[test]
fn header_algorithm_changed() {
    let fx = fixture();
    assert_eq!(
        verdict(&fx, &flipped(&fx, 3, 0x01)),
        corrupt(None, 0, CorruptReason::WrongAlgorithm)
    );
}

#[test]
fn header_epoch_changed() {
    // A valid header for epoch 3: the derived key and the AAD change, so record 0 fails.
    let fx = fixture();
    assert_eq!(
        verdict(&fx, &flipped(&fx, 4, 0x02)),
        corrupt(Some(0), 97, CorruptReason::AuthenticationFailed)
    );
}

#[test]
fn header_epoch_zero_is_malformed() {
    let fx = fixture();
    assert_eq!(
        verdict(&fx, &flipped(&fx, 4, 0x01)),
        corrupt(None, 0, CorruptReason::MalformedHeader)
    );
}

#[test]
fn header_stream_id_changed() {
    let fx = fixture();
    assert_eq!(fx.chunk_bytes[26], b'6');
    assert_eq!(
        verdict(&fx, &flipped(&fx, 26, 0x01)),
        corrupt(Some(0), 97, CorruptReason::AuthenticationFailed)
    );
}

#[test]
fn header_chunk_id_changed() {
    let fx = fixture();
    assert_eq!(fx.chunk_bytes[60], b'a');
    let bytes = flipped(&fx, 60, 0x03); // 'a' -> 'b'
    // Read as the file it came from: the header names another chunk.
    assert_eq!(
        verdict(&fx, &bytes),
        corrupt(None, 0, CorruptReason::ChunkIdMismatch)
    );
    // Read without a file name (or renamed to match): the key and AAD change.
    assert_eq!(
        read_chunk(&bytes, &fixture_keys(), None, TailRule::MustBeClean).verdict,
        corrupt(Some(0), 97, CorruptReason::AuthenticationFailed)
    );
    // Upper-case hex is not a chunk id.
    let upper = flipped(&fx, 60, 0x20); // 'a' -> 'A'
    assert_eq!(
        read_chunk(&upper, &fixture_keys(), None, TailRule::MustBeClean).verdict,
        corrupt(None, 0, CorruptReason::MalformedHeader)
    );
}

#[test]
fn header_nonce_prefix_changed() {
    let fx = fixture();
    assert_eq!(
        verdict(&fx, &flipped(&fx, 93, 0x01)),
        corrupt(Some(0), 97, CorruptReason::IvPrefixMismatch)
    );
}

#[test]
fn header_non_canonical() {
    // Epoch 1 spelled with a one-byte argument (18 01) instead of inline (01).
    let fx = fixture();
    let mut bytes = fx.chunk_bytes[..4].to_vec();
    bytes.extend([0x18, 0x01]);
    bytes.extend(&fx.chunk_bytes[5..]);
    assert_eq!(
        verdict(&fx, &bytes),
        corrupt(None, 0, CorruptReason::NonCanonicalHeader)
    );
}

#[test]
fn header_indefinite_length_array() {
    let fx = fixture();
    let mut bytes = vec![0x9f];
    bytes.extend(&fx.chunk_bytes[1..97]);
    bytes.push(0xff);
    bytes.extend(&fx.chunk_bytes[97..]);
    assert_eq!(
        verdict(&fx, &bytes),
        corrupt(None, 0, CorruptReason::NonCanonicalHeader)
    );
}

#[test]
fn header_with_an_eighth_element() {
    let fx = fixture();
    let mut bytes = vec![0x88];
    bytes.extend(&fx.chunk_bytes[1..97]);
    bytes.push(0x00);
    bytes.extend(&fx.chunk_bytes[97..]);
    assert_eq!(
        verdict(&fx, &bytes),
        corrupt(None, 0, CorruptReason::MalformedHeader)
    );
}

#[test]
fn unknown_unprotected_header_parameter() {
    // {5: iv} becomes {5: iv, 4: h'00'} (a key id). The AAD does not cover it; we refuse it.
    let fx = fixture();
    let at = off(&fx, 1);
    let mut bytes = fx.chunk_bytes[..at + 22].to_vec();
    bytes[at + 7] = 0xa2;
    bytes.extend([0x04, 0x41, 0x00]);
    bytes.extend(&fx.chunk_bytes[at + 22..]);
    assert_eq!(
        verdict(&fx, &bytes),
        corrupt(Some(1), at, CorruptReason::UnknownHeaderParameter)
    );
}

#[test]
fn non_canonical_record() {
    // The IV's byte-string head 4c spelled 58 0c: same value, more bytes.
    let fx = fixture();
    let at = off(&fx, 1);
    let mut bytes = fx.chunk_bytes[..at + 9].to_vec();
    bytes.extend([0x58, 0x0c]);
    bytes.extend(&fx.chunk_bytes[at + 10..]);
    assert_eq!(
        verdict(&fx, &bytes),
        corrupt(Some(1), at, CorruptReason::NonCanonicalRecord)
    );
}

#[test]
fn record_missing_its_cose_tag() {
    let fx = fixture();
    let at = off(&fx, 1);
    let mut bytes = fx.chunk_bytes[..at].to_vec();
    bytes.extend(&fx.chunk_bytes[at + 1..]);
    assert_eq!(
        verdict(&fx, &bytes),
        corrupt(Some(1), at, CorruptReason::TrailingGarbage)
    );
}

/// A chunk sealed by annal over the fixture header, from the given plaintexts.
fn sealed(fx: &Fixture, plaintexts: &[&[u8]]) -> Vec<u8> {
    let mut sealer = RecordSealer::new(&fixture_keys(), &fx.header()).unwrap();
    let mut chunk = sealer.header_bytes().to_vec();
    for p in plaintexts {
        chunk.extend(sealer.seal(p).unwrap());
    }
    chunk
}

#[test]
fn unsupported_dataschema() {
    let fx = fixture();
    let future = fx.records[1]
        .plaintext
        .replace("history-event:v0", "history-event:v1");
    let chunk = sealed(
        &fx,
        &[fx.records[0].plaintext.as_bytes(), future.as_bytes()],
    );
    assert_eq!(
        verdict(&fx, &chunk),
        corrupt(
            Some(1),
            97 + fx.records[0].len,
            CorruptReason::UnsupportedDataschema
        )
    );
    // Authenticated, so written with the key: no crash makes it, even in the newest chunk.
    assert_eq!(newest(&fx, &chunk), verdict(&fx, &chunk));
}

#[test]
fn plaintext_not_json() {
    let fx = fixture();
    let chunk = sealed(&fx, &[b"not json at all"]);
    assert_eq!(
        verdict(&fx, &chunk),
        corrupt(Some(0), 97, CorruptReason::InvalidEvent)
    );
    // Authenticated, so written with the key: no crash makes it, even in the newest chunk.
    assert_eq!(newest(&fx, &chunk), verdict(&fx, &chunk));
}

#[test]
fn sequence_not_increasing_within_a_chunk() {
    let fx = fixture();
    let chunk = sealed(
        &fx,
        &[
            fx.records[1].plaintext.as_bytes(),
            fx.records[0].plaintext.as_bytes(),
        ],
    );
    assert_eq!(
        verdict(&fx, &chunk),
        corrupt(
            Some(1),
            97 + fx.records[1].len,
            CorruptReason::SequenceNotIncreasing
        )
    );
    // Authenticated, so written with the key: no crash makes it, even in the newest chunk.
    assert_eq!(newest(&fx, &chunk), verdict(&fx, &chunk));
}

#[test]
fn source_of_another_stream() {
    // Every event of a chunk carries `urn:cua-driver:history:<header stream_id>`; record 1 here
    // is sealed under the fixture header but names another stream.
    let fx = fixture();
    let own = format!("urn:cua-driver:history:{}", fx.stream_id);
    assert!(fx.records[1].plaintext.contains(&own));
    let other = fx.records[1].plaintext.replace(
        &own,
        "urn:cua-driver:history:0123456789abcdef0123456789abcdef",
    );
    let chunk = sealed(&fx, &[fx.records[0].plaintext.as_bytes(), other.as_bytes()]);
    assert_eq!(
        verdict(&fx, &chunk),
        corrupt(
            Some(1),
            97 + fx.records[0].len,
            CorruptReason::SourceMismatch
        )
    );
    assert_eq!(CorruptReason::SourceMismatch.as_str(), "source_mismatch");
    // Authenticated, so written with the key: no crash makes it, even in the newest chunk.
    assert_eq!(newest(&fx, &chunk), verdict(&fx, &chunk));
}

#[test]
fn every_fixture_event_names_the_header_stream() {
    let fx = fixture();
    let own = format!("urn:cua-driver:history:{}", fx.stream_id);
    let records = verdict(&fx, &fx.chunk_bytes).records().to_vec();
    assert_eq!(records.len(), 16);
    assert!(records.iter().all(|r| r.event.source.as_str() == own));
}

#[test]
fn legacy_header_form_is_read() {
    // The older header spells the nonce prefix as an array of 4 uints. Sealed here with the
    // legacy header bytes as AAD, through coset and the AEAD directly.
    use chacha20poly1305::aead::{Aead, Payload};
    use chacha20poly1305::{ChaCha20Poly1305, Key, KeyInit, Nonce};
    use ciborium::Value;
    use coset::{CoseEncrypt0Builder, HeaderBuilder, TaggedCborSerializable, iana};
    let fx = fixture();
    let header = Value::Array(vec![
        Value::Integer(1.into()),
        Value::Integer(24.into()),
        Value::Integer(1.into()),
        Value::Text(fx.key_reference.clone()),
        Value::Text(fx.stream_id.clone()),
        Value::Text(fx.chunk_id.to_hex()),
        Value::Array(
            fx.nonce_prefix
                .iter()
                .map(|b| Value::Integer(u64::from(*b).into()))
                .collect(),
        ),
    ]);
    let mut chunk = Vec::new();
    ciborium::ser::into_writer(&header, &mut chunk).unwrap();
    let aad = chunk.clone();
    let key = fixture_key().chunk_key(&fx.chunk_id.0, &fx.stream_id, 1);
    let aead = ChaCha20Poly1305::new(&Key::from(*key.as_bytes()));
    for (i, record) in fx.records.iter().take(3).enumerate() {
        let iv = annal_engine::profile::record::record_iv(fx.nonce_prefix, i as u64);
        let item = CoseEncrypt0Builder::new()
            .protected(
                HeaderBuilder::new()
                    .algorithm(iana::Algorithm::ChaCha20Poly1305)
                    .build(),
            )
            .unprotected(HeaderBuilder::new().iv(iv.to_vec()).build())
            .create_ciphertext(record.plaintext.as_bytes(), &aad, |pt, enc| {
                aead.encrypt(&Nonce::from(iv), Payload { msg: pt, aad: enc })
                    .unwrap()
            })
            .build()
            .to_tagged_vec()
            .unwrap();
        chunk.extend(item);
    }
    let reading = read_chunk(
        &chunk,
        &fixture_keys(),
        Some(fx.chunk_id),
        TailRule::MustBeClean,
    );
    assert_eq!(reading.verdict.name(), "complete");
    assert_eq!(reading.verdict.records().len(), 3);
    assert_eq!(
        reading.header.unwrap().form,
        annal_engine::profile::NoncePrefixForm::LegacyUintArray
    );
    // The legacy AAD is not the modern AAD: the same records under the modern header fail.
    let mut modern = fx.chunk_bytes[..97].to_vec();
    modern.extend(&chunk[aad.len()..]);
    assert_eq!(
        verdict(&fx, &modern),
        corrupt(Some(0), 97, CorruptReason::AuthenticationFailed)
    );
}

#[test]
fn huge_declared_lengths_do_not_allocate_or_panic() {
    let fx = fixture();
    for tail in [
        vec![0x5b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
        vec![0x5b, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00],
        vec![0x7b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
        vec![0x9b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
        vec![0xbb, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
        vec![
            0xd0, 0x83, 0x44, 0xa1, 0x01, 0x18, 0x18, 0xa1, 0x05, 0x5b, 0xff, 0xff, 0xff, 0xff,
            0xff, 0xff, 0xff, 0xff,
        ],
        vec![0x9f; 10_000],
    ] {
        let mut bytes = fx.chunk_bytes.clone();
        bytes.extend(&tail);
        assert_eq!(
            verdict(&fx, &bytes),
            corrupt(
                Some(16),
                fx.chunk_bytes.len(),
                CorruptReason::TrailingGarbage
            ),
            "tail {:02x?}",
            &tail[..tail.len().min(12)]
        );
    }
}
