//! What the embedded-engine test files share: a store in a temp dir whose namespace key (a
//! fixed root, in an in-memory credential store) the test knows, so it can start engines on it
//! and read back, with the key, every history event and every journal record the engines wrote.
//! (`support/` is the other shared module: a sandbox for the `annal` binary.)
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use annal_actors::{Engine, EngineConfig};
use annal_engine::entropy::SeededEntropy;
use annal_engine::journal::{Journal, JournalEvent};
use annal_engine::keys::{
    HistoryKeys, InMemoryProvider, JournalKeys, KeyProvider, Namespace, RootKey,
};
use annal_engine::storage::{Access, Storage, StoreLayout};
use annal_engine::store::{History, StoreReader, open_store};
use annal_schema::Event;

/// The fixed test root key.
pub const ROOT: [u8; 32] = [0x5c; 32];

/// A store in a temp dir, and the credential store holding its key.
pub struct TestStore {
    /// Removed with the store.
    _dir: tempfile::TempDir,
    /// Where the store is.
    pub layout: StoreLayout,
    /// Its namespace.
    pub namespace: Namespace,
    /// The credential store, with [`ROOT`] under the namespace's primary reference.
    pub provider: Arc<InMemoryProvider>,
}

impl TestStore {
    /// A fresh store location (nothing on disk until an engine enables it).
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let layout = StoreLayout::in_namespace_dir(&dir.path().join("work"));
        let namespace = Namespace::new("work").unwrap();
        let provider = Arc::new(InMemoryProvider::new(Box::new(SeededEntropy::new(1))).unwrap());
        provider
            .put_raw(&namespace, &namespace.primary_reference(), &ROOT)
            .unwrap();
        Self {
            _dir: dir,
            layout,
            namespace,
            provider,
        }
    }

    /// The default configuration for this store.
    pub fn config(&self) -> EngineConfig {
        EngineConfig::new(self.layout.clone(), self.namespace.clone())
    }

    /// An engine on this store with `config`.
    pub fn start_with(&self, config: EngineConfig) -> Engine {
        Engine::start(config, Arc::clone(&self.provider) as Arc<dyn KeyProvider>).unwrap()
    }

    /// An engine on this store with the default configuration.
    pub fn start(&self) -> Engine {
        self.start_with(self.config())
    }

    /// The store, read-only.
    pub fn storage(&self) -> Arc<dyn Storage> {
        Arc::new(open_store(&self.layout, Access::Read).unwrap())
    }

    /// Every history event on disk, in sequence order (the store must be clean).
    pub fn events(&self) -> Vec<Event> {
        let report = StoreReader::<History>::new(self.storage())
            .read(&HistoryKeys::from_root(RootKey::from_bytes(ROOT)))
            .unwrap();
        assert!(!report.has_corruption(), "{report:#?}");
        report.records().map(|r| r.event.clone()).collect()
    }

    /// Every engine-journal event on disk, in order (the journal must be clean).
    pub fn journal(&self) -> Vec<JournalEvent> {
        let report = StoreReader::<Journal>::new(self.storage())
            .read(&JournalKeys::from_namespace_root(&RootKey::from_bytes(
                ROOT,
            )))
            .unwrap();
        assert!(!report.has_corruption(), "{report:#?}");
        report.records().map(|r| r.event.event.clone()).collect()
    }
}
