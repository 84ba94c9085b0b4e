//! The store-wide reader: lists chunks, classifies each, and merges their events into one
//! sequence order. Read-only: it opens nothing for writing and takes no lock, so it can run
//! beside a live writer and is what `annal inspect` uses.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use super::{
    CHUNK_FILE_EXTENSION, CHUNKS_DIR_NAME, MAX_CHUNK_FILE_BYTES, OpenStoreError, StoreKind,
    check_store_root, fsutil,
};
use crate::keys::ChunkKeys;
use crate::profile::{ChunkId, ChunkVerdict, CorruptReason, ParsedHeader, Record, read_chunk};

/// A store opened for reading.
#[derive(Debug, Clone)]
pub struct StoreReader {
    /// The store root.
    root: PathBuf,
    /// Which marker the root carries.
    kind: StoreKind,
}

/// Reading the store failed before any verdict could be given.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadStoreError {
    /// A managed entry (the chunks directory or a chunk file) is a symbolic link.
    #[error("{} is a symbolic link; refusing to follow it", path.display())]
    Symlink {
        /// The offending path.
        path: PathBuf,
    },
    /// A chunk file is larger than [`MAX_CHUNK_FILE_BYTES`].
    #[error("{} is {len_bytes} bytes, above the chunk read limit", path.display())]
    ChunkTooLarge {
        /// The chunk file.
        path: PathBuf,
        /// Its length.
        len_bytes: u64,
    },
    /// A filesystem call failed.
    #[error("{operation} {}: {source}", path.display())]
    Io {
        /// What was being done.
        operation: &'static str,
        /// On which path.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

/// One chunk file and its verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkReport {
    /// The file name inside `chunks/`.
    pub file_name: String,
    /// Its header, when the header parsed.
    pub header: Option<ParsedHeader>,
    /// Its verdict.
    pub verdict: ChunkVerdict,
}

impl ChunkReport {
    /// `data.sequence` of the first valid record.
    pub fn first_sequence(&self) -> Option<u64> {
        self.verdict.records().first().map(|r| r.sequence())
    }

    /// `data.sequence` of the last valid record.
    pub fn last_sequence(&self) -> Option<u64> {
        self.verdict.records().last().map(|r| r.sequence())
    }
}

/// Two chunks disagree about an event: a different event reuses a sequence number or an id.
/// This is corruption at store level even when each chunk is valid on its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SequenceConflict {
    /// The sequence number of the refused record.
    pub sequence: u64,
    /// The chunk whose record was accepted first.
    pub kept_file: String,
    /// The chunk whose record conflicts.
    pub conflicting_file: String,
}

/// Where an accepted event lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventLocation {
    /// Index into [`StoreReport::chunks`].
    pub chunk: usize,
    /// Index into that chunk's records.
    pub record: usize,
}

/// Everything the store holds, classified and merged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreReport {
    /// Every chunk: those with records ordered by first sequence, then the rest by file name.
    pub chunks: Vec<ChunkReport>,
    /// The accepted events, strictly increasing by `data.sequence`, duplicates removed.
    pub events: Vec<EventLocation>,
    /// Store-level conflicts between chunks.
    pub conflicts: Vec<SequenceConflict>,
    /// Every chunk holding records fails authentication at record 0: most likely the key is
    /// wrong rather than every chunk being tampered with.
    pub probable_wrong_key: bool,
}

impl StoreReport {
    /// The accepted records, in sequence order.
    pub fn records(&self) -> impl Iterator<Item = &Record> {
        self.events.iter().filter_map(|loc| {
            self.chunks
                .get(loc.chunk)?
                .verdict
                .records()
                .get(loc.record)
        })
    }

    /// Whether any chunk is corrupt or any conflict was found (queries must fail closed).
    pub fn has_corruption(&self) -> bool {
        !self.conflicts.is_empty()
            || self
                .chunks
                .iter()
                .any(|c| matches!(c.verdict, ChunkVerdict::Corrupt { .. }))
    }

    /// The highest accepted sequence number.
    pub fn last_sequence(&self) -> Option<u64> {
        self.records().last().map(|r| r.sequence())
    }
}

impl StoreReader {
    /// Opens `root` for reading after checking it is a real directory with a store marker.
    pub fn open(root: &Path) -> Result<Self, OpenStoreError> {
        let kind = check_store_root(root)?;
        Ok(Self {
            root: root.to_owned(),
            kind,
        })
    }

    /// Which marker the store carries.
    pub fn kind(&self) -> StoreKind {
        self.kind
    }

    /// The store root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Reads and classifies every chunk with `root_key` and merges the events.
    pub fn read(&self, root_key: &dyn ChunkKeys) -> Result<StoreReport, ReadStoreError> {
        let chunks_dir = self.root.join(CHUNKS_DIR_NAME);
        let mut reports = Vec::new();
        for file_name in list_chunk_files(&chunks_dir)? {
            let path = chunks_dir.join(&file_name);
            let bytes = match fsutil::read_bounded(&path, MAX_CHUNK_FILE_BYTES) {
                Ok(Ok(bytes)) => bytes,
                Ok(Err(len_bytes)) => {
                    return Err(ReadStoreError::ChunkTooLarge { path, len_bytes });
                }
                Err(e) if fsutil::is_symlink_refusal(&e) => {
                    return Err(ReadStoreError::Symlink { path });
                }
                Err(source) => {
                    return Err(ReadStoreError::Io {
                        operation: "read",
                        path,
                        source,
                    });
                }
            };
            let stem = file_name.trim_end_matches(CHUNK_FILE_EXTENSION);
            let report = match ChunkId::from_hex(stem) {
                Some(id) => {
                    let reading = read_chunk(&bytes, root_key, Some(id));
                    ChunkReport {
                        file_name,
                        header: reading.header,
                        verdict: reading.verdict,
                    }
                }
                None => ChunkReport {
                    file_name,
                    header: None,
                    verdict: ChunkVerdict::Corrupt {
                        record_index: None,
                        offset: 0,
                        reason: CorruptReason::ChunkIdMismatch,
                    },
                },
            };
            reports.push(report);
        }
        Ok(merge(reports))
    }
}

/// Names of the chunk files in `chunks_dir`, refusing symlinks. Temporary files (leading dot)
/// and other names are not chunks and are skipped. A missing directory holds no chunks.
pub(crate) fn list_chunk_files(chunks_dir: &Path) -> Result<Vec<String>, ReadStoreError> {
    let io = |operation, path: &Path| {
        let path = path.to_owned();
        move |source| ReadStoreError::Io {
            operation,
            path,
            source,
        }
    };
    match fsutil::lstat(chunks_dir) {
        Ok(meta) if meta.file_type().is_symlink() => {
            return Err(ReadStoreError::Symlink {
                path: chunks_dir.to_owned(),
            });
        }
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io("stat", chunks_dir)(e)),
    }
    let mut names = Vec::new();
    for entry in std::fs::read_dir(chunks_dir).map_err(io("list", chunks_dir))? {
        let entry = entry.map_err(io("list", chunks_dir))?;
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        if name.starts_with('.') || !name.ends_with(CHUNK_FILE_EXTENSION) {
            continue;
        }
        let file_type = entry.file_type().map_err(io("stat", &entry.path()))?;
        if file_type.is_symlink() {
            return Err(ReadStoreError::Symlink { path: entry.path() });
        }
        if file_type.is_file() {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

/// Orders chunks by first sequence and merges their records into one strictly increasing
/// sequence, dropping byte-identical duplicates and recording conflicts.
fn merge(mut chunks: Vec<ChunkReport>) -> StoreReport {
    chunks.sort_by(|a, b| {
        let key = |c: &ChunkReport| (c.first_sequence().is_none(), c.first_sequence());
        key(a)
            .cmp(&key(b))
            .then_with(|| a.file_name.cmp(&b.file_name))
    });
    let mut events: Vec<EventLocation> = Vec::new();
    let mut by_sequence: BTreeMap<u64, EventLocation> = BTreeMap::new();
    let mut by_identity: HashMap<(&str, &str), EventLocation> = HashMap::new();
    let mut conflicts = Vec::new();
    let mut last: Option<u64> = None;
    for (chunk_index, chunk) in chunks.iter().enumerate() {
        for (record_index, record) in chunk.verdict.records().iter().enumerate() {
            let here = EventLocation {
                chunk: chunk_index,
                record: record_index,
            };
            let sequence = record.sequence();
            let identity = (record.event.source.as_str(), record.event.id.as_str());
            let earlier = by_sequence
                .get(&sequence)
                .or_else(|| by_identity.get(&identity))
                .copied();
            if let Some(kept) = earlier {
                let kept_record = &chunks[kept.chunk].verdict.records()[kept.record];
                if kept_record.plaintext != record.plaintext {
                    conflicts.push(SequenceConflict {
                        sequence,
                        kept_file: chunks[kept.chunk].file_name.clone(),
                        conflicting_file: chunk.file_name.clone(),
                    });
                }
                continue;
            }
            if last.is_some_and(|l| sequence <= l) {
                // A new event whose sequence falls inside an earlier chunk's range: chunks
                // interleave, which one writer never produces.
                conflicts.push(SequenceConflict {
                    sequence,
                    kept_file: chunks[events.last().map_or(0, |e| e.chunk)]
                        .file_name
                        .clone(),
                    conflicting_file: chunk.file_name.clone(),
                });
                continue;
            }
            last = Some(sequence);
            by_sequence.insert(sequence, here);
            by_identity.insert(identity, here);
            events.push(here);
        }
    }
    let with_records: Vec<&ChunkReport> = chunks
        .iter()
        .filter(|c| match &c.verdict {
            ChunkVerdict::Complete { records } => !records.is_empty(),
            ChunkVerdict::TornTail { .. } => true,
            ChunkVerdict::Corrupt { record_index, .. } => record_index.is_some(),
        })
        .collect();
    let probable_wrong_key = !with_records.is_empty()
        && with_records.iter().all(|c| {
            matches!(
                c.verdict,
                ChunkVerdict::Corrupt {
                    record_index: Some(0),
                    reason: CorruptReason::AuthenticationFailed,
                    ..
                }
            )
        });
    StoreReport {
        chunks,
        events,
        conflicts,
        probable_wrong_key,
    }
}
