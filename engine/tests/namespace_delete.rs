//! Cryptographic delete across namespaces: plan (every header read first), destroy the keys,
//! then remove the files. Destroying one namespace leaves another's key, checkpoint and data
//! intact (and its own checkpoint gone), files are removed only with the proof, and an
//! unreadable header stops the delete before any key is destroyed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use annal_engine::entropy::SeededEntropy;
use annal_engine::keys::{InMemoryProvider, KeyCustody, KeyProvider, Namespace, destroy_namespace};
use annal_engine::seal::{Checkpoint, CheckpointStore, CredentialCheckpoints};
use annal_engine::storage::{Access, StoreLayout};
use annal_engine::store::{
    DeleteStoreError, History, StoreReader, StoreWriter, WriterConfig, create_store,
    delete_store_files, open_store, plan_store_delete,
};
use annal_schema::HealthCategory;
use common::{clock, fixture_drafts, open_read, open_write};

/// Writes the fixture's 16 events into a new store under `custody`'s key.
fn write_store(layout: &StoreLayout, custody: &KeyCustody) {
    create_store(layout).unwrap();
    let config = WriterConfig::new(custody.reference().clone(), std::num::NonZeroU64::MIN);
    let mut writer =
        StoreWriter::<History>::open(open_write(layout), custody.history_keys(), config, clock())
            .unwrap();
    writer.append(fixture_drafts()).unwrap();
    writer.sync().unwrap();
}

fn events_of(layout: &StoreLayout, custody: &KeyCustody) -> Vec<Vec<u8>> {
    let report = StoreReader::<History>::new(open_read(layout))
        .read(&custody.history_keys())
        .unwrap();
    assert!(!report.has_corruption());
    report.records().map(|r| r.plaintext.clone()).collect()
}

fn writable(layout: &StoreLayout) -> annal_engine::storage::FsStorage {
    open_store(layout, Access::Write).unwrap()
}

#[test]
fn destroying_one_namespace_leaves_the_other_key_and_data_intact() {
    let dir = tempfile::tempdir().unwrap();
    let provider = InMemoryProvider::new(Box::new(SeededEntropy::new(9))).unwrap();
    let (a, b) = (
        Namespace::new("alpha").unwrap(),
        Namespace::new("beta").unwrap(),
    );
    let custody_a = KeyCustody::open(&provider, &a).unwrap();
    let custody_b = KeyCustody::open(&provider, &b).unwrap();
    let layout_a = StoreLayout::in_namespace_dir(&dir.path().join("alpha"));
    let layout_b = StoreLayout::in_namespace_dir(&dir.path().join("beta"));
    write_store(&layout_a, &custody_a);
    write_store(&layout_b, &custody_b);
    let before_b = events_of(&layout_b, &custody_b);
    assert_eq!(before_b.len(), 16);
    let checkpoint = |ordinal| Checkpoint {
        ordinal,
        digest: [7; 32],
    };
    CredentialCheckpoints::new(&provider, &a, None)
        .store(&checkpoint(2))
        .unwrap();
    CredentialCheckpoints::new(&provider, &b, None)
        .store(&checkpoint(5))
        .unwrap();

    let plan = plan_store_delete(writable(&layout_a), &a).unwrap();
    assert_eq!(plan.chunks(), 1);
    let proof = destroy_namespace(&provider, &a).unwrap();
    let deleted = delete_store_files(plan, &proof).unwrap();
    assert_eq!(deleted.chunks_removed, 1);
    assert!(!layout_a.history_root().exists());
    assert!(!layout_a.sidecar().unwrap().exists());

    // A's key is gone for good: loading it is key_unavailable and creates nothing.
    let error = KeyCustody::load(&provider, &a, &a.primary_reference()).unwrap_err();
    assert_eq!(error.category(), HealthCategory::KeyUnavailable);
    assert!(provider.references(&a).unwrap().is_empty());
    // And so is its checkpoint: nothing of A is left in the credential store.
    assert_eq!(provider.load_checkpoint(&a, None).unwrap(), None);
    assert_eq!(provider.stored_credentials(), 2);

    // B's key still loads from the store and still opens B's unchanged data; its checkpoint
    // is intact.
    let reloaded_b = KeyCustody::load(&provider, &b, &b.primary_reference()).unwrap();
    assert_eq!(events_of(&layout_b, &reloaded_b), before_b);
    assert_eq!(
        CredentialCheckpoints::new(&provider, &b, None)
            .load()
            .unwrap(),
        Some(checkpoint(5))
    );
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
    let custody_b = KeyCustody::open(&provider, &b).unwrap();
    let layout_b = StoreLayout::in_namespace_dir(&dir.path().join("beta"));
    write_store(&layout_b, &custody_b);
    let before = events_of(&layout_b, &custody_b);
    let proof_a = destroy_namespace(&provider, &a).unwrap();

    // A plan for B's namespace with A's proof: wrong namespace.
    let plan = plan_store_delete(writable(&layout_b), &b).unwrap();
    let error = delete_store_files(plan, &proof_a).unwrap_err();
    assert!(
        matches!(error, DeleteStoreError::WrongNamespace { .. }),
        "{error}"
    );
    // A plan claiming B's store is A's: B's chunks name a reference A's proof does not cover.
    let plan = plan_store_delete(writable(&layout_b), &a).unwrap();
    let error = delete_store_files(plan, &proof_a).unwrap_err();
    assert!(
        matches!(error, DeleteStoreError::ForeignChunk { .. }),
        "{error}"
    );
    assert_eq!(events_of(&layout_b, &custody_b), before);
}

#[test]
fn an_unreadable_header_stops_the_delete_before_any_key_is_destroyed() {
    let dir = tempfile::tempdir().unwrap();
    let provider = InMemoryProvider::new(Box::new(SeededEntropy::new(4))).unwrap();
    let a = Namespace::new("alpha").unwrap();
    let custody = KeyCustody::open(&provider, &a).unwrap();
    let layout = StoreLayout::in_namespace_dir(&dir.path().join("alpha"));
    write_store(&layout, &custody);
    let chunks = layout.history_root().join("chunks");
    std::fs::write(
        chunks.join(format!("{}.cborseq", "ab".repeat(16))),
        b"not a header",
    )
    .unwrap();
    let error = plan_store_delete(writable(&layout), &a).unwrap_err();
    assert!(
        matches!(error, DeleteStoreError::UnreadableHeader { .. }),
        "{error}"
    );
    // Nothing was destroyed: the key still opens the data (beside the corrupt file).
    let reloaded = KeyCustody::load(&provider, &a, &a.primary_reference()).unwrap();
    let report = StoreReader::<History>::new(open_read(&layout))
        .read(&reloaded.history_keys())
        .unwrap();
    assert_eq!(report.records().count(), 16);
}

#[test]
fn delete_cannot_be_planned_while_a_writer_holds_the_lock() {
    let dir = tempfile::tempdir().unwrap();
    let provider = InMemoryProvider::new(Box::new(SeededEntropy::new(5))).unwrap();
    let a = Namespace::new("alpha").unwrap();
    let custody = Arc::new(KeyCustody::open(&provider, &a).unwrap());
    let layout = StoreLayout::in_namespace_dir(&dir.path().join("alpha"));
    write_store(&layout, &custody);
    let writer_storage = open_write(&layout);
    assert!(
        open_store(&layout, Access::Write).is_err(),
        "the lock is held"
    );
    // A read-only storage cannot stand in for the lock.
    let read_only = open_store(&layout, Access::Read).unwrap();
    assert!(matches!(
        plan_store_delete(read_only, &a),
        Err(DeleteStoreError::ReadOnly)
    ));
    drop(writer_storage);
    let plan = plan_store_delete(writable(&layout), &a).unwrap();
    let proof = destroy_namespace(&provider, &a).unwrap();
    delete_store_files(plan, &proof).unwrap();
    assert!(!layout.history_root().exists());
}
