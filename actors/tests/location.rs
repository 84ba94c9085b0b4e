//! Where `annal` puts a store and its daemon's socket, from the environment alone
//! (`location.rs`, `docs/cli.md` "Where the daemon's socket is"): `annal socket` in a cleared
//! environment, for each combination that matters. The base directories come from etcetera's
//! XDG strategy; these cases pin the documented order and annal's stricter rules around it: an
//! XDG variable counts only as an absolute path (the XDG spec), and a default under the home only
//! when `HOME` names it as an absolute path.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The namespace every case resolves (nothing is created: `annal socket` only prints).
const NAMESPACE: &str = "where";

/// Hex characters of the store path's hash in the socket's name (`location.rs`).
const SOCKET_NAME_HASH_HEX_CHARS: usize = 16;

/// `annal --namespace where socket` with exactly `env`.
fn socket(env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_annal"));
    command.env_clear();
    for (name, value) in env {
        command.env(name, value);
    }
    command
        .args(["--namespace", NAMESPACE, "socket"])
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// The socket `annal socket` printed under `env` (asserting it succeeded).
fn resolved(env: &[(&str, &str)]) -> PathBuf {
    let output = socket(env);
    assert!(
        output.status.success(),
        "{env:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    PathBuf::from(String::from_utf8(output.stdout).unwrap().trim())
}

/// The socket of the store at `store` in the socket directory `dir`.
fn expected(dir: &Path, store: &Path) -> PathBuf {
    let hash = blake3::hash(store.as_os_str().as_encoded_bytes());
    dir.join(format!(
        "{}.sock",
        &hash.to_hex()[..SOCKET_NAME_HASH_HEX_CHARS]
    ))
}

/// The socket directory when no `XDG_RUNTIME_DIR` counts: a private `/run/user/UID/annal`, else
/// the state directory's `.run`.
fn without_runtime_dir(state: &Path) -> PathBuf {
    let uid = rustix::process::geteuid().as_raw();
    let login = PathBuf::from(format!("/run/user/{uid}"));
    let private = std::fs::metadata(&login)
        .is_ok_and(|m| m.is_dir() && m.uid() == uid && m.mode() & 0o077 == 0);
    if private {
        login.join("annal")
    } else {
        state.join("annal").join(".run")
    }
}

#[test]
fn the_documented_order_from_the_environment() {
    let home = Path::new("/nonexistent/home");
    let default_state = home.join(".local").join("state");
    let default_store = default_state.join("annal").join(NAMESPACE);

    // 1. XDG_RUNTIME_DIR; the store under HOME's default state directory.
    assert_eq!(
        resolved(&[
            ("HOME", "/nonexistent/home"),
            ("XDG_RUNTIME_DIR", "/nonexistent/run")
        ]),
        expected(Path::new("/nonexistent/run/annal"), &default_store)
    );
    // XDG_STATE_HOME moves the store (and so the socket's name).
    assert_eq!(
        resolved(&[
            ("HOME", "/nonexistent/home"),
            ("XDG_STATE_HOME", "/nonexistent/state"),
            ("XDG_RUNTIME_DIR", "/nonexistent/run")
        ]),
        expected(
            Path::new("/nonexistent/run/annal"),
            &Path::new("/nonexistent/state/annal").join(NAMESPACE)
        )
    );
    // 2 or 3 without XDG_RUNTIME_DIR.
    assert_eq!(
        resolved(&[("HOME", "/nonexistent/home")]),
        expected(&without_runtime_dir(&default_state), &default_store)
    );
    // An explicit XDG_STATE_HOME is used without HOME.
    let state = Path::new("/nonexistent/state");
    assert_eq!(
        resolved(&[("XDG_STATE_HOME", "/nonexistent/state")]),
        expected(
            &without_runtime_dir(state),
            &state.join("annal").join(NAMESPACE)
        )
    );
}

#[test]
fn relative_xdg_variables_are_ignored_as_the_xdg_spec_says() {
    let default_state = Path::new("/nonexistent/home/.local/state");
    let default_store = default_state.join("annal").join(NAMESPACE);
    assert_eq!(
        resolved(&[
            ("HOME", "/nonexistent/home"),
            ("XDG_STATE_HOME", "relative/state"),
            ("XDG_RUNTIME_DIR", "relative/run")
        ]),
        expected(&without_runtime_dir(default_state), &default_store)
    );
    assert_eq!(
        resolved(&[
            ("HOME", "/nonexistent/home"),
            ("XDG_STATE_HOME", ""),
            ("XDG_RUNTIME_DIR", "")
        ]),
        expected(&without_runtime_dir(default_state), &default_store)
    );
}

#[test]
fn without_a_home_the_environment_names_there_is_no_default_store() {
    let cases: [&[(&str, &str)]; 5] = [
        &[],
        &[("XDG_RUNTIME_DIR", "/nonexistent/run")],
        &[("HOME", ""), ("XDG_RUNTIME_DIR", "/nonexistent/run")],
        &[
            ("HOME", "relative/home"),
            ("XDG_RUNTIME_DIR", "/nonexistent/run"),
        ],
        &[
            ("HOME", "relative/home"),
            ("XDG_STATE_HOME", "relative/state"),
        ],
    ];
    for env in cases {
        let output = socket(env);
        assert_eq!(output.status.code(), Some(2), "{env:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("XDG_STATE_HOME") && stderr.contains("--store"),
            "{env:?}: {stderr}"
        );
    }
    // With --store, the runtime directory still places the socket.
    let mut command = Command::new(env!("CARGO_BIN_EXE_annal"));
    let output = command
        .env_clear()
        .env("XDG_RUNTIME_DIR", "/nonexistent/run")
        .args(["--store", "/nonexistent/store", "socket"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(output.status.success());
    assert_eq!(
        PathBuf::from(String::from_utf8(output.stdout).unwrap().trim()),
        expected(
            Path::new("/nonexistent/run/annal"),
            Path::new("/nonexistent/store")
        )
    );
}
