//! The key custody boundary: one type owns a namespace's root key and hands out only derived
//! purpose keys; and the cryptographic delete of a namespace.

use super::error::KeyError;
use std::sync::Arc;

use super::material::{HistoryKeys, JournalKeys, PurposeKey, RootKey, SessionIdKey};
use super::names::{KeyReference, Namespace};
use super::provider::{KeyProvider, LoadedKey};

/// Owns one namespace's root key (zeroized on drop) and derives every purpose key from it. The
/// root key itself never leaves this type: there is no accessor, no `Clone`, and `Debug` redacts.
pub struct KeyCustody {
    /// The namespace the key belongs to.
    namespace: Namespace,
    /// The reference the key is stored under (written into chunk headers).
    reference: KeyReference,
    /// The root key; shared only with the [`HistoryKeys`] this custody hands out, which can do
    /// nothing with it but derive history chunk keys.
    root: Arc<RootKey>,
    /// Other keys the store's history chunks name, by reference (read only through the
    /// [`HistoryKeys`]; nothing is written or derived with them otherwise).
    others: Arc<std::collections::BTreeMap<String, Arc<RootKey>>>,
}

impl std::fmt::Debug for KeyCustody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyCustody")
            .field("namespace", &self.namespace)
            .field("reference", &self.reference)
            .field("root", &"<redacted>")
            .field("others", &self.others.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl KeyCustody {
    /// Loads the namespace's primary key, creating it on first use (the write path: enabling
    /// capture).
    pub fn open(provider: &dyn KeyProvider, namespace: &Namespace) -> Result<Self, KeyError> {
        let loaded = provider.create_or_load(namespace)?;
        Ok(Self::from_loaded(namespace.clone(), loaded))
    }

    /// Loads exactly `reference` (the read path: a chunk header names it). Never creates a key.
    pub fn load(
        provider: &dyn KeyProvider,
        namespace: &Namespace,
        reference: &KeyReference,
    ) -> Result<Self, KeyError> {
        let loaded = provider.load(namespace, reference)?;
        Ok(Self::from_loaded(namespace.clone(), loaded))
    }

    /// Takes custody of a key a provider returned.
    pub fn from_loaded(namespace: Namespace, loaded: LoadedKey) -> Self {
        Self {
            namespace,
            reference: loaded.reference,
            root: Arc::new(loaded.root),
            others: Arc::default(),
        }
    }

    /// Adds keys of other references the store's history chunks name, so its history reader
    /// opens each chunk with the key its header names. The custody's own reference is never
    /// replaced.
    pub fn with_other_keys(mut self, loaded: Vec<LoadedKey>) -> Self {
        let mut others = std::collections::BTreeMap::new();
        for key in loaded {
            if key.reference != self.reference {
                others.insert(key.reference.as_str().to_owned(), Arc::new(key.root));
            }
        }
        self.others = Arc::new(others);
        self
    }

    /// The namespace this key belongs to.
    pub fn namespace(&self) -> &Namespace {
        &self.namespace
    }

    /// The key reference to write into chunk headers.
    pub fn reference(&self) -> &KeyReference {
        &self.reference
    }

    /// The HMAC key that turns raw session labels into opaque session ids (profile v1 contract).
    pub fn session_id_key(&self) -> SessionIdKey {
        self.root.session_id_key()
    }

    /// The key that authenticates chunk seals.
    pub fn seal_key(&self) -> PurposeKey {
        self.root.seal_key()
    }

    /// The key that encrypts the derived index.
    pub fn index_key(&self) -> PurposeKey {
        self.root.index_key()
    }

    /// The key that seals paging cursors.
    pub fn cursor_key(&self) -> PurposeKey {
        self.root.cursor_key()
    }

    /// The chunk keys of the history stream (what the history writer and reader hold).
    pub fn history_keys(&self) -> HistoryKeys {
        HistoryKeys::shared(Arc::clone(&self.root), Arc::clone(&self.others))
    }

    /// The chunk keys of the engine journal (what the journal writer and reader hold).
    pub fn journal_keys(&self) -> JournalKeys {
        JournalKeys::from_namespace_root(&self.root)
    }
}

/// Proof that every key of a namespace, and its seal checkpoint, was destroyed and verified
/// absent. Only [`destroy_namespace`] makes one; the delete path requires it before removing any
/// file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceKeysDestroyed {
    /// The namespace whose keys are gone.
    namespace: Namespace,
    /// The references that were destroyed (sorted).
    destroyed: Vec<KeyReference>,
}

impl NamespaceKeysDestroyed {
    /// The proof, made only by this crate's destroy functions once every key is verified gone.
    pub(crate) fn new(namespace: Namespace, mut destroyed: Vec<KeyReference>) -> Self {
        destroyed.sort();
        Self {
            namespace,
            destroyed,
        }
    }

    /// The namespace whose keys are gone.
    pub fn namespace(&self) -> &Namespace {
        &self.namespace
    }

    /// The references that were destroyed.
    pub fn destroyed(&self) -> &[KeyReference] {
        &self.destroyed
    }
}

/// Cryptographic delete of a whole namespace, step one: destroys every key reference of
/// `namespace` (of every store in it: deleting one store is
/// [`destroy_store_keys`](super::store_key::destroy_store_keys)), verifies each is gone,
/// destroys its legacy seal checkpoint credential and the owner record of its reference-named
/// key (verified gone too), then lists the namespace again and requires it empty and without a
/// legacy checkpoint. Only then does it return the proof that lets the caller
/// remove the namespace's files. Any failure is `key_destroy_failed`: the caller must keep every
/// file. Other namespaces are not touched.
pub fn destroy_namespace(
    provider: &dyn KeyProvider,
    namespace: &Namespace,
) -> Result<NamespaceKeysDestroyed, KeyError> {
    let references = provider
        .references(namespace)
        .map_err(KeyError::into_destroy_failure)?;
    let mut destroyed = Vec::with_capacity(references.len());
    for reference in &references {
        let proof = provider.destroy(namespace, reference)?;
        destroyed.push(proof.reference().clone());
    }
    provider.destroy_checkpoint(namespace, None)?;
    provider.destroy_reference_owner(namespace)?;
    let left = provider
        .references(namespace)
        .map_err(KeyError::into_destroy_failure)?;
    if !left.is_empty() {
        return Err(KeyError::DestroyNotVerified {
            detail: format!("{} references remain after destroy", left.len()),
        });
    }
    let checkpoint_left = provider
        .load_checkpoint(namespace, None)
        .map_err(KeyError::into_destroy_failure)?;
    if checkpoint_left.is_some() {
        return Err(KeyError::DestroyNotVerified {
            detail: "the checkpoint remains after destroy".to_owned(),
        });
    }
    Ok(NamespaceKeysDestroyed::new(namespace.clone(), destroyed))
}
