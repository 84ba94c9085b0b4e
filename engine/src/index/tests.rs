use super::*;

fn entry(chunk_id: ChunkId, i: u64) -> IndexEntry {
    IndexEntry {
        sequence: 10 + i,
        time: Duration::new(1_700_000_000 + i, 999_999_999),
        session: i.is_multiple_of(2).then_some([0xab; 16]),
        event_type: EVENT_TYPE_CODES[i as usize % EVENT_TYPE_CODES.len()],
        location: RecordLocation {
            chunk_id,
            position: i,
            offset: 100 + i * 700,
            len: 700,
            sequence: 10 + i,
        },
    }
}

fn index(n: u64) -> ChunkIndex {
    let chunk_id = ChunkId([7; 16]);
    ChunkIndex {
        chunk_id,
        chunk_len: 100 + n * 700,
        stream_id: "ab".repeat(16),
        ending: ChunkEnding::Complete,
        entries: (0..n).map(|i| entry(chunk_id, i)).collect(),
    }
}

fn decode(key: &IndexKey, bytes: &[u8]) -> Result<ChunkIndex, InvalidIndexFile> {
    let header: [u8; INDEX_HEADER_LEN_BYTES] = bytes[..INDEX_HEADER_LEN_BYTES].try_into().unwrap();
    let parsed = parse_header(&header)?;
    decode_body(key, &header, &parsed, &bytes[INDEX_HEADER_LEN_BYTES..])
}

fn key() -> IndexKey {
    IndexKey::new(&crate::keys::RootKey::from_bytes([9; 32]).index_key())
}

#[test]
fn file_names_round_trip() {
    let id = ChunkId([0xcd; 16]);
    assert_eq!(
        index_file_name(id).as_str(),
        format!("{}.idx", "cd".repeat(16))
    );
    assert_eq!(
        parse_index_file_name(index_file_name(id).as_str()),
        Some(id)
    );
    assert_eq!(parse_index_file_name("x.idx"), None);
    assert_eq!(parse_index_file_name(&"cd".repeat(16)), None);
    assert!(FileName::new(temp_index_file_name(id).as_str()).is_ok());
}

#[test]
fn header_layout_is_fixed() {
    let h = header_bytes(ChunkId([1; 16]), 0x0102, 3);
    assert_eq!(h.len(), 48);
    assert_eq!(&h[..14], b"annal-index-v1");
    assert_eq!(&h[14..16], &[0, 1]);
    assert_eq!(&h[16..32], &[1; 16]);
    assert_eq!(&h[32..40], &0x0102u64.to_be_bytes());
    assert_eq!(&h[40..48], &3u64.to_be_bytes());
}

#[test]
fn archived_entries_stay_within_the_bound() {
    for n in [0, 1, 2, 100, 1000] {
        let bytes = encode_file(&key(), &index(n), [5; 24]).unwrap();
        assert!(
            bytes.len() as u64 <= max_file_len_bytes(n),
            "{n}: {}",
            bytes.len()
        );
    }
    let one = encode_file(&key(), &index(1000), [5; 24]).unwrap().len();
    let none = encode_file(&key(), &index(0), [5; 24]).unwrap().len();
    let per_entry = (one - none) as f64 / 1000.0;
    assert!(per_entry <= MAX_ARCHIVED_ENTRY_BYTES as f64, "{per_entry}");
    assert!(none as u64 <= FILE_OVERHEAD_BYTES + MAX_ARCHIVE_FIXED_BYTES);
}

#[test]
fn encode_decode_round_trip_and_torn_ending() {
    let mut original = index(50);
    assert_eq!(
        decode(&key(), &encode_file(&key(), &original, [1; 24]).unwrap()),
        Ok(original.clone())
    );
    original.ending = ChunkEnding::TornTail {
        valid_len: original.chunk_len,
    };
    original.chunk_len += 10;
    assert_eq!(
        decode(&key(), &encode_file(&key(), &original, [2; 24]).unwrap()),
        Ok(original)
    );
}

#[test]
fn every_flipped_bit_is_refused() {
    let bytes = encode_file(&key(), &index(3), [3; 24]).unwrap();
    for at in 0..bytes.len() {
        let mut bad = bytes.clone();
        bad[at] ^= 0x01;
        assert!(decode(&key(), &bad).is_err(), "byte {at}");
    }
    let other = IndexKey::new(&crate::keys::RootKey::from_bytes([8; 32]).index_key());
    assert_eq!(
        decode(&other, &bytes),
        Err(InvalidIndexFile::Authentication)
    );
}

#[test]
fn writes_refuse_what_the_format_cannot_hold() {
    let mut long = index(1);
    long.stream_id = "x".repeat(MAX_INDEX_STREAM_ID_LEN_BYTES + 1);
    assert!(matches!(
        encode_file(&key(), &long, [0; 24]),
        Err(IndexWriteError::Unwritable(_))
    ));
    let mut foreign = index(2);
    foreign.entries[1].location.chunk_id = ChunkId([8; 16]);
    assert!(matches!(
        encode_file(&key(), &foreign, [0; 24]),
        Err(IndexWriteError::Unwritable(_))
    ));
}

#[test]
fn key_debug_is_redacted() {
    assert_eq!(format!("{:?}", key()), "IndexKey(<redacted>)");
}
