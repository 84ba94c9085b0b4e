//! The [`KeyProvider`] trait and the keyring-backed implementation shared by every store.
//!
//! Every provider in this crate goes through `keyring-core`: the Secret Service store, the
//! kernel keyutils store and the in-memory mock store differ only in how they are opened, how a
//! namespace's credentials are listed, and how "access denied" is read. The protocol (read back
//! a new key before first use, verify absence after a delete, never create on a read path) is
//! written once, here.
//!
//! # Threads
//!
//! Every method blocks on the credential store (D-Bus round trips, kernel calls, possibly an
//! unlock prompt). Never call a provider on an async worker thread: the actor layer runs key
//! custody on `spawn_blocking` or a dedicated thread.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use keyring_core::{CredentialStore, Entry};
use zeroize::{Zeroize, Zeroizing};

use super::error::{ErrorSource, KeyError, from_keyring};
use super::first_use;
use super::material::{KEY_LEN_BYTES, RootKey};
use super::names::{CredentialName, CredentialNaming, KeyReference, Namespace, Record, StoreId};
use crate::entropy::Entropy;
use crate::sync::Mutex;

/// Most key references one namespace may hold. A namespace holds one reference per key epoch;
/// a store that lists more than this for one namespace is treated as corrupt rather than
/// walked without bound.
pub const MAX_REFERENCES_PER_NAMESPACE: usize = 256;

/// Which credential store a provider talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum KeyStoreKind {
    /// The freedesktop Secret Service on the D-Bus session bus (gnome-keyring, KeePassXC, ...).
    SecretService,
    /// The Linux kernel key retention service (keyutils), through annal's session keyring.
    Keyutils,
    /// An in-memory store for tests. Never selected in production.
    InMemory,
}

impl KeyStoreKind {
    /// The stable name used on the command line, in config and in `--json` output.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::SecretService => "secret-service",
            Self::Keyutils => "keyutils",
            Self::InMemory => "in-memory",
        }
    }
}

impl std::fmt::Display for KeyStoreKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A root key as loaded from a provider, with the reference it was found under. The key bytes
/// are reachable only by handing this to [`crate::keys::KeyCustody`].
#[derive(Debug)]
pub struct LoadedKey {
    /// The reference the key is stored under (written into chunk headers).
    pub(crate) reference: KeyReference,
    /// The key itself (zeroized on drop).
    pub(crate) root: RootKey,
    /// Whether this call created the key.
    pub(crate) created: bool,
}

impl LoadedKey {
    /// The reference the key is stored under.
    pub fn reference(&self) -> &KeyReference {
        &self.reference
    }

    /// Whether the call that returned this key created it (first use of the namespace).
    pub fn was_created(&self) -> bool {
        self.created
    }
}

/// Proof that one key reference was deleted and then verified absent. Only providers in this
/// crate can make one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DestroyedKey {
    /// The reference that is now gone.
    reference: KeyReference,
}

impl DestroyedKey {
    /// The reference that is now gone.
    pub fn reference(&self) -> &KeyReference {
        &self.reference
    }
}

/// Keeps namespace root keys in a credential store.
///
/// Every call names its namespace. Read paths ([`load`](Self::load),
/// [`references`](Self::references)) never create a key. All methods block: call them from a
/// blocking thread, never from an async worker.
///
/// Implemented by this crate's providers only in practice: a [`DestroyedKey`] (the proof
/// `destroy` returns) can be made only here.
pub trait KeyProvider: Send + Sync + std::fmt::Debug {
    /// The store this provider talks to.
    fn kind(&self) -> KeyStoreKind;

    /// How this provider names credentials.
    fn naming(&self) -> CredentialNaming;

    /// Loads the namespace's primary key, creating it (32 random bytes, read back before use)
    /// if the namespace has none. With a read-only naming it only loads.
    fn create_or_load(&self, namespace: &Namespace) -> Result<LoadedKey, KeyError>;

    /// Loads `reference` in `namespace`, creating it (as [`create_or_load`](Self::create_or_load)
    /// does the primary one) when it is absent. Used for a store's own key
    /// ([`Namespace::store_reference`]).
    fn create_or_load_reference(
        &self,
        namespace: &Namespace,
        reference: &KeyReference,
    ) -> Result<LoadedKey, KeyError> {
        let _ = (namespace, reference);
        Err(KeyError::ReadOnlyNaming)
    }

    /// Loads exactly `reference` in `namespace`. Never creates anything.
    fn load(&self, namespace: &Namespace, reference: &KeyReference) -> Result<LoadedKey, KeyError>;

    /// Lists the key references that exist in `namespace`, sorted. Never creates anything.
    fn references(&self, namespace: &Namespace) -> Result<Vec<KeyReference>, KeyError>;

    /// Deletes `reference` in `namespace` and verifies it is gone. A reference that is already
    /// absent is verified absent. Any failure is `key_destroy_failed`: keep every file.
    fn destroy(
        &self,
        namespace: &Namespace,
        reference: &KeyReference,
    ) -> Result<DestroyedKey, KeyError>;

    /// Reads the seal checkpoint credential of the store `store` in `namespace` (`None`: the
    /// legacy per-namespace one of a store without an id), a credential beside the keys: its
    /// stored bytes, or `None` when there is none. Never creates anything. The bytes mean
    /// nothing here: `seal::checkpoint` encodes and checks them.
    fn load_checkpoint(
        &self,
        namespace: &Namespace,
        store: Option<&StoreId>,
    ) -> Result<Option<Vec<u8>>, KeyError>;

    /// Writes `value` as that checkpoint credential (replacing what it held) and reads it back:
    /// it is stored only if it reads back intact (`ReadBackMismatch` otherwise). Refused under a
    /// read-only naming.
    fn store_checkpoint(
        &self,
        namespace: &Namespace,
        store: Option<&StoreId>,
        value: &[u8],
    ) -> Result<(), KeyError>;

    /// Deletes that checkpoint credential and verifies it is gone (an absent one is verified
    /// absent). Any failure is `key_destroy_failed`.
    fn destroy_checkpoint(
        &self,
        namespace: &Namespace,
        store: Option<&StoreId>,
    ) -> Result<(), KeyError>;

    /// Reads the owner record of `namespace`'s reference-named key: the store it belongs to, or
    /// `None` when no annal store recorded itself (a key the stock reference made, or none).
    /// A record that is not a store id is `key_corrupt`.
    fn load_reference_owner(&self, namespace: &Namespace) -> Result<Option<StoreId>, KeyError> {
        let _ = namespace;
        Ok(None)
    }

    /// Records `store` as the owner of `namespace`'s reference-named key, read back.
    fn store_reference_owner(
        &self,
        namespace: &Namespace,
        store: &StoreId,
    ) -> Result<(), KeyError> {
        let _ = (namespace, store);
        Err(KeyError::ReadOnlyNaming)
    }

    /// Deletes the owner record and verifies it is gone.
    fn destroy_reference_owner(&self, namespace: &Namespace) -> Result<(), KeyError> {
        let _ = namespace;
        Ok(())
    }
}

/// How a store lists the credentials of one service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lister {
    /// Search by the `service` attribute and read each item's `username` attribute.
    SecretService,
    /// Read `/proc/keys` and confirm each candidate through the store.
    Keyutils,
    /// The mock store's substring search, filtered to exact names holding a secret.
    Mock,
}

/// The keyring-backed provider every store uses.
pub(crate) struct KeyringProvider {
    /// The opened credential store.
    store: Arc<CredentialStore>,
    /// Which store this is (reported to callers).
    kind: KeyStoreKind,
    /// How credentials are named.
    naming: CredentialNaming,
    /// How credentials of one namespace are listed.
    lister: Lister,
    /// How "access denied" is read.
    source: ErrorSource,
    /// Where new keys come from. A mutex because providers are shared across threads.
    entropy: Mutex<Box<dyn Entropy + Send>>,
    /// Serializes `create_or_load` within this process. Without it two threads could both find
    /// no key, both write one, and one of them would go on using a key the store no longer
    /// holds. (Across processes the store's writer lock must be held; see docs/key-custody.md.)
    create_lock: Mutex<()>,
    /// Test hook (set only by the in-memory provider): replace the next newly written key
    /// with other bytes before it is read back, to exercise the read-back check.
    tamper_next_write: AtomicBool,
}

impl std::fmt::Debug for KeyringProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyringProvider")
            .field("kind", &self.kind)
            .field("naming", &self.naming)
            .finish_non_exhaustive()
    }
}

impl KeyringProvider {
    /// Wraps an opened store.
    pub(crate) fn new(
        store: Arc<CredentialStore>,
        kind: KeyStoreKind,
        naming: CredentialNaming,
        lister: Lister,
        source: ErrorSource,
        entropy: Box<dyn Entropy + Send>,
    ) -> Self {
        Self {
            store,
            kind,
            naming,
            lister,
            source,
            entropy: Mutex::new(entropy),
            create_lock: Mutex::new(()),
            tamper_next_write: AtomicBool::new(false),
        }
    }

    /// Arms the read-back test hook.
    pub(crate) fn arm_tamper_next_write(&self) {
        self.tamper_next_write.store(true, Ordering::SeqCst);
    }

    fn map(&self, error: keyring_core::Error) -> KeyError {
        from_keyring(error, self.source)
    }

    pub(crate) fn entry(&self, name: &CredentialName) -> Result<Entry, KeyError> {
        Entry::new_in_store(&self.store, &name.service, &name.account).map_err(|e| self.map(e))
    }

    /// Reads and checks one stored key.
    fn read(&self, entry: &Entry) -> Result<RootKey, KeyError> {
        let bytes = Zeroizing::new(entry.get_secret().map_err(|e| self.map(e))?);
        RootKey::from_slice(&bytes).map_err(|e| KeyError::WrongLength {
            actual_len_bytes: e.actual_len_bytes,
        })
    }

    fn new_key_bytes(&self) -> Result<Zeroizing<[u8; KEY_LEN_BYTES]>, KeyError> {
        let mut bytes = Zeroizing::new([0u8; KEY_LEN_BYTES]);
        let mut entropy = self.entropy.lock().map_err(|_| KeyError::EntropyFailed)?;
        entropy
            .fill(bytes.as_mut_slice())
            .map_err(|_| KeyError::EntropyFailed)?;
        Ok(bytes)
    }

    /// Writes a new key, reads it back, and returns it only if it read back intact.
    fn create(&self, entry: &Entry) -> Result<RootKey, KeyError> {
        let bytes = self.new_key_bytes()?;
        if let Err(error) = entry.set_secret(bytes.as_slice()) {
            // A failed write can leave a half-made credential behind (keyutils links the key
            // into the session keyring before linking it into the persistent one). Remove what
            // we may have made; the original error is what the caller needs.
            let _ = entry.delete_credential();
            return Err(self.map(error));
        }
        if self.tamper_next_write.swap(false, Ordering::SeqCst) {
            let mut other = *bytes;
            other[0] ^= 0xff;
            let _ = entry.set_secret(&other);
            other.zeroize();
        }
        let stored = Zeroizing::new(entry.get_secret().map_err(|e| self.map(e))?);
        if stored.as_slice() != bytes.as_slice() {
            return Err(KeyError::ReadBackMismatch);
        }
        Ok(RootKey::from_bytes(*bytes))
    }

    /// Lists the accounts stored under `service`, bounded by [`MAX_REFERENCES_PER_NAMESPACE`].
    fn accounts(&self, service: &str) -> Result<BTreeSet<String>, KeyError> {
        let accounts = match self.lister {
            Lister::SecretService => self.accounts_by_attributes(service)?,
            Lister::Mock => self.accounts_in_mock(service)?,
            Lister::Keyutils => super::keyutils::accounts(self, service)?,
        };
        if accounts.len() > MAX_REFERENCES_PER_NAMESPACE {
            return Err(KeyError::Malformed {
                detail: format!("{} credentials in one namespace", accounts.len()),
            });
        }
        Ok(accounts)
    }

    fn search(&self, service: &str) -> Result<Vec<Entry>, KeyError> {
        let spec: HashMap<&str, &str> = HashMap::from([("service", service)]);
        Entry::search_in_store(&self.store, &spec).map_err(|e| self.map(e))
    }

    fn accounts_by_attributes(&self, service: &str) -> Result<BTreeSet<String>, KeyError> {
        let mut out = BTreeSet::new();
        for entry in self.search(service)? {
            let attributes = match entry.get_attributes() {
                Ok(attributes) => attributes,
                // Deleted between the search and the read.
                Err(keyring_core::Error::NoEntry) => continue,
                Err(error) => return Err(self.map(error)),
            };
            if attributes.get("service").map(String::as_str) != Some(service) {
                continue;
            }
            if let Some(account) = attributes.get("username") {
                out.insert(account.clone());
            }
            if out.len() > MAX_REFERENCES_PER_NAMESPACE {
                break;
            }
        }
        Ok(out)
    }

    fn accounts_in_mock(&self, service: &str) -> Result<BTreeSet<String>, KeyError> {
        let mut out = BTreeSet::new();
        for entry in self.search(service)? {
            let Some((found_service, account)) = entry.get_specifiers() else {
                continue;
            };
            if found_service != service {
                continue;
            }
            // The mock keeps a record for every name ever built, with or without a secret.
            match entry.get_credential() {
                Ok(_) => {
                    out.insert(account);
                }
                Err(keyring_core::Error::NoEntry) => {}
                Err(error) => return Err(self.map(error)),
            }
        }
        Ok(out)
    }

    /// Deletes one credential and verifies it is gone: only "no entry" from a freshly built entry
    /// counts. `what` names it in the failure's detail. Any failure is `key_destroy_failed`.
    fn delete_verified(&self, name: &CredentialName, what: &str) -> Result<(), KeyError> {
        let entry = self.entry(name).map_err(KeyError::into_destroy_failure)?;
        match entry.delete_credential() {
            Ok(()) | Err(keyring_core::Error::NoEntry) => {}
            Err(error) => return Err(self.map(error).into_destroy_failure()),
        }
        // Verify through a freshly built entry, so nothing cached in the first one can answer.
        let check = self.entry(name).map_err(KeyError::into_destroy_failure)?;
        match check.get_secret() {
            Err(keyring_core::Error::NoEntry) => Ok(()),
            Ok(mut bytes) => {
                bytes.zeroize();
                Err(KeyError::DestroyNotVerified {
                    detail: format!("{what} is still readable after delete"),
                })
            }
            Err(error) => Err(self.map(error).into_destroy_failure()),
        }
    }

    /// Confirms through the store that a credential exists (used by listers that find
    /// candidates outside the store API).
    pub(crate) fn exists(&self, name: &CredentialName) -> Result<bool, KeyError> {
        match self.entry(name)?.get_credential() {
            Ok(_) => Ok(true),
            Err(keyring_core::Error::NoEntry) => Ok(false),
            Err(error) => Err(self.map(error)),
        }
    }
}

impl KeyProvider for KeyringProvider {
    fn kind(&self) -> KeyStoreKind {
        self.kind
    }

    fn naming(&self) -> CredentialNaming {
        self.naming
    }

    fn create_or_load(&self, namespace: &Namespace) -> Result<LoadedKey, KeyError> {
        self.create_or_load_reference(namespace, &namespace.primary_reference())
    }

    fn create_or_load_reference(
        &self,
        namespace: &Namespace,
        reference: &KeyReference,
    ) -> Result<LoadedKey, KeyError> {
        let name = self
            .naming
            .credential(namespace, reference)
            .ok_or(KeyError::NotFound)?;
        let entry = self.entry(&name)?;
        let (root, created) = first_use::load_or_create(
            &self.create_lock,
            || match self.read(&entry) {
                Ok(root) => Ok(Some(root)),
                Err(KeyError::NotFound) if self.naming.is_writable() => Ok(None),
                Err(error) => Err(error),
            },
            || self.create(&entry),
        )?;
        Ok(LoadedKey {
            reference: reference.clone(),
            root,
            created,
        })
    }

    fn load(&self, namespace: &Namespace, reference: &KeyReference) -> Result<LoadedKey, KeyError> {
        let name = self
            .naming
            .credential(namespace, reference)
            .ok_or(KeyError::NotFound)?;
        let root = self.read(&self.entry(&name)?)?;
        Ok(LoadedKey {
            reference: reference.clone(),
            root,
            created: false,
        })
    }

    fn references(&self, namespace: &Namespace) -> Result<Vec<KeyReference>, KeyError> {
        let mut references = Vec::new();
        for service in self.naming.services(namespace) {
            references.extend(self.accounts(&service)?.iter().filter_map(|account| {
                self.naming
                    .reference_of_account(namespace, &service, account)
            }));
        }
        if references.len() > MAX_REFERENCES_PER_NAMESPACE {
            return Err(KeyError::Malformed {
                detail: format!("{} credentials in one namespace", references.len()),
            });
        }
        references.sort();
        references.dedup();
        Ok(references)
    }

    fn destroy(
        &self,
        namespace: &Namespace,
        reference: &KeyReference,
    ) -> Result<DestroyedKey, KeyError> {
        if !self.naming.is_writable() {
            return Err(KeyError::ReadOnlyNaming);
        }
        let name = self
            .naming
            .credential(namespace, reference)
            .ok_or(KeyError::ReadOnlyNaming)?;
        self.delete_verified(&name, "the key")?;
        Ok(DestroyedKey {
            reference: reference.clone(),
        })
    }

    fn load_checkpoint(
        &self,
        namespace: &Namespace,
        store: Option<&StoreId>,
    ) -> Result<Option<Vec<u8>>, KeyError> {
        self.load_record(namespace, Record::Checkpoint(store))
    }

    fn store_checkpoint(
        &self,
        namespace: &Namespace,
        store: Option<&StoreId>,
        value: &[u8],
    ) -> Result<(), KeyError> {
        self.store_record(namespace, Record::Checkpoint(store), value)
    }

    fn destroy_checkpoint(
        &self,
        namespace: &Namespace,
        store: Option<&StoreId>,
    ) -> Result<(), KeyError> {
        self.destroy_record(namespace, Record::Checkpoint(store), "the checkpoint")
    }

    fn load_reference_owner(&self, namespace: &Namespace) -> Result<Option<StoreId>, KeyError> {
        match self.load_record(namespace, Record::ReferenceOwner)? {
            None => Ok(None),
            Some(bytes) => {
                StoreId::from_slice(&bytes)
                    .map(Some)
                    .ok_or_else(|| KeyError::Malformed {
                        detail: format!("an owner record of {} bytes", bytes.len()),
                    })
            }
        }
    }

    fn store_reference_owner(
        &self,
        namespace: &Namespace,
        store: &StoreId,
    ) -> Result<(), KeyError> {
        self.store_record(namespace, Record::ReferenceOwner, store.as_bytes())
    }

    fn destroy_reference_owner(&self, namespace: &Namespace) -> Result<(), KeyError> {
        self.destroy_record(namespace, Record::ReferenceOwner, "the owner record")
    }
}

impl KeyringProvider {
    /// Reads one of `namespace`'s records: its bytes, or `None` when absent (or under a naming
    /// that keeps none).
    fn load_record(
        &self,
        namespace: &Namespace,
        record: Record<'_>,
    ) -> Result<Option<Vec<u8>>, KeyError> {
        let Some(name) = self.naming.record_credential(namespace, record) else {
            return Ok(None);
        };
        match self.entry(&name)?.get_secret() {
            Ok(bytes) => Ok(Some(bytes)),
            Err(keyring_core::Error::NoEntry) => Ok(None),
            Err(error) => Err(self.map(error)),
        }
    }

    /// Writes one of `namespace`'s records and reads it back.
    fn store_record(
        &self,
        namespace: &Namespace,
        record: Record<'_>,
        value: &[u8],
    ) -> Result<(), KeyError> {
        let name = self
            .naming
            .record_credential(namespace, record)
            .ok_or(KeyError::ReadOnlyNaming)?;
        let entry = self.entry(&name)?;
        entry.set_secret(value).map_err(|e| self.map(e))?;
        let stored = entry.get_secret().map_err(|e| self.map(e))?;
        if stored != value {
            return Err(KeyError::ReadBackMismatch);
        }
        Ok(())
    }

    /// Deletes one of `namespace`'s records, verified (nothing to do under a naming without).
    fn destroy_record(
        &self,
        namespace: &Namespace,
        record: Record<'_>,
        what: &str,
    ) -> Result<(), KeyError> {
        match self.naming.record_credential(namespace, record) {
            Some(name) => self.delete_verified(&name, what),
            // This naming has no such credential: there is nothing that could remain.
            None => Ok(()),
        }
    }
}
