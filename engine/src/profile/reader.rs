//! The classifying chunk reader.
//!
//! [`scan_chunk`] walks a chunk item by item, once, and stops at the first item that is not an
//! authenticated record of the chunk's schema. What it stopped at decides the verdict:
//!
//! - an authenticated record that breaks the schema or the sequence order, or a bad header, is
//!   always [`ChunkVerdict::Corrupt`]: the writer sealed it with the key, no crash makes that;
//! - so is a whole record that authenticates under the IV it carries but stands at another
//!   position (replayed, duplicated, reordered: `iv_position_mismatch`), and so is any damage
//!   followed by a record of the chunk that still authenticates, at whatever position its IV
//!   names: a crash cannot write a record the key authenticates, and tears only a file's end;
//! - anything else that does not authenticate as the next record (an incomplete item, zeros,
//!   other bytes, a record with a bad tag) is the chunk's *tail*. Under
//!   [`TailRule::MayBeTorn`] (the newest chunk of a stream, the only place a crash leaves one)
//!   the tail is a crash's leftovers: [`ChunkVerdict::TornTail`], with the records before it
//!   readable. Under [`TailRule::MustBeClean`] it is corruption, with the precise reason.
//!
//! The store decides which rule a chunk gets (`store::read`); [`read_chunk`] takes it as an
//! argument for callers that already know.

use ciborium::Value;

use super::header::{ChunkId, HeaderFault, ParsedHeader, parse_header};
use super::plaintext::PlaintextFault;
use super::record::{
    ChunkCipher, RECORD_FIXED_PREFIX_LEN_BYTES, RECORD_FRAMING_BEFORE_IV, record_iv,
};
use super::schema::{HistorySchema, RecordSchema};
use super::{MAX_RECORD_LEN_BYTES, NONCE_PREFIX_LEN_BYTES};
use crate::keys::ChunkKeys;

/// One authenticated, validated record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record<E = annal_schema::Event> {
    /// Position in the chunk (0-based); equals the IV counter.
    pub position: u64,
    /// Byte offset of the record item in the chunk file.
    pub offset: u64,
    /// Length of the record item in bytes; `offset + len` is where the next item starts.
    pub len: u64,
    /// The decrypted plaintext, exactly as written.
    pub plaintext: Vec<u8>,
    /// The parsed plaintext (for the history stream, the v0 event).
    pub event: E,
}

impl Record<annal_schema::Event> {
    /// `data.sequence` of the event.
    pub fn sequence(&self) -> u64 {
        self.event.data.sequence.get()
    }
}

/// The verdict on one chunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChunkVerdict<E = annal_schema::Event> {
    /// Every item is valid and the file ends on an item boundary.
    Complete {
        /// The records, in position order (possibly none: a header-only chunk is valid).
        records: Vec<Record<E>>,
    },
    /// The newest chunk of a stream, whose records are followed by bytes that do not
    /// authenticate at all (no whole record of the chunk is among them): what a crash during
    /// an append leaves behind.
    TornTail {
        /// The valid records before the tail.
        records: Vec<Record<E>>,
        /// Length of the valid prefix of the file in bytes (the tail starts here).
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
    /// The file could not be read at all (the rest of the store is read past it).
    Unreadable {
        /// Why.
        reason: UnreadableReason,
    },
}

impl<E> ChunkVerdict<E> {
    /// The records a reader may use (none for a corrupt or unreadable chunk).
    pub fn records(&self) -> &[Record<E>] {
        match self {
            Self::Complete { records } | Self::TornTail { records, .. } => records,
            Self::Corrupt { .. } | Self::Unreadable { .. } => &[],
        }
    }

    /// `complete`, `torn_tail`, `corrupt` or `unreadable`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Complete { .. } => "complete",
            Self::TornTail { .. } => "torn_tail",
            Self::Corrupt { .. } => "corrupt",
            Self::Unreadable { .. } => "unreadable",
        }
    }
}

/// Why a chunk file could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum UnreadableReason {
    /// Larger than the reader loads (`store::MAX_CHUNK_FILE_BYTES`).
    TooLarge {
        /// Its length.
        len_bytes: u64,
    },
    /// A symbolic link under a chunk's name; never followed.
    Symlink,
    /// A directory, FIFO, socket or device under a chunk's name.
    NotRegularFile,
    /// Opening or reading it failed.
    Io {
        /// The kind of OS error.
        kind: std::io::ErrorKind,
    },
}

impl UnreadableReason {
    /// A stable snake_case name, used by `annal inspect` and the docs.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::TooLarge { .. } => "too_large",
            Self::Symlink => "symlink",
            Self::NotRegularFile => "not_a_regular_file",
            Self::Io { .. } => "io_error",
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
    /// The file ends inside the next record (a torn tail outside the newest chunk of a stream).
    TruncatedRecord,
    /// The plaintext is not a valid v0 history event (JSON or schema failure).
    InvalidEvent,
    /// The plaintext names a data schema this reader does not support.
    UnsupportedDataschema,
    /// `data.sequence` does not strictly increase within the chunk.
    SequenceNotIncreasing,
    /// The event's `source` is not `urn:cua-driver:history:<header stream_id>`: an
    /// authenticated record that names another stream than its chunk's.
    SourceMismatch,
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
            Self::TruncatedRecord => "truncated_record",
            Self::InvalidEvent => "invalid_event",
            Self::UnsupportedDataschema => "unsupported_dataschema",
            Self::SequenceNotIncreasing => "sequence_not_increasing",
            Self::SourceMismatch => "source_mismatch",
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
pub struct ChunkReading<E = annal_schema::Event> {
    /// The parsed header, or `None` when the header is at fault.
    pub header: Option<ParsedHeader>,
    /// The verdict.
    pub verdict: ChunkVerdict<E>,
}

/// Whether a chunk may end in a torn tail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TailRule {
    /// The newest chunk of its stream: bytes after the last authenticated record that do not
    /// authenticate are a crash's leftovers (a record that does, at the wrong position, never is).
    MayBeTorn,
    /// Any other chunk: it must end exactly after its last record.
    MustBeClean,
}

/// Where a scan stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScanEnd {
    /// At the end of the file, on an item boundary.
    Clean,
    /// At bytes that do not authenticate as the record at `record_index`, nor as any record of
    /// the chunk under its own IV.
    Tail {
        /// Where the tail starts (the valid prefix's length).
        valid_len: u64,
        /// The position the next record would have had.
        record_index: u64,
        /// What the bytes there are (the reason given when the chunk must be clean).
        reason: CorruptReason,
    },
    /// At a fault no crash produces: a bad header, an authenticated record that breaks the
    /// schema or the order, a record that authenticates under its own IV at the wrong position,
    /// or damage with an authenticated record after it.
    Fault {
        /// The record at fault; `None` for the header.
        record_index: Option<u64>,
        /// Its byte offset.
        offset: u64,
        /// What is wrong.
        reason: CorruptReason,
    },
}

/// One pass over a chunk: the header, every record that authenticated and validated, and
/// where the pass stopped. Turned into a verdict with [`ChunkScan::into_verdict`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkScan<E> {
    /// The parsed header, or `None` when the header is at fault.
    pub header: Option<ParsedHeader>,
    /// The valid records before the end, in position order.
    pub records: Vec<Record<E>>,
    /// Where the pass stopped.
    pub end: ScanEnd,
    /// The highest sequence among records that still authenticate after where the pass
    /// stopped early (a damaged chunk may hold more records than its readable prefix).
    pub later_sequence: Option<u64>,
}

impl<E> ChunkScan<E> {
    /// Whether the chunk holds any record bytes after its header (records, or a tail or fault
    /// at a record).
    pub fn has_record_bytes(&self) -> bool {
        !self.records.is_empty()
            || matches!(
                self.end,
                ScanEnd::Tail { .. }
                    | ScanEnd::Fault {
                        record_index: Some(_),
                        ..
                    }
            )
    }

    /// The highest sequence among every record that authenticated, before or after where the
    /// pass stopped.
    pub fn last_authenticated_sequence<S: RecordSchema<Event = E>>(&self) -> Option<u64> {
        self.records
            .iter()
            .map(|r| S::sequence(&r.event))
            .max()
            .max(self.later_sequence)
    }

    /// The verdict under `rule`, with the header.
    pub fn into_verdict(self, rule: TailRule) -> (Option<ParsedHeader>, ChunkVerdict<E>) {
        let verdict = match self.end {
            ScanEnd::Clean => ChunkVerdict::Complete {
                records: self.records,
            },
            ScanEnd::Tail { valid_len, .. } if rule == TailRule::MayBeTorn => {
                ChunkVerdict::TornTail {
                    records: self.records,
                    valid_len,
                }
            }
            ScanEnd::Tail {
                valid_len,
                record_index,
                reason,
            } => ChunkVerdict::Corrupt {
                record_index: Some(record_index),
                offset: valid_len,
                reason,
            },
            ScanEnd::Fault {
                record_index,
                offset,
                reason,
            } => ChunkVerdict::Corrupt {
                record_index,
                offset,
                reason,
            },
        };
        (self.header, verdict)
    }
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

/// Reads and classifies one whole chunk of v0 history events under `rule` (see
/// [`scan_chunk`] for the schema-generic pass).
pub fn read_chunk(
    bytes: &[u8],
    keys: &dyn ChunkKeys,
    expected_chunk_id: Option<ChunkId>,
    rule: TailRule,
) -> ChunkReading {
    let (header, verdict) =
        scan_chunk::<HistorySchema>(bytes, keys, expected_chunk_id).into_verdict(rule);
    ChunkReading { header, verdict }
}

/// Walks one whole chunk once (see the module doc). `expected_chunk_id` is the id from the
/// file name when the caller knows it; a header naming another chunk is then
/// [`CorruptReason::ChunkIdMismatch`].
pub fn scan_chunk<S: RecordSchema>(
    bytes: &[u8],
    keys: &dyn ChunkKeys,
    expected_chunk_id: Option<ChunkId>,
) -> ChunkScan<S::Event> {
    let header_fault = |reason| ChunkScan {
        header: None,
        records: Vec::new(),
        end: ScanEnd::Fault {
            record_index: None,
            offset: 0,
            reason,
        },
        later_sequence: None,
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
    let opener = RecordOpener::new(keys, parsed.clone());
    let mut records: Vec<Record<S::Event>> = Vec::new();
    let mut last_sequence: Option<u64> = None;
    let end = loop {
        let offset = bytes.len() - cursor.len();
        let position = records.len() as u64;
        if cursor.is_empty() {
            break ScanEnd::Clean;
        }
        let before = cursor;
        let tail = |reason| ScanEnd::Tail {
            valid_len: offset as u64,
            record_index: position,
            reason,
        };
        // A tail of zeros only is what a filesystem that extends a file before its data
        // reaches the disk can leave after a crash.
        if before.iter().all(|b| *b == 0) {
            break tail(CorruptReason::TrailingGarbage);
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
                    break tail(CorruptReason::TruncatedRecord);
                }
                Err(_) => break tail(CorruptReason::TrailingGarbage),
            },
        };
        let (item, rest) = before.split_at(item_len);
        cursor = rest;
        let fault = |reason| ScanEnd::Fault {
            record_index: Some(position),
            offset: offset as u64,
            reason,
        };
        let plaintext = match opener.cipher.open_record(item, position) {
            Ok(plaintext) => plaintext,
            // A whole record the key authenticates, at the wrong position: the key wrote it, no
            // crash did. Corrupt wherever it stands, the end of the newest chunk included.
            Err(reason) if opener.cipher.authenticates_under_own_iv(item) => break fault(reason),
            Err(reason) => break tail(reason),
        };
        let record = match opener.validate::<S>(plaintext, item, position, offset as u64) {
            Ok(record) => record,
            Err(reason) => break fault(reason),
        };
        let sequence = S::sequence(&record.event);
        if last_sequence.is_some_and(|last| sequence <= last) {
            break fault(CorruptReason::SequenceNotIncreasing);
        }
        last_sequence = Some(sequence);
        records.push(record);
    };
    // Where the scan stopped early, look past it for records that still authenticate, at any
    // position their IV names: they keep the writer's high-water mark above their sequences,
    // and they decide that a tail is no tail (a crash tears the end of a file, never its
    // middle, and never writes a whole record the key authenticates, so damage with a valid
    // record after it, later or replayed, is tampering, in the newest chunk too).
    let later = match end {
        ScanEnd::Clean => LaterRecords::default(),
        ScanEnd::Tail { valid_len, .. }
        | ScanEnd::Fault {
            record_index: Some(_),
            offset: valid_len,
            ..
        } => opener.later_records::<S>(&bytes[valid_len as usize..]),
        ScanEnd::Fault { .. } => LaterRecords::default(),
    };
    let end = match end {
        ScanEnd::Tail {
            valid_len,
            record_index,
            reason,
        } if later.any => ScanEnd::Fault {
            record_index: Some(record_index),
            offset: valid_len,
            reason,
        },
        other => other,
    };
    ChunkScan {
        header: Some(parsed),
        records,
        end,
        later_sequence: later.max_sequence,
    }
}

/// Records found past the point where a scan stopped.
#[derive(Debug, Default)]
struct LaterRecords {
    /// Whether any authenticated.
    any: bool,
    /// The highest sequence among those that also parsed.
    max_sequence: Option<u64>,
}

/// Opens single records of one chunk whose header is already parsed: the chunk key is derived
/// once. Used by [`scan_chunk`] and by reads of a record at a known offset.
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
    pub fn new(keys: &dyn ChunkKeys, header: ParsedHeader) -> Self {
        Self {
            cipher: ChunkCipher::for_header(keys, &header.header, &header.bytes),
            nonce_prefix: header.header.nonce_prefix(),
            header,
        }
    }

    /// The records of this chunk that authenticate somewhere in `rest` after its first byte,
    /// at whatever position their IV names (a later one, or an earlier one replayed): found by
    /// their fixed framing and nonce prefix, opened under their own IV. Only run on a chunk that
    /// already failed, so its cost never reaches a healthy read.
    fn later_records<S: RecordSchema>(&self, rest: &[u8]) -> LaterRecords {
        let mut marker = [0u8; RECORD_FRAMING_BEFORE_IV.len() + NONCE_PREFIX_LEN_BYTES];
        marker[..RECORD_FRAMING_BEFORE_IV.len()].copy_from_slice(&RECORD_FRAMING_BEFORE_IV);
        marker[RECORD_FRAMING_BEFORE_IV.len()..].copy_from_slice(&self.nonce_prefix);
        let mut found = LaterRecords::default();
        for at in 1..rest.len().saturating_sub(RECORD_FIXED_PREFIX_LEN_BYTES) {
            let candidate = &rest[at..];
            if !candidate.starts_with(&marker) {
                continue;
            }
            let mut counter = [0u8; 8];
            counter.copy_from_slice(&candidate[marker.len()..RECORD_FIXED_PREFIX_LEN_BYTES]);
            let claimed = u64::from_be_bytes(counter);
            let Some(len) = self.cipher.framed_record_len(candidate, claimed) else {
                continue;
            };
            let Ok(plaintext) = self.cipher.open_record(&candidate[..len], claimed) else {
                continue;
            };
            found.any = true;
            if let Ok(event) = S::parse(&plaintext) {
                found.max_sequence = found.max_sequence.max(Some(S::sequence(&event)));
            }
        }
        found
    }

    /// The header this opener authenticates against.
    pub fn header(&self) -> &ParsedHeader {
        &self.header
    }

    /// Opens the record item `item` (exactly one CBOR item) found at `offset` as the record at
    /// `position`, in two steps: the framed AEAD record (schema-agnostic), then the plaintext
    /// against schema `S`.
    pub fn open<S: RecordSchema>(
        &self,
        item: &[u8],
        position: u64,
        offset: u64,
    ) -> Result<Record<S::Event>, CorruptReason> {
        let plaintext = self.cipher.open_record(item, position)?;
        self.validate::<S>(plaintext, item, position, offset)
    }

    /// Parses an authenticated plaintext against schema `S` and checks that it belongs to this
    /// chunk's stream.
    fn validate<S: RecordSchema>(
        &self,
        plaintext: Vec<u8>,
        item: &[u8],
        position: u64,
        offset: u64,
    ) -> Result<Record<S::Event>, CorruptReason> {
        let event = S::parse(&plaintext).map_err(|fault| match fault {
            PlaintextFault::InvalidEvent => CorruptReason::InvalidEvent,
            PlaintextFault::UnsupportedDataschema => CorruptReason::UnsupportedDataschema,
        })?;
        if !S::belongs_to_stream(&event, self.header.header.stream_id()) {
            return Err(CorruptReason::SourceMismatch);
        }
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
