//! The checkpoint: the newest seal's ordinal and digest, kept outside the store directory (in
//! the credential store beside the key), so a directory replaced with an older copy of itself
//! is noticed by `verify` (`rolled_back`).
//!
//! Order of writes: the seal first (durable), then the checkpoint. A crash in between leaves the
//! checkpoint one seal behind, which `verify` accepts (the seal at the checkpoint's ordinal is
//! still there with the checkpoint's digest); the reverse order would make a crash look like a
//! rollback.
//!
//! Backing: [`InMemoryCheckpoints`] for tests and embedders that keep it themselves. A store over
//! the engine's `KeyProvider` credential stores needs a second credential per namespace (the
//! provider trait holds root keys only today); that is the next step, and it implements
//! [`CheckpointStore`] unchanged.

use std::sync::Mutex;

use super::{DIGEST_LEN_BYTES, Seal};

/// The newest seal as the checkpoint remembers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Checkpoint {
    /// The seal's ordinal.
    pub ordinal: u64,
    /// The seal's [`Seal::digest`].
    pub digest: [u8; DIGEST_LEN_BYTES],
}

impl Checkpoint {
    /// The checkpoint of `seal`.
    pub fn of(seal: &Seal) -> Self {
        Self {
            ordinal: seal.ordinal,
            digest: seal.digest(),
        }
    }
}

/// The checkpoint could not be loaded or stored.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckpointError {
    /// The backing store failed (its detail is not carried: it may name credentials).
    #[error("the checkpoint store is unavailable")]
    Unavailable,
    /// The checkpoint offered is older than the one held: it never goes backwards.
    #[error("refusing to move the checkpoint back from ordinal {held} to {offered}")]
    WouldGoBack {
        /// The ordinal held.
        held: u64,
        /// The ordinal offered.
        offered: u64,
    },
}

/// Where the checkpoint is kept. `store` never moves it backwards.
pub trait CheckpointStore: Send + Sync {
    /// The checkpoint, if one was ever stored.
    fn load(&self) -> Result<Option<Checkpoint>, CheckpointError>;

    /// Replaces the checkpoint with `checkpoint`; refuses one with a lower ordinal than the one
    /// held ([`CheckpointError::WouldGoBack`]). The same ordinal again is accepted (a retry).
    fn store(&self, checkpoint: &Checkpoint) -> Result<(), CheckpointError>;
}

/// A checkpoint held in memory (tests, or an embedder that persists it itself).
#[derive(Debug, Default)]
pub struct InMemoryCheckpoints {
    /// The checkpoint held.
    held: Mutex<Option<Checkpoint>>,
}

impl InMemoryCheckpoints {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }
}

impl CheckpointStore for InMemoryCheckpoints {
    fn load(&self) -> Result<Option<Checkpoint>, CheckpointError> {
        self.held
            .lock()
            .map(|held| *held)
            .map_err(|_| CheckpointError::Unavailable)
    }

    fn store(&self, checkpoint: &Checkpoint) -> Result<(), CheckpointError> {
        let mut held = self.held.lock().map_err(|_| CheckpointError::Unavailable)?;
        if let Some(current) = held.as_ref()
            && checkpoint.ordinal < current.ordinal
        {
            return Err(CheckpointError::WouldGoBack {
                held: current.ordinal,
                offered: checkpoint.ordinal,
            });
        }
        *held = Some(*checkpoint);
        Ok(())
    }
}
