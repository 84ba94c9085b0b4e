//! `annal doctor`: output shape, exit codes, and the real stores when `.ci/test` provides them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

/// Set to `1` by `.ci/test`: both real stores must be usable.
const REQUIRE_ENV: &str = "ANNAL_REQUIRE_REAL_KEY_STORES";

/// Set to `1` by `.ci/test` in the never-unlocked D-Bus session.
const EXPECT_LOCKED_ENV: &str = "ANNAL_EXPECT_LOCKED_SECRET_SERVICE";

fn env_is_one(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| v == "1")
}

fn doctor(args: &[&str]) -> (i32, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_annal"))
        .arg("doctor")
        .args(args)
        .output()
        .unwrap();
    (
        output.status.code().unwrap(),
        String::from_utf8(output.stdout).unwrap(),
    )
}

fn store<'a>(report: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    report["stores"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["store"] == name)
        .unwrap()
}

#[test]
fn doctor_json_has_one_shape_and_a_consistent_exit_code() {
    let (code, stdout) = doctor(&["--json"]);
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["key_store"], "auto");
    let stores = report["stores"].as_array().unwrap();
    assert_eq!(stores.len(), 2);
    let mut usable = false;
    for s in stores {
        let state = s["state"].as_str().unwrap();
        assert!(["usable", "locked", "missing"].contains(&state), "{s}");
        assert!(!s["hint"].as_str().unwrap().is_empty());
        if state == "usable" {
            usable = true;
            assert!(s["category"].is_null());
        } else {
            let category = s["category"].as_str().unwrap();
            assert!(category.starts_with("key_"), "{category}");
        }
        assert_eq!(s.as_object().unwrap().len(), 4, "no extra fields: {s}");
    }
    assert_eq!(code, if usable { 0 } else { 1 });
    assert_eq!(report["selected"].is_null(), !usable);
    // No raw D-Bus or OS error text.
    for needle in ["org.freedesktop", "/run/", "Error", "errno"] {
        assert!(!stdout.contains(needle), "{needle} in {stdout}");
    }

    if env_is_one(REQUIRE_ENV) && !env_is_one(EXPECT_LOCKED_ENV) {
        assert_eq!(code, 0);
        assert_eq!(store(&report, "secret-service")["state"], "usable");
        assert_eq!(store(&report, "keyutils")["state"], "usable");
        assert_eq!(report["selected"], "secret-service");
        let (code, stdout) = doctor(&["--json", "--key-store", "keyutils"]);
        assert_eq!(code, 0);
        let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(report["selected"], "keyutils");
    }
}

#[test]
fn doctor_text_names_each_store() {
    let (code, stdout) = doctor(&[]);
    assert!(code == 0 || code == 1);
    assert!(stdout.contains("secret-service"), "{stdout}");
    assert!(stdout.contains("keyutils"), "{stdout}");
    assert!(stdout.contains("--key-store auto selects:"), "{stdout}");
}

#[test]
fn doctor_rejects_an_unknown_key_store() {
    let output = Command::new(env!("CARGO_BIN_EXE_annal"))
        .args(["doctor", "--key-store", "file"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
}

/// Runs in `.ci/test`'s never-unlocked D-Bus session.
#[test]
fn doctor_reports_a_locked_secret_service() {
    if !env_is_one(EXPECT_LOCKED_ENV) {
        eprintln!(
            "doctor_reports_a_locked_secret_service: NOT RUN: needs {EXPECT_LOCKED_ENV}=1 \
             (.ci/test runs it)"
        );
        return;
    }
    let (_, stdout) = doctor(&["--json", "--key-store", "secret-service"]);
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let ss = store(&report, "secret-service");
    assert_eq!(ss["state"], "locked", "{report}");
    assert_eq!(ss["category"], "key_locked");
    assert!(report["selected"].is_null());
}

/// Writes a store of namespace `work` at `dir` through the real engine (in-memory keys) with
/// `choice`, and stops the engine before returning.
fn store_written(
    dir: &std::path::Path,
    provider: &std::sync::Arc<dyn annal_engine::keys::KeyProvider>,
    choice: annal_engine::keys::KeyChoice,
) {
    let layout = annal_engine::storage::StoreLayout::in_namespace_dir(dir);
    let mut config = annal_actors::EngineConfig::new(
        layout,
        annal_engine::keys::Namespace::new("work").unwrap(),
    );
    config.key_choice = choice;
    let engine = annal_actors::Engine::start(config, std::sync::Arc::clone(provider)).unwrap();
    engine.enable().unwrap();
    engine.flush().unwrap();
    assert!(engine.shutdown().drained);
}

#[test]
fn doctor_says_which_key_naming_the_store_uses() {
    use annal_engine::keys::{InMemoryProvider, KeyChoice, KeyProvider};
    let dir = tempfile::tempdir().unwrap();
    let provider: std::sync::Arc<dyn KeyProvider> = std::sync::Arc::new(
        InMemoryProvider::new(Box::new(annal_engine::entropy::SeededEntropy::new(1))).unwrap(),
    );
    let a = dir.path().join("a");
    let b = dir.path().join("b");
    store_written(&a, &provider, KeyChoice::Reference);
    store_written(&b, &provider, KeyChoice::Own);
    let naming = |store: &std::path::Path| {
        let (_, stdout) = doctor_at(store, &["--json"]);
        let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        // Only the naming's name: never a key reference, a store id or a path.
        let text = report.to_string();
        assert!(!text.contains("com.trycua"), "{text}");
        assert!(!text.contains(store.to_str().unwrap()), "{text}");
        report["store_key"].clone()
    };
    assert_eq!(naming(&a), "reference");
    assert_eq!(naming(&b), "store");
    assert!(naming(&dir.path().join("none")).is_null());
    let (_, text) = doctor_at(&a, &[]);
    assert!(
        text.contains("this store's key naming: reference"),
        "{text}"
    );
}

/// `annal --store DIR --namespace work doctor ARGS`.
fn doctor_at(store: &std::path::Path, args: &[&str]) -> (i32, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_annal"))
        .arg("--store")
        .arg(store)
        .args(["--namespace", "work", "doctor"])
        .args(args)
        .output()
        .unwrap();
    (
        output.status.code().unwrap(),
        String::from_utf8(output.stdout).unwrap(),
    )
}

/// Destroys, when dropped, the keys and checkpoints of the stores at its paths and every key
/// of their namespace in the real kernel keyring.
struct NamespaceCleanup(
    std::sync::Arc<dyn annal_engine::keys::KeyProvider>,
    annal_engine::keys::Namespace,
    Vec<std::path::PathBuf>,
);

impl Drop for NamespaceCleanup {
    fn drop(&mut self) {
        for store in &self.2 {
            let layout = annal_engine::storage::StoreLayout::in_namespace_dir(store);
            if let Ok(scope) = annal_engine::store::key_scope(&layout) {
                let _ = annal_engine::keys::destroy_store_keys(self.0.as_ref(), &self.1, &scope);
            }
        }
        let _ = annal_engine::keys::destroy_namespace(self.0.as_ref(), &self.1);
    }
}

#[test]
fn doctor_says_when_the_namespaces_key_belongs_to_another_store() {
    use annal_engine::keys::{
        CredentialNaming, KeyProvider, KeyutilsProvider, Namespace, StoreState,
    };
    let report = annal_engine::keys::probe_keyutils();
    if report.state != StoreState::Usable {
        let why = format!(
            "doctor_says_when_the_namespaces_key_belongs_to_another_store: NOT RUN: the kernel \
             keyring is {}",
            report.state.as_str()
        );
        assert!(!env_is_one(REQUIRE_ENV), "{why}, but {REQUIRE_ENV}=1");
        eprintln!("{why}");
        return;
    }
    let provider: std::sync::Arc<dyn KeyProvider> = std::sync::Arc::new(
        KeyutilsProvider::open(
            CredentialNaming::Annal,
            Box::new(annal_engine::entropy::OsEntropy),
        )
        .unwrap(),
    );
    let mut random = [0u8; 4];
    annal_engine::entropy::Entropy::fill(&mut annal_engine::entropy::OsEntropy, &mut random)
        .unwrap();
    let ns = format!(
        "doctor-owner-{}-{}",
        std::process::id(),
        random
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    );
    let namespace = Namespace::new(&ns).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    let _cleanup = NamespaceCleanup(
        std::sync::Arc::clone(&provider),
        namespace.clone(),
        vec![a.clone(), b.clone()],
    );
    let start = |store: &std::path::Path| {
        annal_actors::Engine::start(
            annal_actors::EngineConfig::new(
                annal_engine::storage::StoreLayout::in_namespace_dir(store),
                namespace.clone(),
            ),
            std::sync::Arc::clone(&provider),
        )
        .unwrap()
    };
    let engine = start(&a);
    engine.enable().unwrap();
    engine.flush().unwrap();
    assert!(engine.shutdown().drained);
    let engine = start(&b);
    assert!(
        engine.enable().is_err(),
        "the second store is refused A's key"
    );
    assert!(engine.shutdown().drained);

    let report = |store: &std::path::Path| {
        let output = Command::new(env!("CARGO_BIN_EXE_annal"))
            .arg("--store")
            .arg(store)
            .args([
                "--namespace",
                &ns,
                "--key-store",
                "keyutils",
                "doctor",
                "--json",
            ])
            .output()
            .unwrap();
        let value: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        (value["store_key"].clone(), value["store_key_state"].clone())
    };
    assert_eq!(report(&a), ("reference".into(), "usable".into()));
    assert_eq!(report(&b), ("none".into(), "owned_by_another_store".into()));
}
