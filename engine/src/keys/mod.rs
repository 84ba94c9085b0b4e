//! Key custody: key material and derivations, the providers that keep each namespace's root key
//! in an OS credential store, store selection, and cryptographic delete.
//!
//! # Layout
//!
//! - `material`: [`RootKey`] and the purpose keys derived from it (HKDF, one info string each).
//! - `names`: validated [`Namespace`] and [`KeyReference`], and [`CredentialNaming`] (how they
//!   map to credential service/account names).
//! - `error`: [`KeyError`], each failure with its fixed health category.
//! - `provider`: the [`KeyProvider`] trait and the protocol every store shares.
//! - `secret_service`, `keyutils`, `memory`: the three providers.
//! - `selection`: `--key-store secret-service|keyutils|auto` and the probes `annal doctor` uses.
//! - `first_use`: load-or-create of a namespace key under one lock (loom-checked).
//! - `custody`: [`KeyCustody`], the only owner of a root key, and [`destroy_namespace`] (which
//!   also removes the namespace's legacy seal checkpoint credential and owner record).
//! - `store_key`: which key one store uses ([`open_store_key`], bound to its [`StoreId`]), and
//!   [`destroy_store_keys`], the delete of exactly that store's keys and checkpoint.
//!
//! Every provider call blocks. Never make one on an async worker thread.
//!
//! The design (naming, probe order, failure categories, delete protocol, threats) is written up
//! in `docs/key-custody.md`.

/// Implements [`KeyProvider`] for a wrapper whose `inner` field is a `KeyringProvider`.
macro_rules! provider_delegate {
    ($ty:ty) => {
        impl $crate::keys::provider::KeyProvider for $ty {
            fn kind(&self) -> $crate::keys::provider::KeyStoreKind {
                self.inner.kind()
            }
            fn naming(&self) -> $crate::keys::names::CredentialNaming {
                self.inner.naming()
            }
            fn create_or_load(
                &self,
                namespace: &$crate::keys::names::Namespace,
            ) -> Result<$crate::keys::provider::LoadedKey, $crate::keys::error::KeyError> {
                self.inner.create_or_load(namespace)
            }
            fn load(
                &self,
                namespace: &$crate::keys::names::Namespace,
                reference: &$crate::keys::names::KeyReference,
            ) -> Result<$crate::keys::provider::LoadedKey, $crate::keys::error::KeyError> {
                self.inner.load(namespace, reference)
            }
            fn references(
                &self,
                namespace: &$crate::keys::names::Namespace,
            ) -> Result<Vec<$crate::keys::names::KeyReference>, $crate::keys::error::KeyError> {
                self.inner.references(namespace)
            }
            fn destroy(
                &self,
                namespace: &$crate::keys::names::Namespace,
                reference: &$crate::keys::names::KeyReference,
            ) -> Result<$crate::keys::provider::DestroyedKey, $crate::keys::error::KeyError> {
                self.inner.destroy(namespace, reference)
            }
            fn create_or_load_reference(
                &self,
                namespace: &$crate::keys::names::Namespace,
                reference: &$crate::keys::names::KeyReference,
            ) -> Result<$crate::keys::provider::LoadedKey, $crate::keys::error::KeyError> {
                self.inner.create_or_load_reference(namespace, reference)
            }
            fn load_checkpoint(
                &self,
                namespace: &$crate::keys::names::Namespace,
                store: Option<&$crate::keys::names::StoreId>,
            ) -> Result<Option<Vec<u8>>, $crate::keys::error::KeyError> {
                self.inner.load_checkpoint(namespace, store)
            }
            fn store_checkpoint(
                &self,
                namespace: &$crate::keys::names::Namespace,
                store: Option<&$crate::keys::names::StoreId>,
                value: &[u8],
            ) -> Result<(), $crate::keys::error::KeyError> {
                self.inner.store_checkpoint(namespace, store, value)
            }
            fn destroy_checkpoint(
                &self,
                namespace: &$crate::keys::names::Namespace,
                store: Option<&$crate::keys::names::StoreId>,
            ) -> Result<(), $crate::keys::error::KeyError> {
                self.inner.destroy_checkpoint(namespace, store)
            }
            fn load_reference_owner(
                &self,
                namespace: &$crate::keys::names::Namespace,
            ) -> Result<Option<$crate::keys::names::StoreId>, $crate::keys::error::KeyError> {
                self.inner.load_reference_owner(namespace)
            }
            fn store_reference_owner(
                &self,
                namespace: &$crate::keys::names::Namespace,
                store: &$crate::keys::names::StoreId,
            ) -> Result<(), $crate::keys::error::KeyError> {
                self.inner.store_reference_owner(namespace, store)
            }
            fn destroy_reference_owner(
                &self,
                namespace: &$crate::keys::names::Namespace,
            ) -> Result<(), $crate::keys::error::KeyError> {
                self.inner.destroy_reference_owner(namespace)
            }
        }
    };
}
pub(crate) use provider_delegate;

pub mod custody;
pub mod error;
pub mod first_use;
pub mod keyutils;
pub mod material;
pub mod memory;
pub mod names;
pub mod provider;
pub mod secret_service;
pub mod selection;
pub mod store_key;

pub use custody::{KeyCustody, NamespaceKeysDestroyed, destroy_namespace};
pub use error::KeyError;
pub use keyutils::{KeyutilsProvider, establish_session_keyring};
pub use material::{
    ChunkKey, ChunkKeys, HistoryKeys, JournalKeys, PurposeKey, RootKey, SessionIdKey,
    WrongKeyLength,
};
pub use memory::InMemoryProvider;
pub use names::{CredentialNaming, KeyReference, NameError, Namespace, ReferenceKind, StoreId};
pub use provider::{DestroyedKey, KeyProvider, KeyStoreKind, LoadedKey};
pub use secret_service::{SECRET_SERVICE_PROBE_TIMEOUT_MS, SecretServiceProvider};
pub use selection::{
    KEYUTILS_DURABILITY_WARNING, KeyStoreChoice, KeyStoreReport, StoreState, UnknownKeyStore,
    chosen_store, open_provider, probe_all, probe_keyutils, probe_secret_service,
};
pub use store_key::{
    KeyChoice, OpenMode, StoreKeyScope, destroy_store_keys, named_reference, open_store_key,
};

#[cfg(test)]
mod tests;
