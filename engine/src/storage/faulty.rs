//! [`FaultyStorage`]: a [`Storage`] for tests that fails on purpose.
//!
//! It wraps a real [`FsStorage`] and counts every operation by kind ([`FaultOp`]). A test arms
//! faults by count: the Nth create, write, sync, rename or directory sync from now fails once,
//! or fails from then on until cleared, with `EIO` or `ENOSPC` ([`FaultKind`]); a write can
//! also be made short (a prefix reaches the file, then the error). It tracks how many bytes of
//! every file it created were synced, so [`FaultyStorage::crash`] can cut each file back to what
//! a power loss may leave: everything synced plus some prefix of what was not.
//!
//! The fault model, stated so tests inject only what it claims to survive:
//! - a failed write may leave any prefix of its bytes in the file;
//! - a failed sync loses every byte written since the last successful sync (the kernel may
//!   drop dirty pages it could not write back: retrying the sync would then "succeed" without
//!   them), so the file is cut back to its synced length at once; or, armed with
//!   [`FaultyStorage::fail_sync_nth`] and [`SyncFailure::DataKept`], it reports the error with every byte on
//!   disk all the same (an error from other pages' writeback, or one reported late), so what a
//!   caller was told failed is read back by the next open;
//! - a crash keeps, per file, the synced bytes and a prefix of the rest; directory entries are
//!   assumed durable once the operation returned (the writer syncs directories anyway).

use std::sync::{Arc, Mutex, MutexGuard};

use super::fs::FsStorage;
use super::{Area, DirEntry, FileName, ReadFile, Replace, Storage, StorageError, WriteFile};

/// An operation [`FaultyStorage`] counts and can fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultOp {
    /// [`Storage::create_new`].
    Create,
    /// [`WriteFile::append`].
    Write,
    /// [`WriteFile::sync`] and [`Storage::sync_file`].
    Sync,
    /// [`Storage::rename`].
    Rename,
    /// [`Storage::sync_dir`].
    SyncDir,
}

impl FaultOp {
    const ALL: [FaultOp; 5] = [
        FaultOp::Create,
        FaultOp::Write,
        FaultOp::Sync,
        FaultOp::Rename,
        FaultOp::SyncDir,
    ];

    const fn index(self) -> usize {
        match self {
            FaultOp::Create => 0,
            FaultOp::Write => 1,
            FaultOp::Sync => 2,
            FaultOp::Rename => 3,
            FaultOp::SyncDir => 4,
        }
    }
}

/// The error an armed fault returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// `EIO`: the device failed.
    Eio,
    /// `ENOSPC`: the filesystem is full.
    NoSpace,
}

impl FaultKind {
    fn error(self) -> StorageError {
        match self {
            FaultKind::Eio => StorageError::from(rustix::io::Errno::IO),
            FaultKind::NoSpace => StorageError::NoSpace,
        }
    }
}

/// What a failed sync leaves of the bytes it covered (the module doc's fault model).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SyncFailure {
    /// Gone: the file is cut back to its synced length (what `fail_nth` of a sync does).
    DataLost,
    /// On disk all the same: the next open reads what the caller was told failed.
    DataKept,
}

impl SyncFailure {
    /// Both kinds, for tests that must survive either.
    pub const ALL: [SyncFailure; 2] = [SyncFailure::DataLost, SyncFailure::DataKept];
}

/// One armed fault.
#[derive(Debug, Clone, Copy)]
struct Armed {
    /// Which operation it fails.
    op: FaultOp,
    /// The value of that operation's counter at which it fires (1-based).
    at: u64,
    /// The error it returns.
    kind: FaultKind,
    /// Fires on every later operation of its kind too, until cleared.
    sticky: bool,
    /// For a write: how many of its bytes reach the file before the error.
    short_write_bytes: Option<u64>,
    /// For a sync: its bytes are durable although it reports the error.
    keeps_data: bool,
    /// Only an operation on a file (or directory) in this area fires it: the first one at or
    /// after `at` ([`FaultyStorage::fail_next_sync_in`]).
    area: Option<Area>,
}

/// A file created through this storage, for the crash model.
#[derive(Debug, Clone)]
struct Tracked {
    /// Where it is now (renames follow it).
    area: Area,
    /// Its name now.
    name: FileName,
    /// Bytes appended (as far as this storage knows: a short write counts its prefix).
    written_bytes: u64,
    /// Bytes covered by the last successful sync.
    synced_bytes: u64,
    /// The most bytes the file ever held: an append that starts below it writes a position a
    /// second time (under a chunk's key and nonce prefix, a nonce reused).
    peak_bytes: u64,
    /// False once removed.
    live: bool,
}

/// A rename into an area held in place until the test lets it go
/// ([`FaultyStorage::hold_next_rename_into`]): what a slow disk does to a file being put into
/// place while other work goes on.
#[derive(Debug)]
pub struct HeldRename {
    /// Tells the test the rename was reached (and is waiting).
    reached: std::sync::mpsc::Receiver<()>,
    /// Dropping it lets the rename go on.
    release: Option<std::sync::mpsc::Sender<()>>,
}

impl HeldRename {
    /// Waits at most `timeout` for the held rename to be reached; whether it was.
    pub fn wait_reached(&self, timeout: std::time::Duration) -> bool {
        self.reached.recv_timeout(timeout).is_ok()
    }

    /// Lets the rename go on (dropping the hold does too).
    pub fn release(mut self) {
        self.release.take();
    }
}

/// The storage's side of a [`HeldRename`].
#[derive(Debug)]
struct Hold {
    /// The area the held rename moves a file into.
    into: Area,
    /// Tells the test it was reached.
    reached: std::sync::mpsc::Sender<()>,
    /// Returns (a message or the sender dropped) once the test lets it go.
    released: std::sync::mpsc::Receiver<()>,
}

/// Shared state of a [`FaultyStorage`] and the files it handed out.
#[derive(Debug, Default)]
struct State {
    /// Operations attempted so far, by [`FaultOp::index`].
    counts: [u64; FaultOp::ALL.len()],
    /// Faults waiting to fire (and sticky ones that keep firing).
    armed: Vec<Armed>,
    /// Faults that fired.
    injected: u64,
    /// Every file created, by creation order.
    files: Vec<Tracked>,
    /// Appends that started below bytes their file once held.
    rewrites: u64,
    /// Renames to hold when they come.
    holds: Vec<Hold>,
}

impl State {
    /// Counts one `op` on `area` and returns the fault that fires on it, if any.
    fn tick(&mut self, op: FaultOp, area: Area) -> Option<Armed> {
        let count = &mut self.counts[op.index()];
        *count += 1;
        let now = *count;
        let position = self.armed.iter().position(|a| {
            a.op == op
                && match a.area {
                    Some(only) => only == area && a.at <= now,
                    None => a.at == now || (a.sticky && a.at <= now),
                }
        })?;
        let fault = self.armed[position];
        if !fault.sticky {
            self.armed.remove(position);
        }
        self.injected += 1;
        Some(fault)
    }
}

/// A [`Storage`] that injects faults (see the module doc). Clones share one state, so a test
/// keeps a clone to arm faults while the writer uses another.
#[derive(Debug, Clone)]
pub struct FaultyStorage {
    /// The real storage underneath.
    inner: Arc<FsStorage>,
    /// Counters, armed faults and tracked files.
    state: Arc<Mutex<State>>,
}

impl FaultyStorage {
    /// Wraps `inner` with no fault armed.
    pub fn new(inner: FsStorage) -> Self {
        Self {
            inner: Arc::new(inner),
            state: Arc::default(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// [`State::tick`] for an operation on the file created `index`th (its area as it is now).
    fn tick_on_file(&self, op: FaultOp, index: usize) -> Option<Armed> {
        let mut state = self.state();
        let area = state.files.get(index).map_or(Area::Tmp, |f| f.area);
        state.tick(op, area)
    }

    fn arm(&self, op: FaultOp, nth: u64, kind: FaultKind, sticky: bool, short: Option<u64>) {
        self.arm_with(Armed {
            op,
            at: nth,
            kind,
            sticky,
            short_write_bytes: short,
            keeps_data: false,
            area: None,
        });
    }

    /// Arms `fault`, its `at` counted from now.
    fn arm_with(&self, mut fault: Armed) {
        let mut state = self.state();
        fault.at = state.counts[fault.op.index()] + fault.at.max(1);
        state.armed.push(fault);
    }

    /// The `nth` (1 = the next) `op` from now fails once with `kind`.
    pub fn fail_nth(&self, op: FaultOp, nth: u64, kind: FaultKind) {
        self.arm(op, nth, kind, false, None);
    }

    /// From the `nth` `op` from now on, every `op` fails with `kind` until
    /// [`Self::clear_faults`] (a full disk that stays full).
    pub fn fail_from_nth(&self, op: FaultOp, nth: u64, kind: FaultKind) {
        self.arm(op, nth, kind, true, None);
    }

    /// The `nth` sync from now fails once with `EIO`, losing what it covered or keeping it
    /// on disk as `failure` says ([`SyncFailure`]).
    pub fn fail_sync_nth(&self, nth: u64, failure: SyncFailure) {
        self.arm_with(Armed {
            op: FaultOp::Sync,
            at: nth,
            kind: FaultKind::Eio,
            sticky: false,
            short_write_bytes: None,
            keeps_data: failure == SyncFailure::DataKept,
            area: None,
        });
    }

    /// The next sync of a file in `area` fails once with `EIO`, as `failure` says; syncs
    /// elsewhere (another stream's group commit) pass it by.
    pub fn fail_next_sync_in(&self, area: Area, failure: SyncFailure) {
        self.arm_with(Armed {
            op: FaultOp::Sync,
            at: 1,
            kind: FaultKind::Eio,
            sticky: false,
            short_write_bytes: None,
            keeps_data: failure == SyncFailure::DataKept,
            area: Some(area),
        });
    }

    /// The `nth` write from now puts only its first `keep_bytes` bytes into the file, then
    /// fails with `kind`.
    pub fn short_write_nth(&self, nth: u64, keep_bytes: u64, kind: FaultKind) {
        self.arm(FaultOp::Write, nth, kind, false, Some(keep_bytes));
    }

    /// The next rename into `into` waits, once reached, until the returned hold is released
    /// or dropped (the operation then goes on as usual).
    pub fn hold_next_rename_into(&self, into: Area) -> HeldRename {
        let (reached_tx, reached) = std::sync::mpsc::channel();
        let (release, released) = std::sync::mpsc::channel();
        self.state().holds.push(Hold {
            into,
            reached: reached_tx,
            released,
        });
        HeldRename {
            reached,
            release: Some(release),
        }
    }

    /// Disarms every fault (the disk has space again, the device recovered).
    pub fn clear_faults(&self) {
        self.state().armed.clear();
    }

    /// How many `op`s were attempted so far.
    pub fn count(&self, op: FaultOp) -> u64 {
        self.state().counts[op.index()]
    }

    /// How many faults fired so far.
    pub fn injected(&self) -> u64 {
        self.state().injected
    }

    /// How many appends started below the length their file once had: a byte position written
    /// twice. The writer abandons a chunk after any failure, so this must stay 0 (a record
    /// position written twice under one chunk key and IV would reuse a nonce).
    pub fn rewrites(&self) -> u64 {
        self.state().rewrites
    }

    /// Simulates a power loss: every file this storage created is cut back to its synced bytes
    /// plus `keep(unsynced_len)` of the rest (clamped to what was written). The caller then
    /// drops every writer and reopens the store, as a restarted process would.
    pub fn crash(&self, keep: &mut dyn FnMut(u64) -> u64) -> Result<(), StorageError> {
        let files = self.state().files.clone();
        let mut cut = Vec::with_capacity(files.len());
        for (index, file) in files.iter().enumerate().filter(|(_, f)| f.live) {
            let unsynced = file.written_bytes.saturating_sub(file.synced_bytes);
            let kept_len = file.synced_bytes + keep(unsynced).min(unsynced);
            self.inner.truncate(file.area, &file.name, kept_len)?;
            cut.push((index, kept_len));
        }
        let mut state = self.state();
        for (index, kept_len) in cut {
            if let Some(file) = state.files.get_mut(index) {
                file.written_bytes = kept_len;
                file.synced_bytes = kept_len;
            }
        }
        Ok(())
    }
}

impl FaultyStorage {
    /// Records `len` bytes appended to file `index`, and whether they rewrote held bytes.
    fn note_append(&self, index: usize, len: u64) {
        let mut state = self.state();
        let Some(file) = state.files.get_mut(index) else {
            return;
        };
        let rewrote = len > 0 && file.written_bytes < file.peak_bytes;
        file.written_bytes += len;
        file.peak_bytes = file.peak_bytes.max(file.written_bytes);
        if rewrote {
            state.rewrites += 1;
        }
    }
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Storage for FaultyStorage {
    fn writable(&self) -> bool {
        self.inner.writable()
    }

    fn has_area(&self, area: Area) -> bool {
        self.inner.has_area(area)
    }

    fn create_new(&self, area: Area, name: &FileName) -> Result<Box<dyn WriteFile>, StorageError> {
        if let Some(fault) = self.state().tick(FaultOp::Create, area) {
            return Err(fault.kind.error());
        }
        let inner = self.inner.create_new(area, name)?;
        let mut state = self.state();
        state.files.push(Tracked {
            area,
            name: name.clone(),
            written_bytes: 0,
            synced_bytes: 0,
            peak_bytes: 0,
            live: true,
        });
        let index = state.files.len() - 1;
        Ok(Box::new(FaultyFile {
            inner,
            storage: self.clone(),
            index,
        }))
    }

    fn open_read(&self, area: Area, name: &FileName) -> Result<Box<dyn ReadFile>, StorageError> {
        self.inner.open_read(area, name)
    }

    fn rename(
        &self,
        from: Area,
        from_name: &FileName,
        to: Area,
        to_name: &FileName,
        replace: Replace,
    ) -> Result<(), StorageError> {
        if let Some(fault) = self.state().tick(FaultOp::Rename, to) {
            return Err(fault.kind.error());
        }
        let hold = {
            let mut state = self.state();
            let at = state.holds.iter().position(|h| h.into == to);
            at.map(|at| state.holds.remove(at))
        };
        if let Some(hold) = hold {
            // Waited for outside the state's lock: other operations go on meanwhile.
            let _ = hold.reached.send(());
            let _ = hold.released.recv();
        }
        self.inner.rename(from, from_name, to, to_name, replace)?;
        let mut state = self.state();
        for file in state.files.iter_mut().filter(|f| f.live) {
            if file.area == to && file.name == *to_name {
                file.live = false;
            }
        }
        for file in state.files.iter_mut().filter(|f| f.live) {
            if file.area == from && file.name == *from_name {
                file.area = to;
                file.name = to_name.clone();
            }
        }
        Ok(())
    }

    fn sync_dir(&self, area: Area) -> Result<(), StorageError> {
        if let Some(fault) = self.state().tick(FaultOp::SyncDir, area) {
            return Err(fault.kind.error());
        }
        self.inner.sync_dir(area)
    }

    fn sync_file(&self, area: Area, name: &FileName) -> Result<(), StorageError> {
        if let Some(fault) = self.state().tick(FaultOp::Sync, area) {
            return Err(fault.kind.error());
        }
        self.inner.sync_file(area, name)?;
        // Everything written to it is durable now: a later crash keeps it.
        for file in self.state().files.iter_mut() {
            if file.live && file.area == area && file.name == *name {
                file.synced_bytes = file.written_bytes;
            }
        }
        Ok(())
    }

    fn list(&self, area: Area) -> Result<Vec<DirEntry>, StorageError> {
        self.inner.list(area)
    }

    fn remove(&self, area: Area, name: &FileName) -> Result<(), StorageError> {
        self.inner.remove(area, name)?;
        for file in self.state().files.iter_mut() {
            if file.live && file.area == area && file.name == *name {
                file.live = false;
            }
        }
        Ok(())
    }
}

/// A file created through a [`FaultyStorage`].
#[derive(Debug)]
struct FaultyFile {
    /// The real file.
    inner: Box<dyn WriteFile>,
    /// The storage that made it (its state tracks this file).
    storage: FaultyStorage,
    /// This file's entry in `State::files`.
    index: usize,
}

impl WriteFile for FaultyFile {
    fn append(&mut self, bytes: &[u8]) -> Result<(), StorageError> {
        let fault = self.storage.tick_on_file(FaultOp::Write, self.index);
        let Some(fault) = fault else {
            self.inner.append(bytes)?;
            self.storage.note_append(self.index, bytes.len() as u64);
            return Ok(());
        };
        if let Some(keep) = fault.short_write_bytes {
            let keep = usize::try_from(keep).unwrap_or(usize::MAX).min(bytes.len());
            self.inner.append(&bytes[..keep])?;
            self.storage.note_append(self.index, keep as u64);
        }
        Err(fault.kind.error())
    }

    fn sync(&mut self) -> Result<(), StorageError> {
        let fault = self.storage.tick_on_file(FaultOp::Sync, self.index);
        if let Some(fault) = fault.filter(|f| !f.keeps_data) {
            // The page-cache-dropped case: what was not synced is gone.
            let tracked = self.storage.state().files.get(self.index).cloned();
            if let Some(file) = tracked.filter(|f| f.live) {
                self.storage
                    .inner
                    .truncate(file.area, &file.name, file.synced_bytes)?;
                if let Some(file) = self.storage.state().files.get_mut(self.index) {
                    file.written_bytes = file.synced_bytes;
                }
            }
            return Err(fault.kind.error());
        }
        self.inner.sync()?;
        if let Some(file) = self.storage.state().files.get_mut(self.index) {
            file.synced_bytes = file.written_bytes;
        }
        // A fault that keeps the data reports its error with every byte durable.
        fault.map_or(Ok(()), |fault| Err(fault.kind.error()))
    }
}
