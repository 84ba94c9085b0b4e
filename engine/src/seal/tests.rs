#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use super::*;

fn key(byte: u8) -> SealKey {
    SealKey([byte; KEY_LEN_BYTES])
}

fn sample() -> Seal {
    Seal {
        version: SEAL_FORMAT_VERSION,
        ordinal: 3,
        stream_id: "6dd3aa1eef99854a9a3d39ba1e2315f1".to_owned(),
        chunk_id: ChunkId([0xab; 16]),
        records: 4,
        len_bytes: 1234,
        first_sequence: 9,
        last_sequence: 12,
        first_time: Duration::new(1_764_540_843, 753_000_000),
        last_time: Duration::new(1_764_540_844, 0),
        chain: [7; 32],
        previous: [9; 32],
    }
}

#[test]
fn a_seal_round_trips_through_its_file_bytes() {
    let seal = sample();
    let bytes = seal.to_file_bytes(&key(1)).unwrap();
    assert!(bytes.len() as u64 <= MAX_SEAL_FILE_BYTES);
    assert_eq!(Seal::from_file_bytes(&bytes, &key(1)), Ok(seal.clone()));
    // The MAC is the last 32 bytes: BLAKE3-keyed over the encoding.
    let encoding = seal.encode().unwrap();
    assert_eq!(&bytes[..encoding.len()], encoding.as_slice());
    assert_eq!(
        &bytes[encoding.len()..],
        blake3::keyed_hash(&[1; 32], &encoding).as_bytes()
    );
    assert_eq!(seal.digest(), *blake3::hash(&encoding).as_bytes());
}

#[test]
fn every_flipped_bit_and_another_key_fail_the_mac() {
    let bytes = sample().to_file_bytes(&key(1)).unwrap();
    assert_eq!(
        Seal::from_file_bytes(&bytes, &key(2)),
        Err(SealFault::BadMac)
    );
    for at in 0..bytes.len() {
        let mut flipped = bytes.clone();
        flipped[at] ^= 0x01;
        assert_eq!(
            Seal::from_file_bytes(&flipped, &key(1)),
            Err(SealFault::BadMac),
            "byte {at}"
        );
    }
    assert_eq!(
        Seal::from_file_bytes(&bytes[..20], &key(1)),
        Err(SealFault::BadMac)
    );
}

#[test]
fn an_authenticated_but_non_canonical_or_foreign_encoding_is_malformed() {
    let k = key(1);
    let with_mac = |encoding: Vec<u8>| {
        let mut bytes = encoding.clone();
        bytes.extend(k.mac(&encoding).as_bytes());
        bytes
    };
    // The ordinal 3 spelled in two bytes (0x18 0x03) instead of one.
    let canonical = sample().encode().unwrap();
    assert_eq!(canonical[0], 0x8c, "an array of 12");
    assert_eq!(canonical[1], 0x01, "version 1");
    assert_eq!(canonical[2], 0x03, "ordinal 3");
    let mut long = canonical[..2].to_vec();
    long.extend([0x18, 0x03]);
    long.extend(&canonical[3..]);
    assert_eq!(
        Seal::from_file_bytes(&with_mac(long), &k),
        Err(SealFault::Malformed)
    );
    // Another version.
    let mut future = canonical.clone();
    future[1] = 0x02;
    assert_eq!(
        Seal::from_file_bytes(&with_mac(future), &k),
        Err(SealFault::Malformed)
    );
    // Trailing bytes after the item.
    let mut trailing = canonical.clone();
    trailing.push(0x00);
    assert_eq!(
        Seal::from_file_bytes(&with_mac(trailing), &k),
        Err(SealFault::Malformed)
    );
}

#[test]
fn the_chain_digest_is_as_documented() {
    let header = b"header bytes";
    let items: [&[u8]; 2] = [b"first item", b"second"];
    let whole = blake3::hash(b"header bytesfirst itemsecond");
    assert_eq!(chain_digest(header, items), *whole.as_bytes());
    assert_eq!(chain_digest(header, []), *blake3::hash(header).as_bytes());
    // Folding in a write at a time is the same digest as an item at a time.
    let mut chain = ChainDigest::new(header);
    chain.push(b"first itemsecond");
    assert_eq!(chain.value(), *whole.as_bytes());
    // Any changed, added or dropped byte changes it.
    assert_ne!(
        chain_digest(header, [&b"first item"[..]]),
        *whole.as_bytes()
    );
    assert_ne!(
        chain_digest(header, [&b"first item"[..], b"secoNd"]),
        *whole.as_bytes()
    );
}

#[test]
fn seal_file_names_round_trip() {
    let id = ChunkId([0x0f; 16]);
    assert_eq!(
        seal_file_name(id).as_str(),
        format!("{}.seal", "0f".repeat(16))
    );
    assert_eq!(parse_seal_file_name(seal_file_name(id).as_str()), Some(id));
    assert_eq!(parse_seal_file_name("notes.seal"), None);
    assert_eq!(
        seal_temp_file_name(id).as_str(),
        format!("seal.{}.seal.tmp", "0f".repeat(16))
    );
}

#[test]
fn the_checkpoint_never_goes_back() {
    let store = InMemoryCheckpoints::new();
    assert_eq!(store.load().unwrap(), None);
    let seal = sample();
    store.store(&Checkpoint::of(&seal)).unwrap();
    store.store(&Checkpoint::of(&seal)).unwrap();
    let older = Checkpoint {
        ordinal: 2,
        digest: [0; 32],
    };
    assert!(matches!(
        store.store(&older),
        Err(CheckpointError::WouldGoBack {
            held: 3,
            offered: 2
        })
    ));
    assert_eq!(store.load().unwrap(), Some(Checkpoint::of(&seal)));
}

#[test]
fn the_seal_key_is_redacted() {
    assert_eq!(format!("{:?}", key(7)), "SealKey(<redacted>)");
}
