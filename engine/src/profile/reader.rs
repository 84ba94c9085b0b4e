//! The classifying chunk reader.
//!
//! [`read_chunk`] walks a chunk item by item and returns one [`ChunkVerdict`]. It tells a crash
//! (an incomplete final record: [`ChunkVerdict::TornTail`]) apart from everything else
//! ([`ChunkVerdict::Corrupt`] with a [`CorruptReason`]). A torn tail is recognised strictly: the
//! incomplete bytes must be a prefix of the record that the writer would have written at that
//! position (same fixed framing, same IV), so arbitrary garbage is never mistaken for a crash.

use ciborium::Value;

use super::header::{ChunkId, HeaderFault, ParsedHeader, parse_header};
use super::plaintext::{PlaintextFault, validate_plaintext};
use super::record::{
    ChunkCipher, RECORD_FIXED_PREFIX_LEN_BYTES, RECORD_FRAMING_BEFORE_IV, record_iv,
};
use super::{MAX_RECORD_LEN_BYTES, NONCE_PREFIX_LEN_BYTES};
use crate::keys::ChunkKeys;

/// One authenticated, validated record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Position in the chunk (0-based); equals the IV counter.
    pub position: u64,
    /// Byte offset of the record item in the chunk file.
    pub offset: u64,
    /// Length of the record item in bytes; `offset + len` is where the next item starts.
    pub len: u64,
    /// The decrypted plaintext, exactly as written (compact CloudEvents JSON).
    pub plaintext: Vec<u8>,
    /// The parsed event (closed v0 contract).
    pub event: annal_schema::Event,
}

impl Record {
    /// `data.sequence` of the event.
    pub fn sequence(&self) -> u64 {
        self.event.data.sequence.get()
    }
}

/// The verdict on one chunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChunkVerdict {
    /// Every item is valid and the file ends on an item boundary.
    Complete {
        /// The records, in position order (possibly none: a header-only chunk is valid).
        records: Vec<Record>,
    },
    /// Every complete item is valid and the only fault is an incomplete final record at the end
    /// of the file, shaped exactly like the record the writer would have written there, or a
    /// tail of zero bytes only: what a crash during an append leaves behind.
    TornTail {
        /// The valid records before the torn one.
        records: Vec<Record>,
        /// Length of the valid prefix of the file in bytes (the torn record starts here).
        valid_len: u64,
    },
    /// Anything else. No records are returned: the chunk fails closed.
    Corrupt {
        /// Index of the record at fault; `None` when the header itself is at fault.
        record_index: Option<u64>,
        /// Byte offset of the faulty item in the file.
        offset: u64,
        /// What is wrong.
        reason: CorruptReason,
    },
}

impl ChunkVerdict {
    /// The records a reader may use (none for a corrupt chunk).
    pub fn records(&self) -> &[Record] {
        match self {
            Self::Complete { records } | Self::TornTail { records, .. } => records,
            Self::Corrupt { .. } => &[],
        }
    }

    /// `complete`, `torn_tail` or `corrupt`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Complete { .. } => "complete",
            Self::TornTail { .. } => "torn_tail",
            Self::Corrupt { .. } => "corrupt",
        }
    }
}

/// Why a chunk is corrupt. Authentication failures are never split further: a wrong key and
/// tampered bytes look the same, so the reader is no oracle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CorruptReason {
    /// Item 0 is missing, incomplete, or not the 7-element header of the right types.
    MalformedHeader,
    /// The header is well formed but not canonically encoded.
    NonCanonicalHeader,
    /// The header's profile version is not 1.
    UnsupportedProfileVersion,
    /// The header or a record's protected header names an algorithm other than 24.
    WrongAlgorithm,
    /// The header's chunk id differs from the file name.
    ChunkIdMismatch,
    /// A record's protected or unprotected header has a parameter other than alg / IV.
    UnknownHeaderParameter,
    /// A tagged COSE_Encrypt0 whose parts have the wrong types or whose IV is missing or not
    /// 12 bytes.
    MalformedRecord,
    /// A record that decodes but is not in canonical encoding.
    NonCanonicalRecord,
    /// A record's IV does not start with the header's nonce prefix.
    IvPrefixMismatch,
    /// A record's IV counter is not its position in the chunk.
    IvPositionMismatch,
    /// The AEAD rejected the record: tampered bytes or a wrong key (deliberately not told apart).
    AuthenticationFailed,
    /// Bytes that are not a record where a record or the end of the file was expected (and not
    /// the torn prefix of the next record).
    TrailingGarbage,
    /// The plaintext is not a valid v0 history event (JSON or schema failure).
    InvalidEvent,
    /// The plaintext names a data schema this reader does not support.
    UnsupportedDataschema,
    /// `data.sequence` does not strictly increase within the chunk.
    SequenceNotIncreasing,
}

impl CorruptReason {
    /// A stable snake_case name, used by `annal inspect` and the docs.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::MalformedHeader => "malformed_header",
            Self::NonCanonicalHeader => "non_canonical_header",
            Self::UnsupportedProfileVersion => "unsupported_profile_version",
            Self::WrongAlgorithm => "wrong_algorithm",
            Self::ChunkIdMismatch => "chunk_id_mismatch",
            Self::UnknownHeaderParameter => "unknown_header_parameter",
            Self::MalformedRecord => "malformed_record",
            Self::NonCanonicalRecord => "non_canonical_record",
            Self::IvPrefixMismatch => "iv_prefix_mismatch",
            Self::IvPositionMismatch => "iv_position_mismatch",
            Self::AuthenticationFailed => "authentication_failed",
            Self::TrailingGarbage => "trailing_garbage",
            Self::InvalidEvent => "invalid_event",
            Self::UnsupportedDataschema => "unsupported_dataschema",
            Self::SequenceNotIncreasing => "sequence_not_increasing",
        }
    }
}

impl std::fmt::Display for CorruptReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What reading one chunk produced: its header (when it parsed) and its verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkReading {
    /// The parsed header, or `None` when the header is at fault.
    pub header: Option<ParsedHeader>,
    /// The verdict.
    pub verdict: ChunkVerdict,
}

/// How decoding one CBOR item ended.
pub(super) enum ItemError {
    /// The input ended inside the item.
    Incomplete,
    /// Not decodable CBOR.
    Invalid,
}

/// Decodes one CBOR item from the front of `cursor`, advancing it past exactly that item.
pub(super) fn decode_item(cursor: &mut &[u8]) -> Result<Value, ItemError> {
    ciborium::de::from_reader::<Value, _>(&mut *cursor).map_err(|e| match e {
        ciborium::de::Error::Io(io) if io.kind() == std::io::ErrorKind::UnexpectedEof => {
            ItemError::Incomplete
        }
        _ => ItemError::Invalid,
    })
}

/// Parses only item 0 of a chunk (the plaintext header), without any key. Returns the header
/// and its length in bytes. Used by the reader, and by the delete path to learn which key
/// reference a chunk belongs to.
pub fn read_header(bytes: &[u8]) -> Result<(ParsedHeader, usize), CorruptReason> {
    let mut cursor = bytes;
    let Ok(header_value) = decode_item(&mut cursor) else {
        return Err(CorruptReason::MalformedHeader);
    };
    let header_len = bytes.len() - cursor.len();
    let parsed = parse_header(header_value, &bytes[..header_len]).map_err(|fault| match fault {
        HeaderFault::Malformed => CorruptReason::MalformedHeader,
        HeaderFault::UnsupportedVersion => CorruptReason::UnsupportedProfileVersion,
        HeaderFault::WrongAlgorithm => CorruptReason::WrongAlgorithm,
        HeaderFault::NonCanonical => CorruptReason::NonCanonicalHeader,
    })?;
    Ok((parsed, header_len))
}

/// Reads and classifies one whole chunk. `expected_chunk_id` is the id from the file name when
/// the caller knows it; a header naming another chunk is then [`CorruptReason::ChunkIdMismatch`].
pub fn read_chunk(
    bytes: &[u8],
    root: &dyn ChunkKeys,
    expected_chunk_id: Option<ChunkId>,
) -> ChunkReading {
    let header_fault = |reason| ChunkReading {
        header: None,
        verdict: ChunkVerdict::Corrupt {
            record_index: None,
            offset: 0,
            reason,
        },
    };
    let (parsed, header_len) = match read_header(bytes) {
        Ok(found) => found,
        Err(reason) => return header_fault(reason),
    };
    let mut cursor = &bytes[header_len..];
    if let Some(expected) = expected_chunk_id
        && expected != parsed.header.chunk_id()
    {
        return header_fault(CorruptReason::ChunkIdMismatch);
    }
    let opener = RecordOpener::new(root, parsed.clone());
    let mut records = Vec::new();
    let mut last_sequence: Option<u64> = None;
    let verdict = loop {
        let offset = bytes.len() - cursor.len();
        let position = records.len() as u64;
        if cursor.is_empty() {
            break ChunkVerdict::Complete { records };
        }
        let before = cursor;
        let corrupt = |reason| ChunkVerdict::Corrupt {
            record_index: Some(position),
            offset: offset as u64,
            reason,
        };
        // A tail of zeros only is what a filesystem that extends a file before its data
        // reaches the disk can leave after a crash: no record, nothing authenticated, a crash.
        if before.iter().all(|b| *b == 0) {
            break ChunkVerdict::TornTail {
                records,
                valid_len: offset as u64,
            };
        }
        // Fast path: a record framed exactly as the writer frames this position says its own
        // length. Anything else is decoded as a CBOR value to find where it ends (or that it
        // does not).
        let item_len = match opener.cipher.framed_record_len(before, position) {
            Some(len) => len,
            None => match decode_item(&mut cursor) {
                Ok(_) => before.len() - cursor.len(),
                Err(ItemError::Incomplete)
                    if is_torn_record_prefix(before, opener.nonce_prefix, position) =>
                {
                    break ChunkVerdict::TornTail {
                        records,
                        valid_len: offset as u64,
                    };
                }
                Err(_) => break corrupt(CorruptReason::TrailingGarbage),
            },
        };
        let (item, rest) = before.split_at(item_len);
        cursor = rest;
        let record = match opener.open_item(item, position, offset as u64) {
            Ok(record) => record,
            Err(reason) => break corrupt(reason),
        };
        let sequence = record.sequence();
        if last_sequence.is_some_and(|last| sequence <= last) {
            break corrupt(CorruptReason::SequenceNotIncreasing);
        }
        last_sequence = Some(sequence);
        records.push(record);
    };
    ChunkReading {
        header: Some(parsed),
        verdict,
    }
}

/// Opens single records of one chunk whose header is already parsed: the chunk key is derived
/// once. Used by [`read_chunk`] and by anything that reads a record at a known offset.
pub struct RecordOpener {
    /// The chunk's AEAD.
    cipher: ChunkCipher,
    /// The parsed header; its exact bytes are the AAD.
    header: ParsedHeader,
    /// The header's nonce prefix.
    nonce_prefix: [u8; NONCE_PREFIX_LEN_BYTES],
}

impl std::fmt::Debug for RecordOpener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordOpener")
            .field("header", &self.header)
            .finish_non_exhaustive()
    }
}

impl RecordOpener {
    /// Derives the chunk key for `header`.
    pub fn new(root: &dyn ChunkKeys, header: ParsedHeader) -> Self {
        Self {
            cipher: ChunkCipher::for_header(root, &header.header, &header.bytes),
            nonce_prefix: header.header.nonce_prefix(),
            header,
        }
    }

    /// Opens the record item `item` (exactly one CBOR item) found at `offset` as the record at
    /// `position`: structure, IV, authentication and the v0 event contract.
    pub fn open(&self, item: &[u8], position: u64, offset: u64) -> Result<Record, CorruptReason> {
        self.open_item(item, position, offset)
    }

    /// Two steps: open the framed AEAD record (schema-agnostic), then validate its plaintext as
    /// a v0 event.
    fn open_item(&self, item: &[u8], position: u64, offset: u64) -> Result<Record, CorruptReason> {
        let plaintext = self.cipher.open_record(item, position)?;
        let event = validate_plaintext(&plaintext).map_err(|fault| match fault {
            PlaintextFault::InvalidEvent => CorruptReason::InvalidEvent,
            PlaintextFault::UnsupportedDataschema => CorruptReason::UnsupportedDataschema,
        })?;
        Ok(Record {
            position,
            offset,
            len: item.len() as u64,
            plaintext,
            event,
        })
    }
}

/// Whether `tail` (non-empty, ending inside an item) is a prefix of the record the writer would
/// have put at `position`: the fixed framing, the exact IV, then the head of a byte string no
/// longer than a record may be.
fn is_torn_record_prefix(tail: &[u8], prefix: [u8; NONCE_PREFIX_LEN_BYTES], position: u64) -> bool {
    let mut fixed = [0u8; RECORD_FIXED_PREFIX_LEN_BYTES];
    fixed[..RECORD_FRAMING_BEFORE_IV.len()].copy_from_slice(&RECORD_FRAMING_BEFORE_IV);
    fixed[RECORD_FRAMING_BEFORE_IV.len()..].copy_from_slice(&record_iv(prefix, position));
    let shared = tail.len().min(RECORD_FIXED_PREFIX_LEN_BYTES);
    if tail.is_empty() || tail[..shared] != fixed[..shared] {
        return false;
    }
    let Some((&initial, rest)) = tail[shared..].split_first() else {
        return true;
    };
    // Major type 2 (byte string), definite length.
    let extra_len_bytes = match initial {
        0x40..=0x57 => return usize::from(initial - 0x40) <= MAX_RECORD_LEN_BYTES,
        0x58 => 1,
        0x59 => 2,
        0x5a => 4,
        0x5b => 8,
        _ => return false,
    };
    if rest.len() < extra_len_bytes {
        return true;
    }
    let declared = rest[..extra_len_bytes]
        .iter()
        .fold(0u64, |acc, b| (acc << 8) | u64::from(*b));
    declared <= MAX_RECORD_LEN_BYTES as u64
}
