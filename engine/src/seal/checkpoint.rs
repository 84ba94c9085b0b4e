//! The checkpoint: the newest seal's ordinal and digest, kept outside the store directory (in
//! the credential store beside the key), so a directory replaced with an older copy of itself
//! is noticed by `verify` (`rolled_back`).
//!
//! Order of writes: the seal first (durable), then the checkpoint. A crash in between leaves the
//! checkpoint one seal behind, which `verify` accepts (the seal at the checkpoint's ordinal is
//! still there with the checkpoint's digest); the reverse order would make a crash look like a
//! rollback.
//!
//! Backing: [`CredentialCheckpoints`], one credential per store (named by the namespace and the
//! store's id, so two stores of one namespace never share one) beside the root keys in the
//! `KeyProvider` credential store (what the engine and `annal verify` use), and
//! [`InMemoryCheckpoints`] for tests and embedders that keep it themselves. Both apply one rule:
//! the checkpoint never moves to a lower ordinal, nor to another digest at the same ordinal.
//!
//! The credential's value is [`Checkpoint::encode`]: [`CHECKPOINT_ENCODED_LEN_BYTES`] bytes, the
//! version byte [`CHECKPOINT_FORMAT_VERSION`], the ordinal as a big-endian u64, the digest.
//! Anything else is refused as malformed, never overwritten (it may be a newer annal's).

use std::sync::Mutex;

use annal_schema::HealthCategory;

use super::{DIGEST_LEN_BYTES, Seal};
use crate::keys::{KeyError, KeyProvider, Namespace, StoreId};

/// The checkpoint encoding's version, its first byte.
pub const CHECKPOINT_FORMAT_VERSION: u8 = 1;

/// Length of an encoded checkpoint, in bytes: the version byte, the u64 ordinal, the digest.
pub const CHECKPOINT_ENCODED_LEN_BYTES: usize = 1 + ORDINAL_LEN_BYTES + DIGEST_LEN_BYTES;

/// Length of the encoded ordinal, in bytes.
const ORDINAL_LEN_BYTES: usize = 8;

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

    /// The stored form: version byte, big-endian ordinal, digest.
    pub fn encode(&self) -> [u8; CHECKPOINT_ENCODED_LEN_BYTES] {
        let mut out = [0u8; CHECKPOINT_ENCODED_LEN_BYTES];
        out[0] = CHECKPOINT_FORMAT_VERSION;
        out[1..1 + ORDINAL_LEN_BYTES].copy_from_slice(&self.ordinal.to_be_bytes());
        out[1 + ORDINAL_LEN_BYTES..].copy_from_slice(&self.digest);
        out
    }

    /// Parses a stored checkpoint: exactly one version-1 encoding with an ordinal of at least 1
    /// (seal ordinals start at 1). Anything else is [`CheckpointError::Malformed`].
    pub fn decode(bytes: &[u8]) -> Result<Self, CheckpointError> {
        let bytes: &[u8; CHECKPOINT_ENCODED_LEN_BYTES] = bytes
            .try_into()
            .map_err(|_| CheckpointError::Malformed { what: "length" })?;
        let (version, rest) = bytes.split_at(1);
        if version != [CHECKPOINT_FORMAT_VERSION] {
            return Err(CheckpointError::Malformed { what: "version" });
        }
        let (ordinal, digest) = rest.split_at(ORDINAL_LEN_BYTES);
        let malformed = |_| CheckpointError::Malformed { what: "length" };
        let ordinal = u64::from_be_bytes(ordinal.try_into().map_err(malformed)?);
        if ordinal == 0 {
            return Err(CheckpointError::Malformed { what: "ordinal" });
        }
        Ok(Self {
            ordinal,
            digest: digest.try_into().map_err(malformed)?,
        })
    }
}

/// The checkpoint could not be loaded or stored.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckpointError {
    /// The backing store failed (its detail is not carried: it may name credentials).
    #[error("the checkpoint store is unavailable")]
    Unavailable,
    /// The credential store holding the checkpoint failed (`Display` is the key error's fixed
    /// text; its category says how).
    #[error("the checkpoint's credential store failed: {source}")]
    Credential {
        /// The credential store's failure.
        #[source]
        source: KeyError,
    },
    /// The stored value is not a checkpoint of this format (`what`: `length`, `version` or
    /// `ordinal`). It is never overwritten.
    #[error("the stored checkpoint is malformed ({what})")]
    Malformed {
        /// Which part is wrong.
        what: &'static str,
    },
    /// The checkpoint offered is older than the one held: it never goes backwards.
    #[error("refusing to move the checkpoint back from ordinal {held} to {offered}")]
    WouldGoBack {
        /// The ordinal held.
        held: u64,
        /// The ordinal offered.
        offered: u64,
    },
    /// The checkpoint offered has the held ordinal but another digest: a seal of another
    /// history than the one checkpointed.
    #[error("refusing to replace the checkpoint at ordinal {ordinal} with another seal's")]
    Diverged {
        /// The ordinal both name.
        ordinal: u64,
    },
}

impl CheckpointError {
    /// The fixed health category: the credential store's own for its failures, `key_corrupt`
    /// for a malformed value (it sits beside the key), `storage_corrupt` for a checkpoint the
    /// store's seal chain contradicts.
    pub fn category(&self) -> HealthCategory {
        match self {
            Self::Unavailable => HealthCategory::KeyUnavailable,
            Self::Credential { source } => source.category(),
            Self::Malformed { .. } => HealthCategory::KeyCorrupt,
            Self::WouldGoBack { .. } | Self::Diverged { .. } => HealthCategory::StorageCorrupt,
        }
    }
}

/// Where the checkpoint is kept. `store` never moves it backwards.
///
/// `store` reads, compares and writes: its callers serialize it (the engine makes every
/// credential-store call on one thread, and one writer per store holds its lock).
pub trait CheckpointStore: Send + Sync {
    /// The checkpoint, if one was ever stored.
    fn load(&self) -> Result<Option<Checkpoint>, CheckpointError>;

    /// Replaces the checkpoint with `checkpoint`; refuses one with a lower ordinal than the one
    /// held ([`CheckpointError::WouldGoBack`]) or the held ordinal with another digest
    /// ([`CheckpointError::Diverged`]). The same checkpoint again is accepted (a retry) and
    /// changes nothing.
    fn store(&self, checkpoint: &Checkpoint) -> Result<(), CheckpointError>;
}

/// Whether `offered` may replace `held`: `Ok(true)` to write it, `Ok(false)` when it is the one
/// held (nothing to write), an error when it would move the checkpoint back or sideways. The
/// one rule every [`CheckpointStore`] applies.
fn may_replace(held: Option<&Checkpoint>, offered: &Checkpoint) -> Result<bool, CheckpointError> {
    let Some(held) = held else {
        return Ok(true);
    };
    if offered.ordinal < held.ordinal {
        return Err(CheckpointError::WouldGoBack {
            held: held.ordinal,
            offered: offered.ordinal,
        });
    }
    if offered.ordinal == held.ordinal {
        if offered.digest != held.digest {
            return Err(CheckpointError::Diverged {
                ordinal: held.ordinal,
            });
        }
        return Ok(false);
    }
    Ok(true)
}

/// Whether a seal chain (the checkpoints of its verified seals, in any order) is older than
/// the checkpoint `held`: it has no seal at all, its newest seal is below `held`'s ordinal, or
/// its seals at that ordinal all carry another digest. A chain that reaches past `held` is not
/// (a crash between a seal and its checkpoint leaves the checkpoint behind), nor one that lacks
/// the seal at `held`'s ordinal but reaches past it (`verify` reports that gap on its own).
pub fn is_rolled_back(chain: impl IntoIterator<Item = Checkpoint>, held: &Checkpoint) -> bool {
    let mut newest: Option<u64> = None;
    let (mut at_held, mut matches_held) = (false, false);
    for seal in chain {
        newest = newest.max(Some(seal.ordinal));
        if seal.ordinal == held.ordinal {
            at_held = true;
            matches_held |= seal.digest == held.digest;
        }
    }
    match newest {
        None => true,
        Some(newest) if newest < held.ordinal => true,
        Some(_) => at_held && !matches_held,
    }
}

/// What [`reconcile`] found and did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reconciled {
    /// No seal and no checkpoint yet: nothing to keep.
    NoSeals,
    /// The checkpoint already names the chain's newest seal.
    UpToDate(Checkpoint),
    /// The checkpoint was absent or behind (a crash between a seal and its checkpoint, a failed
    /// store) and now names the chain's newest seal.
    Advanced(Checkpoint),
    /// The chain is older than the checkpoint ([`is_rolled_back`]): the directory was replaced
    /// with an older copy. Nothing was stored, so the evidence stays.
    RolledBack {
        /// The checkpoint held.
        held: Checkpoint,
    },
}

/// Brings the checkpoint up to `chain`'s newest seal (`chain`: the checkpoints of every
/// verified seal on disk), unless the chain is older than the checkpoint: a writer opening an
/// older copy of the directory must not move the checkpoint past the rollback by sealing on.
pub fn reconcile(
    store: &dyn CheckpointStore,
    chain: &[Checkpoint],
) -> Result<Reconciled, CheckpointError> {
    let held = store.load()?;
    if let Some(held) = held
        && is_rolled_back(chain.iter().copied(), &held)
    {
        return Ok(Reconciled::RolledBack { held });
    }
    let Some(newest) = chain.iter().max_by_key(|c| c.ordinal).copied() else {
        return Ok(Reconciled::NoSeals);
    };
    if held.is_some_and(|held| held.ordinal >= newest.ordinal) {
        return Ok(Reconciled::UpToDate(newest));
    }
    store.store(&newest)?;
    Ok(Reconciled::Advanced(newest))
}

/// The checkpoint of one store, kept as a credential beside its namespace's root keys in a
/// `KeyProvider` credential store, named by the namespace and the store's id (so two stores of
/// one namespace never share one). Every call blocks on the store: never make one on an async
/// worker.
#[derive(Debug, Clone, Copy)]
pub struct CredentialCheckpoints<'a> {
    /// The credential store.
    provider: &'a dyn KeyProvider,
    /// The namespace of the store.
    namespace: &'a Namespace,
    /// The store's id; `None` for a store without one (written before store ids), whose
    /// checkpoint has the legacy per-namespace name.
    store: Option<&'a StoreId>,
}

impl<'a> CredentialCheckpoints<'a> {
    /// The checkpoint of the store `store` of `namespace` in `provider`'s store.
    pub fn new(
        provider: &'a dyn KeyProvider,
        namespace: &'a Namespace,
        store: Option<&'a StoreId>,
    ) -> Self {
        Self {
            provider,
            namespace,
            store,
        }
    }
}

fn credential_failed(source: KeyError) -> CheckpointError {
    CheckpointError::Credential { source }
}

impl CheckpointStore for CredentialCheckpoints<'_> {
    fn load(&self) -> Result<Option<Checkpoint>, CheckpointError> {
        self.provider
            .load_checkpoint(self.namespace, self.store)
            .map_err(credential_failed)?
            .map(|bytes| Checkpoint::decode(&bytes))
            .transpose()
    }

    fn store(&self, checkpoint: &Checkpoint) -> Result<(), CheckpointError> {
        // A malformed value held is refused here too (by `load`), never overwritten.
        if may_replace(self.load()?.as_ref(), checkpoint)? {
            self.provider
                .store_checkpoint(self.namespace, self.store, &checkpoint.encode())
                .map_err(credential_failed)?;
        }
        Ok(())
    }
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
        if may_replace(held.as_ref(), checkpoint)? {
            *held = Some(*checkpoint);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entropy::SeededEntropy;
    use crate::keys::{CredentialNaming, InMemoryProvider};

    fn at(ordinal: u64, digest_byte: u8) -> Checkpoint {
        Checkpoint {
            ordinal,
            digest: [digest_byte; DIGEST_LEN_BYTES],
        }
    }

    fn provider() -> InMemoryProvider {
        InMemoryProvider::new(Box::new(SeededEntropy::new(3))).unwrap()
    }

    fn ns() -> Namespace {
        Namespace::new("work").unwrap()
    }

    const STORE_A: StoreId = StoreId::from_bytes([0xa; 16]);
    const STORE_B: StoreId = StoreId::from_bytes([0xb; 16]);

    #[test]
    fn the_encoding_is_a_version_byte_a_big_endian_ordinal_and_the_digest() {
        let checkpoint = Checkpoint {
            ordinal: 0x0102_0304_0506_0708,
            digest: std::array::from_fn(|i| i as u8),
        };
        let bytes = checkpoint.encode();
        assert_eq!(bytes.len(), 41);
        assert_eq!(bytes[0], 1);
        assert_eq!(bytes[1..9], [1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(bytes[9..], checkpoint.digest);
        assert_eq!(Checkpoint::decode(&bytes).unwrap(), checkpoint);
    }

    #[test]
    fn malformed_values_are_refused_with_what_is_wrong() {
        let good = at(5, 7).encode();
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (Vec::new(), "length"),
            (good[..40].to_vec(), "length"),
            ([&good[..], &[0]].concat(), "length"),
            (vec![0u8; 32], "length"),
            ([&[0u8][..], &good[1..]].concat(), "version"),
            ([&[2u8][..], &good[1..]].concat(), "version"),
            (at(0, 7).encode().to_vec(), "ordinal"),
        ];
        for (bytes, want) in cases {
            match Checkpoint::decode(&bytes) {
                Err(CheckpointError::Malformed { what }) => assert_eq!(what, want, "{bytes:?}"),
                other => panic!("{bytes:?}: {other:?}"),
            }
        }
        assert_eq!(
            CheckpointError::Malformed { what: "length" }.category(),
            HealthCategory::KeyCorrupt
        );
    }

    /// The rule every backing shares: forward only, the same checkpoint again changes nothing.
    fn never_goes_back_or_sideways(store: &dyn CheckpointStore) {
        assert_eq!(store.load().unwrap(), None);
        store.store(&at(3, 3)).unwrap();
        store.store(&at(3, 3)).unwrap();
        assert_eq!(store.load().unwrap(), Some(at(3, 3)));
        assert!(matches!(
            store.store(&at(2, 2)),
            Err(CheckpointError::WouldGoBack {
                held: 3,
                offered: 2
            })
        ));
        assert!(matches!(
            store.store(&at(3, 9)),
            Err(CheckpointError::Diverged { ordinal: 3 })
        ));
        assert_eq!(
            store.load().unwrap(),
            Some(at(3, 3)),
            "refusals change nothing"
        );
        store.store(&at(7, 7)).unwrap();
        assert_eq!(store.load().unwrap(), Some(at(7, 7)));
        assert_eq!(
            CheckpointError::WouldGoBack {
                held: 1,
                offered: 0
            }
            .category(),
            HealthCategory::StorageCorrupt
        );
    }

    #[test]
    fn the_in_memory_checkpoint_never_goes_back_or_sideways() {
        never_goes_back_or_sideways(&InMemoryCheckpoints::new());
    }

    #[test]
    fn the_credential_checkpoint_never_goes_back_or_sideways() {
        let p = provider();
        let a = ns();
        never_goes_back_or_sideways(&CredentialCheckpoints::new(&p, &a, Some(&STORE_A)));
        // Stored as exactly the encoding, in one credential that is not a key reference.
        assert_eq!(
            p.load_checkpoint(&a, Some(&STORE_A)).unwrap().unwrap(),
            at(7, 7).encode().to_vec()
        );
        assert_eq!(p.stored_credentials(), 1);
        assert!(p.references(&a).unwrap().is_empty());
        // Another namespace has its own.
        let b = Namespace::new("other").unwrap();
        assert_eq!(
            CredentialCheckpoints::new(&p, &b, Some(&STORE_A))
                .load()
                .unwrap(),
            None
        );
    }

    #[test]
    fn two_stores_of_one_namespace_keep_their_own_checkpoints() {
        let p = provider();
        let a = ns();
        let first = CredentialCheckpoints::new(&p, &a, Some(&STORE_A));
        let second = CredentialCheckpoints::new(&p, &a, Some(&STORE_B));
        let legacy = CredentialCheckpoints::new(&p, &a, None);
        first.store(&at(9, 9)).unwrap();
        // The second store's chain is younger and of other seals: neither a rollback nor a
        // divergence, because it is another store's checkpoint.
        assert_eq!(second.load().unwrap(), None);
        second.store(&at(2, 2)).unwrap();
        second.store(&at(3, 3)).unwrap();
        assert_eq!(first.load().unwrap(), Some(at(9, 9)));
        assert_eq!(second.load().unwrap(), Some(at(3, 3)));
        assert_eq!(legacy.load().unwrap(), None);
        p.destroy_checkpoint(&a, Some(&STORE_B)).unwrap();
        assert_eq!(second.load().unwrap(), None);
        assert_eq!(first.load().unwrap(), Some(at(9, 9)));
    }

    #[test]
    fn a_malformed_credential_is_refused_and_never_overwritten() {
        let p = provider();
        let a = ns();
        let checkpoints = CredentialCheckpoints::new(&p, &a, Some(&STORE_A));
        let planted = [&[2u8][..], &at(4, 4).encode()[1..]].concat();
        p.put_raw_checkpoint(&a, Some(&STORE_A), &planted).unwrap();
        assert!(matches!(
            checkpoints.load(),
            Err(CheckpointError::Malformed { what: "version" })
        ));
        assert!(matches!(
            checkpoints.store(&at(9, 9)),
            Err(CheckpointError::Malformed { .. })
        ));
        assert_eq!(
            p.load_checkpoint(&a, Some(&STORE_A)).unwrap().unwrap(),
            planted
        );
    }

    #[test]
    fn a_failing_credential_store_is_its_own_category_and_stores_nothing() {
        let p = provider();
        let a = ns();
        let checkpoints = CredentialCheckpoints::new(&p, &a, Some(&STORE_A));
        p.inject_checkpoint_error(
            &a,
            Some(&STORE_A),
            keyring_core::Error::NoStorageAccess(Box::new(std::io::Error::other(
                "/run/user/1000/keyring/control",
            ))),
        )
        .unwrap();
        let error = checkpoints.store(&at(1, 1)).unwrap_err();
        assert!(
            matches!(error, CheckpointError::Credential { .. }),
            "{error}"
        );
        assert_eq!(error.category(), HealthCategory::KeyLocked);
        assert!(!error.to_string().contains("/run"), "{error}");
        assert_eq!(p.stored_credentials(), 0);
        // The fault was one-shot.
        checkpoints.store(&at(1, 1)).unwrap();
        assert_eq!(checkpoints.load().unwrap(), Some(at(1, 1)));
    }

    #[test]
    fn the_reference_naming_has_no_checkpoint_and_writes_none() {
        let p = InMemoryProvider::with_naming(
            CredentialNaming::CuaReference,
            Box::new(SeededEntropy::new(1)),
        )
        .unwrap();
        let a = ns();
        let checkpoints = CredentialCheckpoints::new(&p, &a, Some(&STORE_A));
        assert_eq!(checkpoints.load().unwrap(), None);
        let error = checkpoints.store(&at(1, 1)).unwrap_err();
        assert!(matches!(
            error,
            CheckpointError::Credential {
                source: KeyError::ReadOnlyNaming
            }
        ));
        assert_eq!(p.stored_credentials(), 0);
        p.destroy_checkpoint(&a, Some(&STORE_A)).unwrap();
    }

    #[test]
    fn a_chain_is_rolled_back_only_when_older_than_the_checkpoint() {
        let held = at(3, 3);
        let chain = |seals: &[(u64, u8)]| {
            seals
                .iter()
                .map(|&(ordinal, digest)| at(ordinal, digest))
                .collect::<Vec<_>>()
        };
        // Older: no seal, the newest below, or another seal at the held ordinal.
        assert!(is_rolled_back(chain(&[]), &held));
        assert!(is_rolled_back(chain(&[(1, 1), (2, 2)]), &held));
        assert!(is_rolled_back(chain(&[(1, 1), (2, 2), (3, 9)]), &held));
        assert!(is_rolled_back(chain(&[(3, 9), (4, 4), (5, 5)]), &held));
        // Not older: exactly there, ahead of it, or past a gap where it was.
        assert!(!is_rolled_back(chain(&[(1, 1), (2, 2), (3, 3)]), &held));
        assert!(!is_rolled_back(chain(&[(3, 3), (4, 4)]), &held));
        assert!(!is_rolled_back(chain(&[(1, 1), (4, 4)]), &held));
        // Two seals at the held ordinal (a forked chain): one matching is enough here; verify
        // reports the fork as `chain_broken`.
        assert!(!is_rolled_back(chain(&[(3, 9), (3, 3)]), &held));
    }

    #[test]
    fn reconcile_moves_the_checkpoint_forward_only_along_the_chain() {
        let store = InMemoryCheckpoints::new();
        assert_eq!(reconcile(&store, &[]).unwrap(), Reconciled::NoSeals);
        assert_eq!(store.load().unwrap(), None);
        // Absent while seals exist (the first seal's checkpoint lost): the newest is stored.
        let chain = [at(1, 1), at(2, 2)];
        assert_eq!(
            reconcile(&store, &chain).unwrap(),
            Reconciled::Advanced(at(2, 2))
        );
        assert_eq!(
            reconcile(&store, &chain).unwrap(),
            Reconciled::UpToDate(at(2, 2))
        );
        // Behind (a crash between a seal and its checkpoint): brought up.
        let longer = [at(1, 1), at(2, 2), at(3, 3)];
        assert_eq!(
            reconcile(&store, &longer).unwrap(),
            Reconciled::Advanced(at(3, 3))
        );
        // An older copy of the directory: reported, and the checkpoint stays where it was,
        // also when the older chain was sealed on past the checkpoint's ordinal.
        for older in [
            &chain[..],
            &[at(1, 1), at(2, 2), at(3, 8), at(4, 4)][..],
            &[],
        ] {
            assert_eq!(
                reconcile(&store, older).unwrap(),
                Reconciled::RolledBack { held: at(3, 3) }
            );
            assert_eq!(store.load().unwrap(), Some(at(3, 3)));
        }
    }
}
