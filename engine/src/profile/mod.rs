//! Storage profile v1: the chunk header and the COSE_Encrypt0 record codec, and the classifying
//! chunk reader.
//!
//! A chunk is an RFC 8742 CBOR Sequence: item 0 is the header (`shared/contracts/
//! history-profile-v1.cddl`), every later item is one tagged COSE_Encrypt0 record whose external
//! AAD is the exact header bytes and whose IV is `nonce_prefix || u64_be(position)`. This module
//! is pure: it turns bytes into bytes or verdicts and never touches the filesystem. The byte
//! layout and every verdict are documented in `docs/format.md`.
//!
//! # Layout
//!
//! - [`header`]: [`ChunkHeader`], its canonical encoding and its strict parser.
//! - [`record`]: [`RecordSealer`], which encrypts records for one chunk and owns the position
//!   counter, and the single-record opener used by the reader.
//! - [`plaintext`]: validation of a decrypted plaintext as a v0 history event.
//! - [`schema`]: [`RecordSchema`], what a stream's plaintexts are, so the history stream and
//!   the engine journal share this codec; [`HistorySchema`] for v0 events.
//! - [`reader`]: [`scan_chunk`], one pass over a chunk, and the verdicts it turns into under a
//!   [`TailRule`]: complete, torn tail, corrupt (unreadable is the store's verdict on a file it
//!   could not read).

pub mod header;
pub mod plaintext;
pub mod reader;
pub mod record;
pub mod schema;

pub use header::{ChunkHeader, ChunkId, HeaderFieldError, NoncePrefixForm, ParsedHeader};
pub use plaintext::{PlaintextFault, validate_plaintext};
pub use reader::{
    ChunkReading, ChunkScan, ChunkVerdict, CorruptReason, Record, RecordOpener, ScanEnd, TailRule,
    UnreadableReason, read_chunk, read_header, scan_chunk,
};
pub use record::{RecordSealer, SealError};
pub use schema::{HistorySchema, RecordSchema};

/// Profile version written in header item 0.
pub const PROFILE_VERSION: u64 = 1;

/// COSE algorithm id of ChaCha20-Poly1305 (RFC 9053), written in header item 1 and in every
/// record's protected header.
pub const ALGORITHM_CHACHA20_POLY1305: i64 = 24;

/// The profile name reported by status and docs (defined once, in the schema crate).
pub use annal_schema::tools::STORAGE_PROFILE_ID as PROFILE_NAME;

/// The data schema of every v0 history event.
pub use annal_schema::DATASCHEMA_V0;

/// Length of the random nonce prefix in a chunk header, in bytes.
pub const NONCE_PREFIX_LEN_BYTES: usize = 4;

/// Length of a record IV (nonce prefix + 8-byte big-endian position), in bytes.
pub const IV_LEN_BYTES: usize = 12;

/// Length of the Poly1305 tag appended to every ciphertext, in bytes.
pub const TAG_LEN_BYTES: usize = 16;

/// Largest plaintext (one compact CloudEvents JSON) the writer accepts, in bytes. v0 events are
/// metadata only and a few hundred bytes long; 64 KiB leaves a wide margin while keeping a single
/// record small enough that a batch stays one bounded write.
pub const MAX_PLAINTEXT_LEN_BYTES: usize = 64 * 1024;

/// Upper bound of a record's size beyond its plaintext, in bytes: the fixed framing before the
/// ciphertext (tag, array, headers, IV), the ciphertext byte-string head (at most 5 bytes for a
/// ciphertext under 4 GiB) and the tag.
pub const RECORD_OVERHEAD_MAX_BYTES: u64 =
    (record::RECORD_FIXED_PREFIX_LEN_BYTES + 5 + TAG_LEN_BYTES) as u64;

/// Largest encoded record item, in bytes: the plaintext limit plus the tag and the fixed COSE
/// framing (tag, array, protected and unprotected headers, byte-string heads), rounded up.
pub const MAX_RECORD_LEN_BYTES: usize = MAX_PLAINTEXT_LEN_BYTES + TAG_LEN_BYTES + 64;

/// Largest number of records in one chunk. The IV position is a u64, so overflow is far away;
/// the writer rotates long before, at a count that also bounds how much one chunk key protects.
pub const MAX_RECORDS_PER_CHUNK: u64 = 1 << 20;

/// The exact bytes of the protected header `{1: 24}` inside every record.
pub const PROTECTED_HEADER_BYTES: [u8; 4] = [0xa1, 0x01, 0x18, 0x18];
