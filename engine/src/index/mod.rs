//! The derived index files: one encrypted, rebuildable, never-authoritative file per chunk in
//! the sidecar (`engine/index/<chunk_id>.idx`), and the load of the in-memory
//! [`Index`](crate::query::Index) from them (or from the chunks).
//!
//! An index file holds, for every record its chunk yielded when it was indexed, what the query
//! path needs without opening the chunk: sequence, event time, keyed session id, event type and
//! location (position, offset, length). It never holds an event's content.
//!
//! # Rules
//!
//! - **Never authoritative.** A missing, stale (it covers another length of the chunk than the
//!   file has now), invalid (bad magic, version, chunk id, tag, archive or contents) index file
//!   is ignored and the chunk is scanned instead; when the store is writable, the file is then
//!   rewritten from the scan. Reads by location still authenticate every record and check its
//!   sequence, so even a wrong index can only make a query miss or fail, never return forged
//!   data.
//! - **Derived only from what the reader accepts.** A file is written for a chunk the reader
//!   found complete, or torn after at least one record (with that ending recorded, so the
//!   loader applies the reader's "only the newest chunk of its stream may be torn" rule again
//!   at every load). Corrupt and unreadable chunks get no file and contribute nothing; the
//!   load reports them so queries fail closed.
//! - **Encrypted.** XChaCha20-Poly1305 (RustCrypto) with a random 24-byte nonce per write, key
//!   from the custody's index purpose ([`IndexKey`]); the plaintext header is the associated
//!   data, so a file renamed to another chunk's name, or edited anywhere, is refused.
//! - **Atomic.** Written in the sidecar's `tmp/`, synced, renamed over `index/<chunk_id>.idx`
//!   (replacing is allowed: the file is derived), the directory synced.
//!
//! The byte layout is in `docs/format.md` ("Index files").
//!
//! # Layout
//!
//! - this module: [`IndexKey`], [`ChunkIndex`], the file format, [`write_index_file`],
//!   [`read_index_file`], [`chunk_index_of`] (a chunk's index from the store reader's report).
//! - [`load`]: [`load_index`] (files where valid, scans elsewhere, rewrites when writable) and
//!   [`rebuild_index_files`] (`annal index rebuild`).

pub mod load;

use std::time::Duration;

use annal_schema::{Event, EventType};
use chacha20poly1305::aead::{Aead, AeadInOut, Payload};
use chacha20poly1305::{KeyInit, XChaCha20Poly1305, XNonce};
use zeroize::{Zeroize, ZeroizeOnDrop};

pub use load::{
    LazyIndex, LoadIndexError, LoadReport, latest_event_time, load_index, load_index_lazily,
    rebuild_index_files,
};

use crate::entropy::{Entropy, OsEntropy};
use crate::keys::PurposeKey;
use crate::keys::material::{CHUNK_ID_LEN_BYTES, KEY_LEN_BYTES, SESSION_ID_LEN_BYTES};
use crate::profile::header::MAX_HEADER_TEXT_LEN_BYTES;
use crate::profile::{ChunkId, ChunkVerdict, MAX_RECORDS_PER_CHUNK};
use crate::query::IndexEntry;
use crate::storage::{Area, FileName, Replace, Storage, StorageError};
use crate::store::{ChunkReport, MAX_CHUNK_FILE_BYTES, RecordLocation, TEMP_FILE_EXTENSION};

/// The first bytes of every index file.
pub const INDEX_FILE_MAGIC: &[u8; 14] = b"annal-index-v1";

/// The format version this code writes and reads (big-endian u16 after the magic).
pub const INDEX_FORMAT_VERSION: u16 = 1;

/// Extension of an index file (`<chunk_id>.idx`).
pub const INDEX_FILE_EXTENSION: &str = ".idx";

/// Length of the plaintext header in bytes: magic, version, chunk id, the chunk length and the
/// record count it covers.
pub const INDEX_HEADER_LEN_BYTES: usize = INDEX_FILE_MAGIC.len() + 2 + CHUNK_ID_LEN_BYTES + 8 + 8;

/// Length of the XChaCha20-Poly1305 nonce in bytes.
pub const INDEX_NONCE_LEN_BYTES: usize = 24;

/// Length of the Poly1305 tag in bytes.
pub const INDEX_TAG_LEN_BYTES: usize = 16;

/// Most entries one index file may hold: as many records as a chunk may.
pub const MAX_INDEX_ENTRIES: u64 = MAX_RECORDS_PER_CHUNK;

/// Longest stream id an index file may carry, in bytes (a header text field's limit).
pub const MAX_INDEX_STREAM_ID_LEN_BYTES: usize = MAX_HEADER_TEXT_LEN_BYTES;

/// Upper bound of one entry's archived size in bytes (the archive's actual size per entry is
/// checked against it by a unit test).
pub const MAX_ARCHIVED_ENTRY_BYTES: u64 = 96;

/// Upper bound of the archive's size apart from its entries, in bytes: the root, the stream id
/// and the ending.
pub const MAX_ARCHIVE_FIXED_BYTES: u64 = 512 + MAX_INDEX_STREAM_ID_LEN_BYTES as u64;

/// Fixed bytes of a file around the archive: header, nonce, tag.
const FILE_OVERHEAD_BYTES: u64 =
    (INDEX_HEADER_LEN_BYTES + INDEX_NONCE_LEN_BYTES + INDEX_TAG_LEN_BYTES) as u64;

/// Largest index file read, in bytes; a longer file is invalid without being read. A file is
/// further bounded by the record count its header claims (`max_file_len_bytes`) before any
/// allocation, so a small hostile file cannot claim a large buffer either.
pub const MAX_INDEX_FILE_BYTES: u64 =
    FILE_OVERHEAD_BYTES + MAX_ARCHIVE_FIXED_BYTES + MAX_INDEX_ENTRIES * MAX_ARCHIVED_ENTRY_BYTES;

/// The most bytes a file covering `records` records may have.
const fn max_file_len_bytes(records: u64) -> u64 {
    FILE_OVERHEAD_BYTES + MAX_ARCHIVE_FIXED_BYTES + records * MAX_ARCHIVED_ENTRY_BYTES
}

/// Event type codes in the archive: the index of the type in this table. Fixed by the format
/// (append only).
const EVENT_TYPE_CODES: [EventType; 7] = [
    EventType::Control,
    EventType::ActionStarted,
    EventType::ActionCompleted,
    EventType::SessionStarted,
    EventType::SessionEnded,
    EventType::Access,
    EventType::Health,
];

/// Nanoseconds in a second (an archived time's fraction is below it).
const NANOS_PER_SEC: u32 = 1_000_000_000;

/// The XChaCha20-Poly1305 key of the index files (zeroized on drop; `Debug` redacts). Made from
/// the custody's index purpose key ([`KeyCustody::index_key`](crate::keys::KeyCustody::index_key)).
#[derive(Zeroize, ZeroizeOnDrop)]
pub struct IndexKey([u8; KEY_LEN_BYTES]);

impl IndexKey {
    /// The index key from the index purpose key.
    pub fn new(key: &PurposeKey) -> Self {
        Self(*key.as_bytes())
    }

    fn cipher(&self) -> XChaCha20Poly1305 {
        XChaCha20Poly1305::new(&chacha20poly1305::Key::from(self.0))
    }
}

impl From<&PurposeKey> for IndexKey {
    fn from(key: &PurposeKey) -> Self {
        Self::new(key)
    }
}

impl std::fmt::Debug for IndexKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("IndexKey(<redacted>)")
    }
}

/// How an indexed chunk ended when it was indexed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ChunkEnding {
    /// The file ended after its last record.
    Complete,
    /// Bytes after the last record did not authenticate: a torn tail, valid only while the
    /// chunk is the newest of its stream (the loader checks that again at every load).
    TornTail {
        /// Length of the valid prefix in bytes.
        valid_len: u64,
    },
}

/// What one index file says about one chunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkIndex {
    /// The chunk.
    pub chunk_id: ChunkId,
    /// The chunk file's length in bytes when it was indexed (a file of another length now makes
    /// the index stale).
    pub chunk_len: u64,
    /// The stream id of the chunk's header (the torn-tail rule compares chunks of one stream).
    pub stream_id: String,
    /// How the chunk ended.
    pub ending: ChunkEnding,
    /// Its records' entries, in position order (every location names `chunk_id`).
    pub entries: Vec<IndexEntry>,
}

/// The entry as archived (a private format type).
#[derive(rkyv::Archive, rkyv::Serialize)]
struct StoredEntry {
    /// The record's sequence.
    sequence: u64,
    /// Whole seconds of the event time since the epoch.
    time_secs: u64,
    /// Nanoseconds of the event time past `time_secs`.
    time_nanos: u32,
    /// The keyed session id.
    session: Option<[u8; SESSION_ID_LEN_BYTES]>,
    /// The event type's code ([`EVENT_TYPE_CODES`]).
    event_type: u8,
    /// Position in the chunk.
    position: u64,
    /// Byte offset of the record item.
    offset: u64,
    /// Length of the record item.
    len: u64,
}

/// The archive's root (a private format type).
#[derive(rkyv::Archive, rkyv::Serialize)]
struct StoredIndex {
    /// The chunk header's stream id.
    stream_id: String,
    /// `None` for a complete chunk; the valid prefix's length for a torn one.
    torn_valid_len: Option<u64>,
    /// The entries, in position order.
    entries: Vec<StoredEntry>,
}

/// Why an index file is invalid. Decryption failures carry no detail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidIndexFile {
    /// Shorter than a header, nonce and tag.
    #[error("too short")]
    Truncated,
    /// Longer than the format allows (overall, or for the record count its header claims).
    #[error("too long")]
    TooLarge,
    /// Does not start with `annal-index-v1`.
    #[error("bad magic")]
    BadMagic,
    /// A format version this code does not read.
    #[error("unsupported format version")]
    UnsupportedVersion,
    /// The header names another chunk than the file name.
    #[error("the header names another chunk")]
    WrongChunk,
    /// The header claims more records than a chunk may hold.
    #[error("record count out of range")]
    RecordCount,
    /// The ciphertext does not authenticate under the index key with this header.
    #[error("authentication failed")]
    Authentication,
    /// The plaintext is not a valid archive.
    #[error("malformed archive")]
    Archive,
    /// The archive's contents break the format's rules (count, order, bounds, codes).
    #[error("inconsistent contents")]
    Inconsistent,
}

/// An index file could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IndexFileError {
    /// There is none (or the store has no sidecar).
    #[error("no index file")]
    Missing,
    /// It covers another length of the chunk than the chunk file has now.
    #[error("the index file covers {covered_len_bytes} bytes of a {chunk_len_bytes}-byte chunk")]
    Stale {
        /// The chunk length the file covers.
        covered_len_bytes: u64,
        /// The chunk file's length now.
        chunk_len_bytes: u64,
    },
    /// It is not a valid index file for this chunk.
    #[error("invalid index file: {0}")]
    Invalid(InvalidIndexFile),
    /// Reading it failed (a symlink or non-file in its place counts here).
    #[error("reading the index file: {0}")]
    Storage(StorageError),
}

/// Writing an index file failed. The index is derived, so this is never fatal to a caller
/// that can scan the chunk instead.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IndexWriteError {
    /// The index breaks the format's limits or rules (too many entries, a long stream id, an
    /// entry of another chunk, an unknown event type).
    #[error("the chunk index cannot be written: {0}")]
    Unwritable(&'static str),
    /// The random source failed (no nonce).
    #[error("the random source failed")]
    Entropy,
    /// Archiving or encrypting failed.
    #[error("encoding the index file failed")]
    Encode,
    /// A storage operation failed.
    #[error("{operation} failed: {source}")]
    Storage {
        /// What was being done (`remove stale temporary`, `create`, `write`, `sync`, `rename`,
        /// `sync directory`).
        operation: &'static str,
        /// The storage error.
        source: StorageError,
    },
}

/// `<chunk_id>.idx`.
pub fn index_file_name(chunk_id: ChunkId) -> FileName {
    FileName::from_known(format!("{}{INDEX_FILE_EXTENSION}", chunk_id.to_hex()))
}

/// The chunk id of a `<32 lower hex>.idx` name; `None` for anything else.
pub fn parse_index_file_name(name: &str) -> Option<ChunkId> {
    name.strip_suffix(INDEX_FILE_EXTENSION)
        .and_then(ChunkId::from_hex)
}

/// The temporary name an index file is written under in `tmp/`.
fn temp_index_file_name(chunk_id: ChunkId) -> FileName {
    FileName::from_known(format!(
        "index.{}{INDEX_FILE_EXTENSION}{TEMP_FILE_EXTENSION}",
        chunk_id.to_hex()
    ))
}

/// The plaintext header (the AEAD's associated data).
fn header_bytes(chunk_id: ChunkId, chunk_len: u64, records: u64) -> [u8; INDEX_HEADER_LEN_BYTES] {
    let mut out = [0u8; INDEX_HEADER_LEN_BYTES];
    let parts: [&[u8]; 5] = [
        INDEX_FILE_MAGIC,
        &INDEX_FORMAT_VERSION.to_be_bytes(),
        &chunk_id.0,
        &chunk_len.to_be_bytes(),
        &records.to_be_bytes(),
    ];
    let mut at = 0;
    for part in parts {
        out[at..at + part.len()].copy_from_slice(part);
        at += part.len();
    }
    out
}

/// The fields of a header that parsed.
struct Header {
    /// The chunk it names.
    chunk_id: ChunkId,
    /// The chunk length it covers.
    chunk_len: u64,
    /// The record count it claims.
    records: u64,
}

fn parse_header(bytes: &[u8; INDEX_HEADER_LEN_BYTES]) -> Result<Header, InvalidIndexFile> {
    let (magic, rest) = bytes.split_at(INDEX_FILE_MAGIC.len());
    if magic != INDEX_FILE_MAGIC {
        return Err(InvalidIndexFile::BadMagic);
    }
    let (version, rest) = rest.split_at(2);
    if version != INDEX_FORMAT_VERSION.to_be_bytes() {
        return Err(InvalidIndexFile::UnsupportedVersion);
    }
    let (id, rest) = rest.split_at(CHUNK_ID_LEN_BYTES);
    let (len, count) = rest.split_at(8);
    let be = |b: &[u8]| b.try_into().map(u64::from_be_bytes);
    let (Ok(id), Ok(chunk_len), Ok(records)) = (id.try_into(), be(len), be(count)) else {
        return Err(InvalidIndexFile::Truncated);
    };
    Ok(Header {
        chunk_id: ChunkId(id),
        chunk_len,
        records,
    })
}

/// The index of one chunk as the store reader classified it: for a complete chunk, or a torn
/// one with at least one record; `None` for any other verdict or a chunk without an id or
/// header. This is what [`load_index`] and [`rebuild_index_files`] write.
pub fn chunk_index_of(report: &ChunkReport<Event>) -> Option<ChunkIndex> {
    let chunk_id = report.chunk_id?;
    let header = report.header.as_ref()?;
    let (records, ending) = match &report.verdict {
        ChunkVerdict::Complete { records } => (records, ChunkEnding::Complete),
        ChunkVerdict::TornTail { records, valid_len } if !records.is_empty() => (
            records,
            ChunkEnding::TornTail {
                valid_len: *valid_len,
            },
        ),
        _ => return None,
    };
    Some(ChunkIndex {
        chunk_id,
        chunk_len: report.len_bytes,
        stream_id: header.header.stream_id().to_owned(),
        ending,
        entries: entries_of(chunk_id, records),
    })
}

/// The entries of a chunk's records.
pub(crate) fn entries_of(chunk_id: ChunkId, records: &[crate::profile::Record]) -> Vec<IndexEntry> {
    records
        .iter()
        .map(|r| {
            IndexEntry::of(
                &r.event,
                RecordLocation {
                    chunk_id,
                    position: r.position,
                    offset: r.offset,
                    len: r.len,
                    sequence: r.sequence(),
                },
            )
        })
        .collect()
}

fn stored(index: &ChunkIndex) -> Result<StoredIndex, IndexWriteError> {
    if index.entries.len() as u64 > MAX_INDEX_ENTRIES {
        return Err(IndexWriteError::Unwritable(
            "more entries than a chunk holds",
        ));
    }
    if index.stream_id.len() > MAX_INDEX_STREAM_ID_LEN_BYTES {
        return Err(IndexWriteError::Unwritable("stream id too long"));
    }
    let entries = index
        .entries
        .iter()
        .map(|e| {
            if e.location.chunk_id != index.chunk_id {
                return Err(IndexWriteError::Unwritable("an entry of another chunk"));
            }
            let code = EVENT_TYPE_CODES
                .iter()
                .position(|t| *t == e.event_type)
                .and_then(|p| u8::try_from(p).ok())
                .ok_or(IndexWriteError::Unwritable("an unknown event type"))?;
            Ok(StoredEntry {
                sequence: e.sequence,
                time_secs: e.time.as_secs(),
                time_nanos: e.time.subsec_nanos(),
                session: e.session,
                event_type: code,
                position: e.location.position,
                offset: e.location.offset,
                len: e.location.len,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(StoredIndex {
        stream_id: index.stream_id.clone(),
        torn_valid_len: match index.ending {
            ChunkEnding::Complete => None,
            ChunkEnding::TornTail { valid_len } => Some(valid_len),
        },
        entries,
    })
}

/// The bytes of an index file for `index` with `nonce`.
fn encode_file(
    key: &IndexKey,
    index: &ChunkIndex,
    nonce: [u8; INDEX_NONCE_LEN_BYTES],
) -> Result<Vec<u8>, IndexWriteError> {
    let archive = rkyv::to_bytes::<rkyv::rancor::Error>(&stored(index)?)
        .map_err(|_| IndexWriteError::Encode)?;
    let header = header_bytes(index.chunk_id, index.chunk_len, index.entries.len() as u64);
    let ciphertext = key
        .cipher()
        .encrypt(
            &XNonce::from(nonce),
            Payload {
                msg: &archive,
                aad: &header,
            },
        )
        .map_err(|_| IndexWriteError::Encode)?;
    let mut out = Vec::with_capacity(header.len() + nonce.len() + ciphertext.len());
    out.extend_from_slice(&header);
    out.extend_from_slice(&nonce);
    out.extend_from_slice(&ciphertext);
    if out.len() as u64 > max_file_len_bytes(index.entries.len() as u64) {
        // The per-entry bound is the format's; an archive above it would be refused on read.
        return Err(IndexWriteError::Encode);
    }
    Ok(out)
}

/// Writes the index file of `index.chunk_id` atomically: a new file in `tmp/` (a leftover of
/// the same name is removed first), synced, renamed over `index/<chunk_id>.idx`, `index/`
/// synced. The nonce is 24 fresh bytes from the operating system's random source. Needs a
/// writable storage with a sidecar.
pub fn write_index_file(
    storage: &dyn Storage,
    key: &IndexKey,
    index: &ChunkIndex,
) -> Result<(), IndexWriteError> {
    write_index_file_with(storage, key, index, true)
}

/// [`write_index_file`] without its two syncs: for the files the Query actor writes as chunks
/// close, beside a writer whose group commits would otherwise queue behind them on the disk.
/// Safe because the file is derived and never authoritative: a crash can only leave it missing,
/// short or invalid, which the next load detects (length, tag) and answers with a scan.
pub fn write_index_file_unsynced(
    storage: &dyn Storage,
    key: &IndexKey,
    index: &ChunkIndex,
) -> Result<(), IndexWriteError> {
    write_index_file_with(storage, key, index, false)
}

fn write_index_file_with(
    storage: &dyn Storage,
    key: &IndexKey,
    index: &ChunkIndex,
    synced: bool,
) -> Result<(), IndexWriteError> {
    let mut nonce = [0u8; INDEX_NONCE_LEN_BYTES];
    OsEntropy
        .fill(&mut nonce)
        .map_err(|_| IndexWriteError::Entropy)?;
    let bytes = encode_file(key, index, nonce)?;
    let io = |operation| move |source| IndexWriteError::Storage { operation, source };
    let tmp = temp_index_file_name(index.chunk_id);
    match storage.remove(Area::Tmp, &tmp) {
        Ok(()) | Err(StorageError::NotFound) => {}
        Err(e) => return Err(io("remove stale temporary")(e)),
    }
    let mut file = storage.create_new(Area::Tmp, &tmp).map_err(io("create"))?;
    file.append(&bytes).map_err(io("write"))?;
    if synced {
        file.sync().map_err(io("sync"))?;
    }
    drop(file);
    storage
        .rename(
            Area::Tmp,
            &tmp,
            Area::Index,
            &index_file_name(index.chunk_id),
            Replace::Allowed,
        )
        .map_err(io("rename"))?;
    if !synced {
        return Ok(());
    }
    storage.sync_dir(Area::Index).map_err(io("sync directory"))
}

/// Reads the index file of `chunk_id`, which must cover exactly `expected_len` bytes of the
/// chunk (its file's length now). Every length is bounded before anything is allocated: the
/// file's ([`MAX_INDEX_FILE_BYTES`]), then the one its header's record count allows.
pub fn read_index_file(
    storage: &dyn Storage,
    key: &IndexKey,
    chunk_id: ChunkId,
    expected_len: u64,
) -> Result<ChunkIndex, IndexFileError> {
    if !storage.has_area(Area::Index) {
        return Err(IndexFileError::Missing);
    }
    let file = match storage.open_read(Area::Index, &index_file_name(chunk_id)) {
        Ok(file) => file,
        Err(StorageError::NotFound) => return Err(IndexFileError::Missing),
        Err(e) => return Err(IndexFileError::Storage(e)),
    };
    let len = file.len();
    if len < FILE_OVERHEAD_BYTES {
        return Err(IndexFileError::Invalid(InvalidIndexFile::Truncated));
    }
    if len > MAX_INDEX_FILE_BYTES {
        return Err(IndexFileError::Invalid(InvalidIndexFile::TooLarge));
    }
    let mut header = [0u8; INDEX_HEADER_LEN_BYTES];
    file.read_exact_at(0, &mut header)
        .map_err(IndexFileError::Storage)?;
    let parsed = parse_header(&header).map_err(IndexFileError::Invalid)?;
    if parsed.chunk_id != chunk_id {
        return Err(IndexFileError::Invalid(InvalidIndexFile::WrongChunk));
    }
    if parsed.records > MAX_INDEX_ENTRIES {
        return Err(IndexFileError::Invalid(InvalidIndexFile::RecordCount));
    }
    if parsed.chunk_len != expected_len {
        return Err(IndexFileError::Stale {
            covered_len_bytes: parsed.chunk_len,
            chunk_len_bytes: expected_len,
        });
    }
    if len > max_file_len_bytes(parsed.records) {
        return Err(IndexFileError::Invalid(InvalidIndexFile::TooLarge));
    }
    // Bounded above by `max_file_len_bytes(MAX_INDEX_ENTRIES)` (about 96 MiB).
    let body_len = usize::try_from(len - INDEX_HEADER_LEN_BYTES as u64)
        .map_err(|_| IndexFileError::Invalid(InvalidIndexFile::TooLarge))?;
    let mut body = vec![0u8; body_len];
    file.read_exact_at(INDEX_HEADER_LEN_BYTES as u64, &mut body)
        .map_err(IndexFileError::Storage)?;
    decode_body(key, &header, &parsed, &body).map_err(IndexFileError::Invalid)
}

/// Decrypts and validates the part of a file after its header.
fn decode_body(
    key: &IndexKey,
    header: &[u8; INDEX_HEADER_LEN_BYTES],
    parsed: &Header,
    body: &[u8],
) -> Result<ChunkIndex, InvalidIndexFile> {
    let (nonce, rest) = body
        .split_at_checked(INDEX_NONCE_LEN_BYTES)
        .ok_or(InvalidIndexFile::Truncated)?;
    let tag_at = rest
        .len()
        .checked_sub(INDEX_TAG_LEN_BYTES)
        .ok_or(InvalidIndexFile::Truncated)?;
    let (ciphertext, tag) = rest.split_at(tag_at);
    let nonce = XNonce::try_from(nonce).map_err(|_| InvalidIndexFile::Truncated)?;
    let tag = chacha20poly1305::Tag::try_from(tag).map_err(|_| InvalidIndexFile::Truncated)?;
    // rkyv refuses a misaligned buffer: decrypt straight into an aligned one.
    let mut plain = rkyv::util::AlignedVec::<16>::with_capacity(ciphertext.len());
    plain.extend_from_slice(ciphertext);
    key.cipher()
        .decrypt_inout_detached(&nonce, header, plain.as_mut_slice().into(), &tag)
        .map_err(|_| InvalidIndexFile::Authentication)?;
    let archived = rkyv::access::<ArchivedStoredIndex, rkyv::rancor::Error>(&plain)
        .map_err(|_| InvalidIndexFile::Archive)?;
    from_archive(archived, parsed)
}

/// The chunk index an authenticated archive holds, checked against its header and the
/// format's rules: the claimed count, strictly increasing sequences, positions `0..n`, items
/// in order inside the covered length, known event types, valid times.
fn from_archive(
    archived: &ArchivedStoredIndex,
    header: &Header,
) -> Result<ChunkIndex, InvalidIndexFile> {
    let bad = InvalidIndexFile::Inconsistent;
    if archived.entries.len() as u64 != header.records
        || archived.stream_id.len() > MAX_INDEX_STREAM_ID_LEN_BYTES
    {
        return Err(bad);
    }
    let ending = match archived.torn_valid_len.as_ref() {
        None => ChunkEnding::Complete,
        Some(valid_len) => ChunkEnding::TornTail {
            valid_len: valid_len.to_native(),
        },
    };
    let covered = match ending {
        ChunkEnding::Complete => header.chunk_len,
        ChunkEnding::TornTail { valid_len } if valid_len <= header.chunk_len => valid_len,
        ChunkEnding::TornTail { .. } => return Err(bad),
    };
    if header.chunk_len > MAX_CHUNK_FILE_BYTES {
        return Err(bad);
    }
    let mut entries = Vec::with_capacity(archived.entries.len());
    let mut last: Option<(u64, u64)> = None;
    for (position, e) in archived.entries.iter().enumerate() {
        let (sequence, offset, len) = (
            e.sequence.to_native(),
            e.offset.to_native(),
            e.len.to_native(),
        );
        let end = offset.checked_add(len).ok_or(bad)?;
        let nanos = e.time_nanos.to_native();
        let in_order = last.is_none_or(|(s, prev_end)| sequence > s && offset >= prev_end);
        if e.position.to_native() != position as u64
            || len == 0
            || end > covered
            || !in_order
            || nanos >= NANOS_PER_SEC
        {
            return Err(bad);
        }
        let event_type = *EVENT_TYPE_CODES.get(usize::from(e.event_type)).ok_or(bad)?;
        last = Some((sequence, end));
        entries.push(IndexEntry {
            sequence,
            time: Duration::new(e.time_secs.to_native(), nanos),
            session: e.session.as_ref().copied(),
            event_type,
            location: RecordLocation {
                chunk_id: header.chunk_id,
                position: position as u64,
                offset,
                len,
                sequence,
            },
        });
    }
    Ok(ChunkIndex {
        chunk_id: header.chunk_id,
        chunk_len: header.chunk_len,
        stream_id: archived.stream_id.as_str().to_owned(),
        ending,
        entries,
    })
}

#[cfg(test)]
mod tests;
