//! Creating a store and appending to it.
//!
//! A [`StoreWriter`] holds an exclusive `flock` on `writer.lock` for its whole life, so only one
//! writer appends at a time. Each writer generation writes to chunks it created itself (never to
//! an older chunk, never to a torn tail), so an IV can only repeat if one writer reused its own
//! position counter, which [`RecordSealer`] makes impossible. A chunk is created as a hidden
//! temporary file holding only the header, synced, then renamed into place without replacing
//! anything, and the directory is synced: a chunk file under its final name always has a
//! complete header.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::read::{ReadStoreError, StoreReader};
use super::{
    ANNAL_MARKER_CONTENTS, ANNAL_MARKER_FILE_NAME, CHUNK_FILE_EXTENSION, CHUNK_SIZE_LIMIT_BYTES,
    CHUNKS_DIR_NAME, DIR_MODE, OpenStoreError, WRITER_LOCK_FILE_NAME, check_store_root, fsutil,
};
use crate::entropy::{Entropy, EntropyError};
use crate::keys::ChunkKeys;
use crate::keys::material::CHUNK_ID_LEN_BYTES;
use crate::profile::{
    ChunkHeader, ChunkId, HeaderFieldError, MAX_PLAINTEXT_LEN_BYTES, MAX_RECORDS_PER_CHUNK,
    NONCE_PREFIX_LEN_BYTES, PlaintextFault, RecordSealer, SealError, TAG_LEN_BYTES,
    validate_plaintext,
};

/// Upper bound of a record's size beyond its plaintext, in bytes: the fixed framing before the
/// ciphertext (22), the ciphertext byte-string head (at most 5 for our sizes) and the tag.
const RECORD_OVERHEAD_MAX_BYTES: u64 = 22 + 5 + TAG_LEN_BYTES as u64;

/// Creating a store failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CreateStoreError {
    /// The root is a symbolic link.
    #[error("{} is a symbolic link; refusing to follow it", path.display())]
    Symlink {
        /// The root.
        path: PathBuf,
    },
    /// The root already holds a store.
    #[error("{} already holds a history store", path.display())]
    AlreadyExists {
        /// The root.
        path: PathBuf,
    },
    /// The root exists, is not empty and is not a store: annal does not adopt foreign
    /// directories.
    #[error("{} exists and is not empty", path.display())]
    NotEmpty {
        /// The root.
        path: PathBuf,
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

/// Creates an empty annal store at `root` (the root itself may exist if it is an empty
/// directory). Writes the ownership marker and `chunks/`, with modes 0700/0600, and syncs the
/// directories.
pub fn create_store(root: &Path) -> Result<(), CreateStoreError> {
    use std::os::unix::fs::DirBuilderExt;
    let io = |operation, path: &Path| {
        let path = path.to_owned();
        move |source| CreateStoreError::Io {
            operation,
            path,
            source,
        }
    };
    match fsutil::lstat(root) {
        Ok(meta) if meta.file_type().is_symlink() => {
            return Err(CreateStoreError::Symlink {
                path: root.to_owned(),
            });
        }
        Ok(_) => {
            if check_store_root(root).is_ok() {
                return Err(CreateStoreError::AlreadyExists {
                    path: root.to_owned(),
                });
            }
            if std::fs::read_dir(root)
                .map_err(io("list", root))?
                .next()
                .is_some()
            {
                return Err(CreateStoreError::NotEmpty {
                    path: root.to_owned(),
                });
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::DirBuilder::new()
                .mode(DIR_MODE)
                .create(root)
                .map_err(io("create directory", root))?;
            if let Some(parent) = root.parent().filter(|p| !p.as_os_str().is_empty()) {
                fsutil::fsync_dir(parent).map_err(io("sync directory", parent))?;
            }
        }
        Err(e) => return Err(io("stat", root)(e)),
    }
    let chunks = root.join(CHUNKS_DIR_NAME);
    std::fs::DirBuilder::new()
        .mode(DIR_MODE)
        .create(&chunks)
        .map_err(io("create directory", &chunks))?;
    let marker = root.join(ANNAL_MARKER_FILE_NAME);
    let mut file = fsutil::create_new(&marker).map_err(io("create", &marker))?;
    file.write_all(ANNAL_MARKER_CONTENTS)
        .and_then(|()| file.sync_all())
        .map_err(io("write", &marker))?;
    fsutil::fsync_dir(root).map_err(io("sync directory", root))?;
    Ok(())
}

/// What a writer generation writes into every chunk header, and its rotation limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriterConfig {
    /// The stream id (1..=128 bytes); part of every chunk key.
    pub stream_id: String,
    /// The credential-store name of the root key, recorded in every header.
    pub key_reference: String,
    /// The key epoch (> 0).
    pub key_epoch: u64,
    /// Rotate before a chunk would exceed this many bytes (at most [`CHUNK_SIZE_LIMIT_BYTES`]).
    /// A chunk always takes at least one record, so a single record larger than this limit
    /// gets a chunk of its own.
    pub chunk_size_limit_bytes: u64,
    /// Rotate before a chunk would hold more records (at most [`MAX_RECORDS_PER_CHUNK`]).
    pub max_records_per_chunk: u64,
}

impl WriterConfig {
    /// A configuration with the default limits.
    pub fn new(stream_id: &str, key_reference: &str, key_epoch: u64) -> Self {
        Self {
            stream_id: stream_id.to_owned(),
            key_reference: key_reference.to_owned(),
            key_epoch,
            chunk_size_limit_bytes: CHUNK_SIZE_LIMIT_BYTES,
            max_records_per_chunk: MAX_RECORDS_PER_CHUNK,
        }
    }
}

/// Opening a writer failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenWriterError {
    /// The root is not a usable store.
    #[error(transparent)]
    Store(#[from] OpenStoreError),
    /// Another writer holds `writer.lock`.
    #[error("another writer holds the store's writer lock")]
    Locked,
    /// The store root or `chunks/` is writable by group or others.
    #[error("{} is writable by group or others", path.display())]
    InsecurePermissions {
        /// The offending directory.
        path: PathBuf,
    },
    /// The writer configuration breaks the contract or the limits.
    #[error("invalid writer configuration: {0}")]
    Config(&'static str),
    /// Reading the existing chunks failed.
    #[error(transparent)]
    Read(#[from] ReadStoreError),
    /// Every chunk with records fails authentication at record 0: probably the wrong key.
    /// Writing with it would create chunks the right key cannot read.
    #[error(
        "every existing chunk fails authentication at its first record: probably the wrong key"
    )]
    ProbableWrongKey,
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

/// An append failed. Nothing of the batch was written unless `written_records` says so.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AppendError {
    /// Record `index` of the batch is not a valid v0 event (nothing was written).
    #[error("record {index} of the batch is not a valid history event")]
    InvalidEvent {
        /// Index in the batch.
        index: usize,
        /// What is wrong.
        fault: PlaintextFault,
    },
    /// Record `index` does not continue the strictly increasing sequence (nothing was written).
    #[error("record {index} has sequence {sequence}, not after {after}")]
    SequenceNotIncreasing {
        /// Index in the batch.
        index: usize,
        /// Its sequence.
        sequence: u64,
        /// The last sequence already in the store or earlier in the batch.
        after: u64,
    },
    /// Record `index` is larger than a record may be (nothing was written).
    #[error("record {index} of the batch is {len_bytes} bytes, above the plaintext limit")]
    TooLarge {
        /// Index in the batch.
        index: usize,
        /// Its length.
        len_bytes: usize,
    },
    /// Sealing failed.
    #[error("sealing a record: {0}")]
    Seal(#[from] SealError),
    /// The random source failed while creating a chunk.
    #[error(transparent)]
    Entropy(#[from] EntropyError),
    /// A filesystem call failed. The first `written_records` records of the batch reached the
    /// file; the chunk being written is abandoned and the next append starts a new one.
    #[error("{operation} {}: {source} ({written_records} records written)", path.display())]
    Io {
        /// What was being done.
        operation: &'static str,
        /// On which path.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
        /// How many records of the batch were written before the failure.
        written_records: usize,
    },
}

/// What an append did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendReceipt {
    /// Records written.
    pub records: usize,
    /// Chunk files created by this append (rotation).
    pub chunks_created: usize,
    /// The last sequence now in the store.
    pub last_sequence: Option<u64>,
}

/// The chunk the writer is appending to.
struct OpenChunk {
    /// The file, opened for appending; this writer generation created it.
    file: File,
    /// Its path, for errors.
    path: PathBuf,
    /// Encrypts the next records of this chunk; owns the position counter.
    sealer: RecordSealer,
    /// Current file length in bytes.
    len_bytes: u64,
}

/// The single writer of a store.
pub struct StoreWriter {
    /// The store root.
    root: PathBuf,
    /// `writer.lock`, holding the exclusive flock until drop.
    _lock: File,
    /// Derives the key of each chunk this writer creates (the engine passes its key custody).
    root_key: Arc<dyn ChunkKeys + Send + Sync>,
    /// Header fields and limits.
    config: WriterConfig,
    /// Highest sequence in the store (from the existing chunks, then from appends).
    last_sequence: Option<u64>,
    /// The chunk being appended to; `None` before the first append of this generation and
    /// after a write failure (the failed chunk is never appended to again).
    current: Option<OpenChunk>,
}

impl std::fmt::Debug for StoreWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreWriter")
            .field("root", &self.root)
            .field("last_sequence", &self.last_sequence)
            .finish_non_exhaustive()
    }
}

fn group_or_other_writable(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::PermissionsExt;
    meta.permissions().mode() & 0o022 != 0
}

impl StoreWriter {
    /// Opens the writer of the store at `root`: takes the writer lock (failing fast if another
    /// writer holds it) and reads the existing chunks to learn the last sequence.
    pub fn open(
        root: &Path,
        root_key: Arc<dyn ChunkKeys + Send + Sync>,
        config: WriterConfig,
    ) -> Result<Self, OpenWriterError> {
        if config.chunk_size_limit_bytes > CHUNK_SIZE_LIMIT_BYTES
            || config.max_records_per_chunk > MAX_RECORDS_PER_CHUNK
            || config.max_records_per_chunk == 0
        {
            return Err(OpenWriterError::Config("limits above the profile limits"));
        }
        if let Err(e) = ChunkHeader::new(
            config.key_epoch,
            &config.key_reference,
            &config.stream_id,
            ChunkId([0; CHUNK_ID_LEN_BYTES]),
            [0; NONCE_PREFIX_LEN_BYTES],
        ) {
            return Err(OpenWriterError::Config(match e {
                HeaderFieldError::ZeroEpoch => "key epoch must be > 0",
                HeaderFieldError::KeyReferenceLength => "key reference must be 1..=128 bytes",
                HeaderFieldError::StreamIdLength => "stream id must be 1..=128 bytes",
                _ => "header fields",
            }));
        }
        check_store_root(root)?;
        let io = open_writer_io;
        let chunks = root.join(CHUNKS_DIR_NAME);
        for dir in [root, chunks.as_path()] {
            let meta = fsutil::lstat(dir).map_err(io("stat", dir))?;
            if meta.file_type().is_symlink() {
                return Err(OpenStoreError::Symlink {
                    path: dir.to_owned(),
                }
                .into());
            }
            if group_or_other_writable(&meta) {
                return Err(OpenWriterError::InsecurePermissions {
                    path: dir.to_owned(),
                });
            }
        }
        let lock_path = root.join(WRITER_LOCK_FILE_NAME);
        let lock = match fsutil::try_lock_exclusive(&lock_path) {
            Ok(Some(lock)) => lock,
            Ok(None) => return Err(OpenWriterError::Locked),
            Err(e) if fsutil::is_symlink_refusal(&e) => {
                return Err(OpenStoreError::Symlink { path: lock_path }.into());
            }
            Err(e) => return Err(open_writer_io("lock", &lock_path)(e)),
        };
        remove_abandoned_temp_chunks(&chunks)?;
        let report = StoreReader::open(root)?.read(root_key.as_ref())?;
        if report.probable_wrong_key {
            return Err(OpenWriterError::ProbableWrongKey);
        }
        Ok(Self {
            root: root.to_owned(),
            _lock: lock,
            root_key,
            config,
            last_sequence: report.last_sequence(),
            current: None,
        })
    }

    /// The highest sequence in the store.
    pub fn last_sequence(&self) -> Option<u64> {
        self.last_sequence
    }

    /// Appends a batch of plaintexts (compact CloudEvents JSON, `data.sequence` strictly
    /// increasing after [`Self::last_sequence`]). The whole batch is validated before anything is
    /// written; then each chunk touched gets exactly one `write`. Creates a chunk on the first
    /// append of this generation and rotates at the size and record limits. Not synced: call
    /// [`Self::sync`] to make it durable (group commit).
    pub fn append(
        &mut self,
        plaintexts: &[&[u8]],
        entropy: &mut dyn Entropy,
    ) -> Result<AppendReceipt, AppendError> {
        let mut after = self.last_sequence;
        let mut sequences = Vec::with_capacity(plaintexts.len());
        for (index, plaintext) in plaintexts.iter().enumerate() {
            if plaintext.len() > MAX_PLAINTEXT_LEN_BYTES {
                return Err(AppendError::TooLarge {
                    index,
                    len_bytes: plaintext.len(),
                });
            }
            let event = validate_plaintext(plaintext)
                .map_err(|fault| AppendError::InvalidEvent { index, fault })?;
            if let Some(last) = after
                && event.data.sequence.get() <= last
            {
                return Err(AppendError::SequenceNotIncreasing {
                    index,
                    sequence: event.data.sequence.get(),
                    after: last,
                });
            }
            after = Some(event.data.sequence.get());
            sequences.push(event.data.sequence.get());
        }
        match self.write_batch(plaintexts, entropy) {
            Ok((written, chunks_created)) => {
                assert_eq!(
                    written,
                    plaintexts.len(),
                    "a successful append writes every record"
                );
                self.last_sequence = after;
                Ok(AppendReceipt {
                    records: written,
                    chunks_created,
                    last_sequence: self.last_sequence,
                })
            }
            Err(e) => {
                if let AppendError::Io {
                    written_records, ..
                } = &e
                    && let Some(last) = written_records.checked_sub(1)
                {
                    self.last_sequence = sequences.get(last).copied().or(self.last_sequence);
                }
                Err(e)
            }
        }
    }

    /// Seals and writes an already validated batch; returns (records written, chunks created).
    fn write_batch(
        &mut self,
        plaintexts: &[&[u8]],
        entropy: &mut dyn Entropy,
    ) -> Result<(usize, usize), AppendError> {
        let mut buffer = Vec::new();
        let mut written = 0usize;
        let mut pending = 0usize;
        let mut chunks_created = 0usize;
        for plaintext in plaintexts {
            let bound = plaintext.len() as u64 + RECORD_OVERHEAD_MAX_BYTES;
            let fits = self.current.as_ref().is_some_and(|c| {
                c.sealer.next_position() < self.config.max_records_per_chunk
                    && c.len_bytes + buffer.len() as u64 + bound
                        <= self.config.chunk_size_limit_bytes
            });
            if !fits {
                self.flush_buffer(&mut buffer, &mut written, &mut pending)?;
                self.rotate(entropy, written)?;
                chunks_created += 1;
            }
            let Some(current) = self.current.as_mut() else {
                // `rotate` always leaves a current chunk or returns an error.
                return Err(AppendError::Seal(SealError::ChunkFull));
            };
            let record = current.sealer.seal(plaintext)?;
            assert!(
                record.len() as u64 <= bound,
                "record exceeds its size bound"
            );
            buffer.extend_from_slice(&record);
            pending += 1;
        }
        self.flush_buffer(&mut buffer, &mut written, &mut pending)?;
        Ok((written, chunks_created))
    }

    /// Writes the buffered records of the current chunk with one `write_all`.
    fn flush_buffer(
        &mut self,
        buffer: &mut Vec<u8>,
        written: &mut usize,
        pending: &mut usize,
    ) -> Result<(), AppendError> {
        if buffer.is_empty() {
            return Ok(());
        }
        let Some(current) = self.current.as_mut() else {
            return Ok(());
        };
        if let Err(source) = current.file.write_all(buffer) {
            let path = current.path.clone();
            // Never append to a chunk whose length is now unknown.
            self.current = None;
            return Err(AppendError::Io {
                operation: "write",
                path,
                source,
                written_records: *written,
            });
        }
        current.len_bytes += buffer.len() as u64;
        assert!(
            current.len_bytes <= CHUNK_SIZE_LIMIT_BYTES,
            "chunk exceeds CHUNK_SIZE_LIMIT_BYTES"
        );
        *written += *pending;
        *pending = 0;
        buffer.clear();
        Ok(())
    }

    /// Makes every appended record durable (`fdatasync` of the current chunk; earlier chunks
    /// were synced when the writer rotated away from them).
    pub fn sync(&mut self) -> Result<(), AppendError> {
        if let Some(current) = self.current.as_mut()
            && let Err(source) = current.file.sync_data()
        {
            let path = current.path.clone();
            self.current = None;
            return Err(AppendError::Io {
                operation: "sync",
                path,
                source,
                written_records: 0,
            });
        }
        Ok(())
    }

    /// Closes the current chunk (synced) and creates a new one: random id and nonce prefix,
    /// header written to a hidden temporary file, synced, renamed into place without replacing
    /// anything, directory synced.
    fn rotate(&mut self, entropy: &mut dyn Entropy, written: usize) -> Result<(), AppendError> {
        let io = |operation, path: &Path| {
            let path = path.to_owned();
            move |source| AppendError::Io {
                operation,
                path,
                source,
                written_records: written,
            }
        };
        if let Some(old) = self.current.take() {
            old.file.sync_data().map_err(io("sync", &old.path))?;
        }
        let mut id = [0u8; CHUNK_ID_LEN_BYTES];
        entropy.fill(&mut id)?;
        let mut prefix = [0u8; NONCE_PREFIX_LEN_BYTES];
        entropy.fill(&mut prefix)?;
        let chunk_id = ChunkId(id);
        let header = ChunkHeader::new(
            self.config.key_epoch,
            &self.config.key_reference,
            &self.config.stream_id,
            chunk_id,
            prefix,
        )
        .map_err(SealError::from)?;
        let sealer = RecordSealer::new(self.root_key.as_ref(), &header)?;
        let dir = self.root.join(CHUNKS_DIR_NAME);
        let name = format!("{}{CHUNK_FILE_EXTENSION}", chunk_id.to_hex());
        let tmp_name = format!(".{name}.tmp");
        let tmp_path = dir.join(&tmp_name);
        let path = dir.join(&name);
        let mut file = fsutil::create_new(&tmp_path).map_err(io("create", &tmp_path))?;
        file.write_all(sealer.header_bytes())
            .and_then(|()| file.sync_all())
            .map_err(io("write", &tmp_path))?;
        let dir_file = fsutil::open_dir(&dir).map_err(io("open", &dir))?;
        rustix::fs::renameat_with(
            &dir_file,
            tmp_name.as_str(),
            &dir_file,
            name.as_str(),
            rustix::fs::RenameFlags::NOREPLACE,
        )
        .map_err(|e| io("rename", &path)(e.into()))?;
        dir_file.sync_all().map_err(io("sync directory", &dir))?;
        self.current = Some(OpenChunk {
            file,
            path,
            len_bytes: sealer.header_bytes().len() as u64,
            sealer,
        });
        Ok(())
    }
}

/// The [`OpenWriterError::Io`] of `operation` on `path`.
fn open_writer_io(
    operation: &'static str,
    path: &Path,
) -> impl FnOnce(std::io::Error) -> OpenWriterError {
    let path = path.to_owned();
    move |source| OpenWriterError::Io {
        operation,
        path,
        source,
    }
}

/// Removes the hidden temporary files of chunk creations that a crashed writer left behind
/// (`.<chunk id>.cborseq.tmp`). Safe only under the writer lock: no live writer can be creating
/// one. Such a file was never renamed into place, so no reader ever returned its records. Only
/// names of exactly that shape are touched.
fn remove_abandoned_temp_chunks(chunks: &Path) -> Result<(), OpenWriterError> {
    let io = open_writer_io;
    let mut removed = false;
    for entry in std::fs::read_dir(chunks).map_err(io("list", chunks))? {
        let entry = entry.map_err(io("list", chunks))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let is_abandoned_temp = name
            .strip_prefix('.')
            .and_then(|n| n.strip_suffix(".tmp"))
            .and_then(|n| n.strip_suffix(CHUNK_FILE_EXTENSION))
            .and_then(ChunkId::from_hex)
            .is_some();
        if is_abandoned_temp && entry.file_type().map_err(io("stat", chunks))?.is_file() {
            let path = entry.path();
            std::fs::remove_file(&path).map_err(io("remove", &path))?;
            removed = true;
        }
    }
    if removed {
        fsutil::fsync_dir(chunks).map_err(io("sync directory", chunks))?;
    }
    Ok(())
}
