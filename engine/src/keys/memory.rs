//! An in-memory provider for tests, with failure injection.
//!
//! It runs the same protocol code as the real providers over `keyring_core::mock`, whose
//! credentials can be told to fail their next call with any keyring error. Keys vanish with the
//! provider. Never selected in production.

use std::sync::Arc;

use keyring_core::mock;

use super::error::{ErrorSource, KeyError, from_keyring};
use super::names::{CredentialNaming, KeyReference, Namespace, Record, StoreId};
use super::provider::{KeyProvider, KeyStoreKind, KeyringProvider, Lister};
use crate::entropy::Entropy;

/// A provider that keeps keys in process memory. For tests only.
#[derive(Debug)]
pub struct InMemoryProvider {
    /// The shared keyring-backed implementation, over a mock store.
    inner: KeyringProvider,
    /// The same mock store, kept typed for the test helpers.
    mock: Arc<mock::Store>,
}

impl InMemoryProvider {
    /// An empty in-memory store with annal's naming.
    pub fn new(entropy: Box<dyn Entropy + Send>) -> Result<Self, KeyError> {
        Self::with_naming(CredentialNaming::Annal, entropy)
    }

    /// An empty in-memory store with the given naming.
    pub fn with_naming(
        naming: CredentialNaming,
        entropy: Box<dyn Entropy + Send>,
    ) -> Result<Self, KeyError> {
        let mock =
            mock::Store::new().map_err(|e| from_keyring(e, ErrorSource::SecretServiceLike))?;
        let store: Arc<keyring_core::CredentialStore> = mock.clone();
        Ok(Self {
            inner: KeyringProvider::new(
                store,
                KeyStoreKind::InMemory,
                naming,
                Lister::Mock,
                ErrorSource::SecretServiceLike,
                entropy,
            ),
            mock,
        })
    }

    fn entry(
        &self,
        namespace: &Namespace,
        reference: &KeyReference,
    ) -> Result<keyring_core::Entry, KeyError> {
        let name = self
            .inner
            .naming()
            .credential(namespace, reference)
            .ok_or(KeyError::NotFound)?;
        self.inner.entry(&name)
    }

    /// Makes the next store call on this credential fail with `error` (a one-shot fault).
    pub fn inject_error(
        &self,
        namespace: &Namespace,
        reference: &KeyReference,
        error: keyring_core::Error,
    ) -> Result<(), KeyError> {
        let entry = self.entry(namespace, reference)?;
        let cred: &mock::Cred = entry.as_any().downcast_ref().ok_or(KeyError::NotFound)?;
        cred.set_error(error);
        Ok(())
    }

    /// Stores raw bytes under a credential, bypassing every check (to plant corrupt values).
    pub fn put_raw(
        &self,
        namespace: &Namespace,
        reference: &KeyReference,
        bytes: &[u8],
    ) -> Result<(), KeyError> {
        self.entry(namespace, reference)?
            .set_secret(bytes)
            .map_err(|e| from_keyring(e, ErrorSource::SecretServiceLike))
    }

    /// The checkpoint credential of `store` in `namespace` (annal's naming only).
    fn checkpoint_entry(
        &self,
        namespace: &Namespace,
        store: Option<&StoreId>,
    ) -> Result<keyring_core::Entry, KeyError> {
        let name = self
            .inner
            .naming()
            .record_credential(namespace, Record::Checkpoint(store))
            .ok_or(KeyError::ReadOnlyNaming)?;
        self.inner.entry(&name)
    }

    /// Makes the next store call on the namespace's checkpoint credential fail with `error`.
    pub fn inject_checkpoint_error(
        &self,
        namespace: &Namespace,
        store: Option<&StoreId>,
        error: keyring_core::Error,
    ) -> Result<(), KeyError> {
        let entry = self.checkpoint_entry(namespace, store)?;
        let cred: &mock::Cred = entry.as_any().downcast_ref().ok_or(KeyError::NotFound)?;
        cred.set_error(error);
        Ok(())
    }

    /// Stores raw bytes as the namespace's checkpoint credential, bypassing every check (to
    /// plant malformed or older values).
    pub fn put_raw_checkpoint(
        &self,
        namespace: &Namespace,
        store: Option<&StoreId>,
        bytes: &[u8],
    ) -> Result<(), KeyError> {
        self.checkpoint_entry(namespace, store)?
            .set_secret(bytes)
            .map_err(|e| from_keyring(e, ErrorSource::SecretServiceLike))
    }

    /// Makes the next newly created key read back different from what was written.
    pub fn tamper_next_write(&self) {
        self.inner.arm_tamper_next_write();
    }

    /// How many credentials currently hold a secret, in every namespace.
    pub fn stored_credentials(&self) -> usize {
        let Ok(guard) = self.mock.inner.lock() else {
            return 0;
        };
        let creds = guard.borrow();
        creds
            .iter()
            .filter(|cred| {
                cred.inner
                    .lock()
                    .map(|data| data.borrow().secret.is_some())
                    .unwrap_or(false)
            })
            .count()
    }
}

super::provider_delegate!(InMemoryProvider);
