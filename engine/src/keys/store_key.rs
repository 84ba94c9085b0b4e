//! Which key one store uses, and the destroy of exactly that store's keys.
//!
//! A namespace can hold several stores under one user (`--store A`, `--store B`); each has its
//! own [`StoreId`] (kept in its sidecar) and must never share a key, a checkpoint or a delete
//! with another. The rule, in order:
//!
//! 1. **The chunks decide.** When the store's chunk headers already name a key of the namespace,
//!    that key is used (never created: a missing one is `key_unavailable`, since a new key would
//!    orphan the history): the one its journal names (annal's own chunks, so the key annal
//!    wrote the store with), else the best its history chunks name (the reference-named key
//!    first, then this store's own, then the legacy one). The other keys its history chunks
//!    name (the reference appended under its own key to an annal store) are loaded beside it,
//!    so each chunk is read with the key its header names.
//!    A reference-named key the chunks name and nobody owns is claimed for this store (its
//!    owner record is written) when opened for writing.
//! 2. **A store without chunks** (and with an id: without one nothing is this store's, and
//!    nothing is made) uses its own key (`<namespace>.<store id>.history.v1`) when
//!    told to ([`KeyChoice::Own`]) or when one already exists; otherwise the namespace's
//!    reference-named key (the reference implementation's name and credential), when its owner
//!    record names this store or nobody. An owner record naming another store refuses with
//!    [`KeyError::OwnedByAnotherStore`] (nothing is created or changed), unless that store's key
//!    is gone (the record is then stale and is taken over). Creating writes the owner record
//!    first, then the key, so a crash in between leaves a record without a key, which the same
//!    store completes and another store takes over.
//!
//! [`destroy_store_keys`] destroys what [`StoreKeyScope`] says is this store's: the keys its
//! chunks name (the reference-named one only when its owner record names this store or nobody),
//! its own key, its checkpoint, the owner record when it is this store's, and the legacy
//! checkpoint together with the legacy key. Another store's key and records are never touched.
//!
//! Every call blocks on the credential store.

use std::collections::BTreeSet;

use super::custody::{KeyCustody, NamespaceKeysDestroyed};
use super::error::KeyError;
use super::names::{KeyReference, Namespace, ReferenceKind, StoreId};
use super::provider::KeyProvider;

/// What the key rule needs to know about one store, read from its directory
/// (`store::key_scope`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreKeyScope {
    /// The store's id, from its sidecar; `None` for a store that has none (a bare contract
    /// store, or a sidecar written before store ids and not opened for writing since).
    pub id: Option<StoreId>,
    /// Every key reference the store's chunk headers (history and journal) name.
    pub named: BTreeSet<KeyReference>,
    /// The key references its journal's chunk headers name (a subset of `named`): the journal
    /// is annal's own, so these are the key annal wrote the store with.
    pub journal: BTreeSet<KeyReference>,
}

/// Which key a store without chunks takes when it is enabled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum KeyChoice {
    /// The namespace's reference-named key, when it is free or this store's (the default: a
    /// stock reference on the same machine then opens the store).
    #[default]
    Reference,
    /// A key of this store's own, `<namespace>.<store id>.history.v1` (for a second store of a
    /// namespace whose reference-named key another store owns; the stock reference cannot
    /// open it).
    Own,
}

/// How the key is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    /// Read only: nothing is created, claimed or written.
    Read,
    /// For the store's writer (its writer lock held): a missing key may be created when
    /// `create` (enable), and an unowned reference-named key the chunks name is claimed.
    Write {
        /// Whether a store without a key may get one.
        create: bool,
        /// Which key a store without chunks takes.
        choice: KeyChoice,
    },
}

/// Preference among the references a store's chunks name (lower is preferred).
fn rank(namespace: &Namespace, id: Option<&StoreId>, reference: &KeyReference) -> u8 {
    match namespace.kind_of(reference) {
        ReferenceKind::ReferenceNamed => 0,
        ReferenceKind::StoreBound(store) if Some(&store) == id => 1,
        ReferenceKind::Legacy => 2,
        _ => 3,
    }
}

/// The reference the store's chunks say it uses, if any: the one its journal names (the key
/// annal wrote it with), else, for a store annal has not written yet, the best its history
/// chunks name.
pub fn named_reference(namespace: &Namespace, scope: &StoreKeyScope) -> Option<KeyReference> {
    let among = if scope.journal.is_empty() {
        &scope.named
    } else {
        &scope.journal
    };
    among
        .iter()
        .min_by_key(|r| rank(namespace, scope.id.as_ref(), r))
        .cloned()
}

/// `custody` with the other keys the store's chunks name that the credential store holds (one
/// that cannot be read leaves its chunks unreadable, reported as such when read; it does not
/// stop the store).
fn with_other_keys(
    provider: &dyn KeyProvider,
    namespace: &Namespace,
    scope: &StoreKeyScope,
    custody: KeyCustody,
) -> KeyCustody {
    let others = scope
        .named
        .iter()
        .filter(|r| *r != custody.reference())
        .filter_map(|r| provider.load(namespace, r).ok())
        .collect::<Vec<_>>();
    if others.is_empty() {
        custody
    } else {
        custody.with_other_keys(others)
    }
}

/// Opens the key of the store described by `scope` (the rule in the module doc).
pub fn open_store_key(
    provider: &dyn KeyProvider,
    namespace: &Namespace,
    scope: &StoreKeyScope,
    mode: OpenMode,
) -> Result<KeyCustody, KeyError> {
    if let Some(reference) = named_reference(namespace, scope) {
        let custody = KeyCustody::load(provider, namespace, &reference)?;
        let custody = with_other_keys(provider, namespace, scope, custody);
        if let (OpenMode::Write { .. }, Some(id), ReferenceKind::ReferenceNamed) =
            (mode, scope.id.as_ref(), namespace.kind_of(&reference))
            && provider.load_reference_owner(namespace)?.is_none()
        {
            provider.store_reference_owner(namespace, id)?;
        }
        return Ok(custody);
    }
    let (create, choice) = match mode {
        OpenMode::Read => (false, KeyChoice::Reference),
        OpenMode::Write { create, choice } => (create, choice),
    };
    let Some(id) = scope.id.as_ref() else {
        // No id and no chunks naming a key: nothing can be shown to be this store's key, and
        // nothing is created without an id to bind it to.
        return Err(KeyError::NotFound);
    };
    let own = namespace.store_reference(id);
    match KeyCustody::load(provider, namespace, &own) {
        Ok(custody) => return Ok(custody),
        Err(KeyError::NotFound) => {}
        Err(error) => return Err(error),
    }
    if choice == KeyChoice::Own {
        if !create {
            return Err(KeyError::NotFound);
        }
        let loaded = provider.create_or_load_reference(namespace, &own)?;
        return Ok(KeyCustody::from_loaded(namespace.clone(), loaded));
    }
    let primary = namespace.primary_reference();
    let existing = match KeyCustody::load(provider, namespace, &primary) {
        Ok(custody) => Some(custody),
        Err(KeyError::NotFound) => None,
        Err(error) => return Err(error),
    };
    let owner = provider.load_reference_owner(namespace)?;
    match (existing, owner) {
        (Some(_), Some(owner)) if &owner != id => Err(KeyError::OwnedByAnotherStore),
        (Some(custody), Some(_)) => Ok(custody),
        (Some(custody), None) => {
            // A key nobody recorded: the stock reference's, or one made before owner records.
            // Claimed only by a writer that is enabling (documented in docs/key-custody.md).
            if create {
                provider.store_reference_owner(namespace, id)?;
            }
            Ok(custody)
        }
        (None, _) if !create => Err(KeyError::NotFound),
        (None, _) => {
            // Free, or a stale record of a store whose key is gone: record this store, then
            // make the key.
            provider.store_reference_owner(namespace, id)?;
            let loaded = provider.create_or_load(namespace)?;
            Ok(KeyCustody::from_loaded(namespace.clone(), loaded))
        }
    }
}

/// Cryptographic delete of one store's keys (the module doc says which): destroys each one and
/// verifies it absent, then its checkpoint, then the owner record when it is this store's.
/// Returns the proof `store::delete_store_files` requires, listing the references destroyed.
/// A reference-named key the chunks name that another store owns is refused
/// ([`KeyError::OwnedByAnotherStore`]) before anything is destroyed.
pub fn destroy_store_keys(
    provider: &dyn KeyProvider,
    namespace: &Namespace,
    scope: &StoreKeyScope,
) -> Result<NamespaceKeysDestroyed, KeyError> {
    let owner = provider
        .load_reference_owner(namespace)
        .map_err(KeyError::into_destroy_failure)?;
    let ours = |id: &StoreId| scope.id.as_ref() == Some(id);
    let owns_reference_key = owner.as_ref().is_some_and(ours);
    let mut targets: BTreeSet<KeyReference> = BTreeSet::new();
    for reference in &scope.named {
        match namespace.kind_of(reference) {
            ReferenceKind::ReferenceNamed => {
                if owner.as_ref().is_some_and(|o| !ours(o)) {
                    return Err(KeyError::OwnedByAnotherStore);
                }
                targets.insert(reference.clone());
            }
            ReferenceKind::StoreBound(id) if !ours(&id) => {
                return Err(KeyError::OwnedByAnotherStore);
            }
            _ => {
                targets.insert(reference.clone());
            }
        }
    }
    if let Some(id) = scope.id.as_ref() {
        targets.insert(namespace.store_reference(id));
    }
    if owns_reference_key {
        targets.insert(namespace.primary_reference());
    }
    let mut destroyed = Vec::with_capacity(targets.len());
    for reference in &targets {
        let proof = provider.destroy(namespace, reference)?;
        destroyed.push(proof.reference().clone());
    }
    if scope.id.is_some() {
        provider.destroy_checkpoint(namespace, scope.id.as_ref())?;
    }
    if targets.contains(&namespace.legacy_reference()) || scope.id.is_none() {
        provider.destroy_checkpoint(namespace, None)?;
    }
    if targets.contains(&namespace.primary_reference()) && owner.is_some() {
        provider.destroy_reference_owner(namespace)?;
    }
    let left = provider
        .references(namespace)
        .map_err(KeyError::into_destroy_failure)?;
    if let Some(reference) = left.iter().find(|r| targets.contains(r)) {
        return Err(KeyError::DestroyNotVerified {
            detail: format!("{reference} remains after destroy"),
        });
    }
    Ok(NamespaceKeysDestroyed::new(namespace.clone(), destroyed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entropy::SeededEntropy;
    use crate::keys::InMemoryProvider;

    const A: StoreId = StoreId::from_bytes([0xa; 16]);
    const B: StoreId = StoreId::from_bytes([0xb; 16]);

    fn ns() -> Namespace {
        Namespace::new("work").unwrap()
    }

    fn scope(id: StoreId, named: &[KeyReference]) -> StoreKeyScope {
        StoreKeyScope {
            id: Some(id),
            named: named.iter().cloned().collect(),
            journal: BTreeSet::new(),
        }
    }

    fn enable(choice: KeyChoice) -> OpenMode {
        OpenMode::Write {
            create: true,
            choice,
        }
    }

    fn session(custody: &KeyCustody) -> String {
        custody.session_id_key().session_id("s").as_str().to_owned()
    }

    #[test]
    fn a_second_store_of_the_namespace_is_refused_the_first_ones_key_until_told() {
        let p = InMemoryProvider::new(Box::new(SeededEntropy::new(1))).unwrap();
        let n = ns();
        let a = open_store_key(&p, &n, &scope(A, &[]), enable(KeyChoice::Reference)).unwrap();
        assert_eq!(a.reference(), &n.primary_reference());
        assert_eq!(p.load_reference_owner(&n).unwrap(), Some(A));
        let before = p.stored_credentials();
        let error =
            open_store_key(&p, &n, &scope(B, &[]), enable(KeyChoice::Reference)).unwrap_err();
        assert!(matches!(error, KeyError::OwnedByAnotherStore), "{error}");
        assert!(error.to_string().contains("key of its own"), "{error}");
        assert_eq!(p.stored_credentials(), before, "a refusal creates nothing");
        // Read-only and start-up opens of B find nothing of B's either.
        assert!(open_store_key(&p, &n, &scope(B, &[]), OpenMode::Read).is_err());
        // Told: a key of B's own.
        let b = open_store_key(&p, &n, &scope(B, &[]), enable(KeyChoice::Own)).unwrap();
        assert_eq!(b.reference(), &n.store_reference(&B));
        assert_ne!(session(&a), session(&b));
        // B's chunks now name its own key; A's the reference-named one. Each reopens its own.
        let b_again = open_store_key(
            &p,
            &n,
            &scope(B, &[n.store_reference(&B)]),
            enable(KeyChoice::Reference),
        )
        .unwrap();
        assert_eq!(session(&b_again), session(&b));
        let a_again =
            open_store_key(&p, &n, &scope(A, &[n.primary_reference()]), OpenMode::Read).unwrap();
        assert_eq!(session(&a_again), session(&a));
    }

    #[test]
    fn deleting_one_store_leaves_the_other_stores_key_and_checkpoint() {
        let p = InMemoryProvider::new(Box::new(SeededEntropy::new(2))).unwrap();
        let n = ns();
        let a = open_store_key(&p, &n, &scope(A, &[]), enable(KeyChoice::Reference)).unwrap();
        let b = open_store_key(&p, &n, &scope(B, &[]), enable(KeyChoice::Own)).unwrap();
        p.store_checkpoint(&n, Some(&A), b"a").unwrap();
        p.store_checkpoint(&n, Some(&B), b"b").unwrap();
        let a_scope = scope(A, &[n.primary_reference()]);
        let b_scope = scope(B, &[n.store_reference(&B)]);

        let proof = destroy_store_keys(&p, &n, &b_scope).unwrap();
        assert_eq!(proof.destroyed(), [n.store_reference(&B)]);
        assert_eq!(p.load_checkpoint(&n, Some(&B)).unwrap(), None);
        let a_again = open_store_key(&p, &n, &a_scope, OpenMode::Read).unwrap();
        assert_eq!(session(&a_again), session(&a));
        assert_eq!(
            p.load_checkpoint(&n, Some(&A)).unwrap().as_deref(),
            Some(&b"a"[..])
        );
        assert_eq!(p.load_reference_owner(&n).unwrap(), Some(A));
        drop(b);

        // A store whose chunks name A's key (a copy of A under another id) cannot destroy it.
        let error = destroy_store_keys(&p, &n, &scope(B, &[n.primary_reference()])).unwrap_err();
        assert!(matches!(error, KeyError::OwnedByAnotherStore), "{error}");
        assert!(p.load(&n, &n.primary_reference()).is_ok());

        let proof = destroy_store_keys(&p, &n, &a_scope).unwrap();
        // Its own store-bound name is verified absent too (it never had one).
        assert_eq!(
            proof.destroyed(),
            [n.primary_reference(), n.store_reference(&A)]
        );
        assert_eq!(p.load_reference_owner(&n).unwrap(), None);
        assert_eq!(p.stored_credentials(), 0, "nothing of either store is left");
    }

    #[test]
    fn the_chunks_decide_and_a_named_key_is_never_created() {
        let p = InMemoryProvider::new(Box::new(SeededEntropy::new(3))).unwrap();
        let n = ns();
        // A store written before the reference naming: its chunks name the legacy key.
        p.put_raw(&n, &n.legacy_reference(), &[5; 32]).unwrap();
        let legacy = scope(A, &[n.legacy_reference()]);
        let custody = open_store_key(&p, &n, &legacy, enable(KeyChoice::Reference)).unwrap();
        assert_eq!(custody.reference(), &n.legacy_reference());
        assert_eq!(p.stored_credentials(), 1, "no reference-named key was made");
        // A named key that is gone stays gone: key_unavailable, nothing created.
        let gone = scope(B, &[n.store_reference(&B)]);
        let error = open_store_key(&p, &n, &gone, enable(KeyChoice::Own)).unwrap_err();
        assert!(matches!(error, KeyError::NotFound), "{error}");
        assert_eq!(p.stored_credentials(), 1);
    }

    #[test]
    fn an_unowned_reference_key_the_chunks_name_is_claimed_by_their_writer() {
        let p = InMemoryProvider::new(Box::new(SeededEntropy::new(4))).unwrap();
        let n = ns();
        // What the stock reference leaves: its key, no owner record.
        p.put_raw(&n, &n.primary_reference(), &[6; 32]).unwrap();
        let named = scope(A, &[n.primary_reference(), n.legacy_reference()]);
        open_store_key(&p, &n, &named, OpenMode::Read).unwrap();
        assert_eq!(
            p.load_reference_owner(&n).unwrap(),
            None,
            "a read claims nothing"
        );
        let custody = open_store_key(
            &p,
            &n,
            &named,
            OpenMode::Write {
                create: false,
                choice: KeyChoice::Reference,
            },
        )
        .unwrap();
        assert_eq!(custody.reference(), &n.primary_reference());
        assert_eq!(p.load_reference_owner(&n).unwrap(), Some(A));
    }

    #[test]
    fn the_journal_names_the_key_and_the_other_keys_the_chunks_name_come_along() {
        let p = InMemoryProvider::new(Box::new(SeededEntropy::new(6))).unwrap();
        let n = ns();
        p.put_raw(&n, &n.legacy_reference(), &[1; 32]).unwrap();
        p.put_raw(&n, &n.primary_reference(), &[2; 32]).unwrap();
        let mut mixed = scope(A, &[n.legacy_reference(), n.primary_reference()]);
        mixed.journal = [n.legacy_reference()].into();
        let custody = open_store_key(&p, &n, &mixed, OpenMode::Read).unwrap();
        // annal's journal was written with the legacy key: it stays the store's key, although
        // the reference-named key ranks first among history chunks alone.
        assert_eq!(custody.reference(), &n.legacy_reference());
        let debug = format!("{custody:?}");
        assert!(debug.contains(n.primary_reference().as_str()), "{debug}");
        assert!(!debug.contains("[2, 2"), "no key bytes in Debug: {debug}");
        let keys = custody.history_keys();
        let id = [9u8; 16];
        let primary_root = crate::keys::RootKey::from_bytes([2; 32]);
        let legacy_root = crate::keys::RootKey::from_bytes([1; 32]);
        use crate::keys::material::ChunkKeys;
        assert_eq!(
            keys.chunk_key_for(n.primary_reference().as_str(), &id, "s", 1)
                .as_bytes(),
            primary_root.chunk_key(&id, "s", 1).as_bytes()
        );
        assert_eq!(
            keys.chunk_key_for(n.legacy_reference().as_str(), &id, "s", 1)
                .as_bytes(),
            legacy_root.chunk_key(&id, "s", 1).as_bytes()
        );
        assert_eq!(
            keys.chunk_key(&id, "s", 1).as_bytes(),
            legacy_root.chunk_key(&id, "s", 1).as_bytes()
        );
        // Without a journal, the history chunks rank: the reference-named key.
        mixed.journal.clear();
        let custody = open_store_key(&p, &n, &mixed, OpenMode::Read).unwrap();
        assert_eq!(custody.reference(), &n.primary_reference());
    }

    #[test]
    fn a_stale_owner_record_without_its_key_is_taken_over() {
        let p = InMemoryProvider::new(Box::new(SeededEntropy::new(5))).unwrap();
        let n = ns();
        p.store_reference_owner(&n, &A).unwrap();
        let custody = open_store_key(&p, &n, &scope(B, &[]), enable(KeyChoice::Reference)).unwrap();
        assert_eq!(custody.reference(), &n.primary_reference());
        assert_eq!(p.load_reference_owner(&n).unwrap(), Some(B));
    }
}
