//! `annal` end to end with two stores of one namespace (`--store A`, `--store B`) in the user's
//! real kernel keyring: the second store's `enable` is refused the first one's key, `doctor`
//! says why, `enable --own-key` gives it a key of its own, and `delete` of one leaves the other
//! readable. Skipped (`NOT RUN`) without a usable kernel keyring unless
//! `ANNAL_REQUIRE_REAL_KEY_STORES=1`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use annal_engine::keys::StoreState;
use support::Sandbox;

/// With this set to `1`, a test that cannot reach the kernel keyring fails instead of skipping.
const REQUIRE_ENV: &str = "ANNAL_REQUIRE_REAL_KEY_STORES";

#[test]
fn a_second_store_of_the_namespace_is_refused_until_told_and_deletes_only_its_own_key() {
    let report = annal_engine::keys::probe_keyutils();
    if report.state != StoreState::Usable {
        let why = format!(
            "a_second_store_of_the_namespace_is_refused_until_told: NOT RUN: the kernel keyring \
             is {}",
            report.state.as_str()
        );
        assert!(
            std::env::var(REQUIRE_ENV).as_deref() != Ok("1"),
            "{why}, but {REQUIRE_ENV}=1"
        );
        eprintln!("{why}");
        return;
    }
    let sandbox = Sandbox::new();
    let a = sandbox.path("A");
    let b = sandbox.path("B");
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
    let at = |store: &str, args: &[&str]| {
        let mut all = vec!["--store", store, "--key-store", "keyutils", "--no-daemon"];
        all.extend_from_slice(args);
        sandbox.run(&all)
    };
    let doctor = |store: &str| {
        let output = at(store, &["doctor", "--json"]);
        let value: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        (
            value["store_key"].as_str().unwrap().to_owned(),
            value["store_key_state"].as_str().unwrap().to_owned(),
        )
    };

    assert!(at(a, &["enable"]).status.success());
    assert_eq!(doctor(a), ("reference".into(), "usable".into()));

    let refused = at(b, &["enable"]);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("key_unavailable"), "{stderr}");
    assert_eq!(doctor(b), ("none".into(), "owned_by_another_store".into()));
    let text = String::from_utf8(at(b, &["doctor"]).stdout).unwrap();
    assert!(text.contains("belongs to another store"), "{text}");

    let told = at(b, &["enable", "--own-key"]);
    assert!(
        told.status.success(),
        "{}",
        String::from_utf8_lossy(&told.stderr)
    );
    assert_eq!(doctor(b), ("store".into(), "usable".into()));
    assert_eq!(doctor(a), ("reference".into(), "usable".into()));

    // Deleting B destroys only B's key: A still reads and verifies clean.
    assert!(at(b, &["delete", "--yes"]).status.success());
    assert_eq!(doctor(a), ("reference".into(), "usable".into()));
    let verified = at(a, &["verify", "--json"]);
    assert_eq!(
        verified.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&verified.stdout)
    );
    assert!(at(a, &["delete", "--yes"]).status.success());
}

#[test]
fn two_homes_of_one_user_on_the_persistent_keyring_keep_one_key_each() {
    let report = annal_engine::keys::probe_keyutils();
    if report.state != StoreState::Usable {
        let why = format!(
            "two_homes_of_one_user_on_the_persistent_keyring: NOT RUN: the kernel keyring is {}",
            report.state.as_str()
        );
        assert!(
            std::env::var(REQUIRE_ENV).as_deref() != Ok("1"),
            "{why}, but {REQUIRE_ENV}=1"
        );
        eprintln!("{why}");
        return;
    }
    // Two HOMEs (and XDG_STATE_HOMEs) of this uid, one namespace, each on its default store;
    // the kernel's persistent keyring is the uid's, so both see the same credentials.
    let first = Sandbox::new();
    let mut second = Sandbox::new();
    second.namespace = first.namespace.clone();
    let run = |sandbox: &Sandbox, args: &[&str]| {
        let mut all = vec!["--key-store", "keyutils", "--no-daemon"];
        all.extend_from_slice(args);
        sandbox.run(&all)
    };
    let state = |sandbox: &Sandbox| {
        let output = run(sandbox, &["doctor", "--json"]);
        let value: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        value["store_key_state"].as_str().unwrap().to_owned()
    };
    assert!(run(&first, &["enable"]).status.success());
    assert!(!run(&second, &["enable"]).status.success());
    assert_eq!(state(&second), "owned_by_another_store");
    assert!(run(&second, &["enable", "--own-key"]).status.success());
    assert_eq!(state(&first), "usable");
    assert_eq!(state(&second), "usable");
    for sandbox in [&first, &second] {
        let verified = run(sandbox, &["verify", "--json"]);
        assert_eq!(verified.status.code(), Some(0));
    }
    // The second HOME's delete leaves the first's history readable.
    assert!(run(&second, &["delete", "--yes"]).status.success());
    assert_eq!(state(&first), "usable");
    assert_eq!(run(&first, &["verify", "--json"]).status.code(), Some(0));
}
