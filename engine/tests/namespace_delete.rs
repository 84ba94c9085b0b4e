//! Cryptographic delete across namespaces: destroying one namespace's keys and then its files
//! leaves another namespace's key and data intact, and files are removed only with the proof.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::sync::Arc;

use annal_engine::entropy::SeededEntropy;
use annal_engine::keys::{InMemoryProvider, KeyCustody, KeyProvider, Namespace, destroy_namespace};
use annal_engine::store::{
    DeleteStoreError, StoreReader, StoreWriter, WriterConfig, create_store, delete_store_files,
};
use annal_schema::HealthCategory;

const STREAM: &str = "6dd3aa1eef99854a9a3d39ba1e2315f1";

/// Writes the fixture's 16 plaintexts into a new store under `custody`'s key.
fn write_store(root: &Path, custody: Arc<KeyCustody>, seed: u64) {
    create_store(root).unwrap();
    let config = WriterConfig::new(STREAM, custody.reference().as_str(), 1);
    let mut writer = StoreWriter::open(root, custody, config).unwrap();
    let plaintexts: Vec<String> = common::fixture()
        .records
        .into_iter()
        .map(|r| r.plaintext)
        .collect();
    let slices: Vec<&[u8]> = plaintexts.iter().map(|p| p.as_bytes()).collect();
    writer
        .append(&slices, &mut SeededEntropy::new(seed))
        .unwrap();
    writer.sync().unwrap();
}

fn events_of(root: &Path, custody: &KeyCustody) -> Vec<Vec<u8>> {
    let report = StoreReader::open(root).unwrap().read(custody).unwrap();
    assert!(!report.has_corruption());
    report.records().map(|r| r.plaintext.clone()).collect()
}

#[test]
fn destroying_one_namespace_leaves_the_other_key_and_data_intact() {
    let dir = tempfile::tempdir().unwrap();
    let provider = InMemoryProvider::new(Box::new(SeededEntropy::new(9))).unwrap();
    let (a, b) = (
        Namespace::new("alpha").unwrap(),
        Namespace::new("beta").unwrap(),
    );
    let custody_a = Arc::new(KeyCustody::open(&provider, &a).unwrap());
    let custody_b = Arc::new(KeyCustody::open(&provider, &b).unwrap());
    let (root_a, root_b) = (dir.path().join("alpha"), dir.path().join("beta"));
    write_store(&root_a, custody_a.clone(), 1);
    write_store(&root_b, custody_b.clone(), 2);
    let before_b = events_of(&root_b, &custody_b);
    assert_eq!(before_b.len(), 16);

    let proof = destroy_namespace(&provider, &a).unwrap();
    let deleted = delete_store_files(&root_a, &proof).unwrap();
    assert_eq!(deleted.chunks_removed, 1);
    assert!(!root_a.exists());

    // A's key is gone for good: loading it is key_unavailable and creates nothing.
    let error = KeyCustody::load(&provider, &a, &a.primary_reference()).unwrap_err();
    assert_eq!(error.category(), HealthCategory::KeyUnavailable);
    assert!(provider.references(&a).unwrap().is_empty());

    // B's key still loads from the store and still opens B's unchanged data.
    let reloaded_b = KeyCustody::load(&provider, &b, &b.primary_reference()).unwrap();
    assert_eq!(events_of(&root_b, &reloaded_b), before_b);
}

#[test]
fn a_proof_for_one_namespace_cannot_delete_another_namespaces_store() {
    let dir = tempfile::tempdir().unwrap();
    let provider = InMemoryProvider::new(Box::new(SeededEntropy::new(3))).unwrap();
    let (a, b) = (
        Namespace::new("alpha").unwrap(),
        Namespace::new("beta").unwrap(),
    );
    let _custody_a = KeyCustody::open(&provider, &a).unwrap();
    let custody_b = Arc::new(KeyCustody::open(&provider, &b).unwrap());
    let root_b = dir.path().join("beta");
    write_store(&root_b, custody_b.clone(), 4);
    let before = events_of(&root_b, &custody_b);

    let proof_a = destroy_namespace(&provider, &a).unwrap();
    let error = delete_store_files(&root_b, &proof_a).unwrap_err();
    assert!(
        matches!(error, DeleteStoreError::ForeignChunk { .. }),
        "{error}"
    );
    assert_eq!(events_of(&root_b, &custody_b), before);
}

#[test]
fn delete_refuses_while_a_writer_holds_the_lock() {
    let dir = tempfile::tempdir().unwrap();
    let provider = InMemoryProvider::new(Box::new(SeededEntropy::new(5))).unwrap();
    let a = Namespace::new("alpha").unwrap();
    let custody = Arc::new(KeyCustody::open(&provider, &a).unwrap());
    let root = dir.path().join("alpha");
    create_store(&root).unwrap();
    let config = WriterConfig::new(STREAM, custody.reference().as_str(), 1);
    let writer = StoreWriter::open(&root, custody.clone(), config).unwrap();
    let proof = destroy_namespace(&provider, &a).unwrap();
    assert!(matches!(
        delete_store_files(&root, &proof),
        Err(DeleteStoreError::WriterActive)
    ));
    assert!(root.exists());
    drop(writer);
    delete_store_files(&root, &proof).unwrap();
    assert!(!root.exists());
}
