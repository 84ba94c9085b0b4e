//! Where a store, its daemon's socket and its key-store record live. [`Location::resolve`] is
//! the one place every front-end (the owner's commands, `annal serve`, `annal mcp`) resolves
//! them, so a server an MCP host starts with a bare environment reaches the same daemon and
//! store as the owner's shell.
//!
//! - Store: `--store DIR`, else `$XDG_STATE_HOME/annal/<namespace>/`, else
//!   `~/.local/state/annal/<namespace>/` (the namespace directory: `computer-history/` is the
//!   contract store, `engine/` annal's sidecar).
//! - Socket: `--socket PATH`, else `<socket dir>/<16 hex of the store path's BLAKE3>.sock`, the
//!   socket directory being the first of:
//!   1. `$XDG_RUNTIME_DIR/annal/` when `XDG_RUNTIME_DIR` is set (to an absolute path);
//!   2. `/run/user/<uid>/annal/` when `/run/user/<uid>` is this user's and 0700 (where a login
//!      session puts the runtime directory; MCP hosts often start servers without
//!      `XDG_RUNTIME_DIR`);
//!   3. `$XDG_STATE_HOME/annal/.run/`, else `~/.local/state/annal/.run/` (annal's own private
//!      directory; `.run` is a name no namespace can take).
//!
//!   The socket directory is made 0700 and must stay the user's (`runtime_dir`), the socket is
//!   0600. With none of these (no HOME either), no daemon: `--no-daemon` still works.
//!
//! The base directories (`XDG_STATE_HOME`, `XDG_RUNTIME_DIR`, the home) are read by
//! [`BaseDirs`] (the `etcetera` crate's XDG strategy): an XDG variable counts only when it is
//! an absolute path, and a default under the home only when `HOME` is set to one. The
//! `/run/user/<uid>` check (step 2) is annal's own.
//! - Key-store record: `<store>/key-store`, written after the first successful `enable` (the key
//!   exists then), so a later `auto` never picks another credential store than the one holding
//!   the key.

use std::path::{Path, PathBuf};

use annal_actors::daemon::{check_private_dir, create_private_dir};
use etcetera::BaseStrategy;
use etcetera::base_strategy::Xdg;

use annal_engine::entropy::OsEntropy;
use annal_engine::keys::{
    CredentialNaming, KeyCustody, KeyProvider, KeyStoreChoice, Namespace, open_provider,
};
use annal_engine::storage::StoreLayout;

use crate::CliError;

/// Name of the key-store record inside the store directory.
const KEY_STORE_RECORD_FILE_NAME: &str = "key-store";

/// Longest key-store record read, in bytes (the longest choice name is 14).
const KEY_STORE_RECORD_MAX_BYTES: u64 = 64;

/// Hex characters of the store path's hash in the socket's name (64 bits: no two stores of one
/// user collide in practice, and the path stays under the 108-byte socket path limit).
const SOCKET_NAME_HASH_HEX_CHARS: usize = 16;

/// Where a login session puts a user's runtime directory, before the uid.
const LOGIN_RUNTIME_DIR_PARENT: &str = "/run/user";

/// Name of the directory that holds annal's sockets inside a runtime directory.
const RUNTIME_SOCKET_DIR_NAME: &str = "annal";

/// Name of annal's own socket directory inside `$XDG_STATE_HOME/annal/`: a name no namespace
/// can take (namespaces are `[A-Za-z0-9_-]`), so it never meets a store.
const PRIVATE_SOCKET_DIR_NAME: &str = ".run";

/// Mode of every file the CLI creates in the store directory (the key-store record).
const PRIVATE_FILE_MODE: u32 = 0o600;

/// One store, as the global options name it.
#[derive(Debug, Clone)]
pub struct Location {
    /// The namespace directory.
    pub dir: PathBuf,
    /// The namespace (its key's name).
    pub namespace: Namespace,
    /// The credential store asked for.
    pub key_store: KeyStoreChoice,
    /// The daemon's socket, when one can be placed.
    pub socket: Option<PathBuf>,
}

impl Location {
    /// Resolves the global options against the environment.
    pub fn resolve(
        store: Option<&Path>,
        namespace: &str,
        key_store: KeyStoreChoice,
        socket: Option<&Path>,
    ) -> Result<Self, CliError> {
        let namespace = Namespace::new(namespace).map_err(|e| {
            CliError::usage(format!(
                "--namespace: {e} (use letters, digits, '.', '_' or '-')"
            ))
        })?;
        let dir = match store {
            Some(dir) => absolute(dir)?,
            None => default_state_home()?.join("annal").join(namespace.as_str()),
        };
        let socket = match socket {
            Some(path) => Some(absolute(path)?),
            None => socket_dir().map(|run| run.join(socket_name(&dir))),
        };
        Ok(Self {
            dir,
            namespace,
            key_store,
            socket,
        })
    }

    /// The store's layout.
    pub fn layout(&self) -> StoreLayout {
        StoreLayout::in_namespace_dir(&self.dir)
    }

    /// The socket, or why there is none.
    pub fn socket(&self) -> Result<&Path, CliError> {
        self.socket.as_deref().ok_or_else(|| {
            CliError::unavailable(
                "there is no place for the daemon's socket (neither XDG_RUNTIME_DIR, a private \
                 /run/user/UID, XDG_STATE_HOME nor HOME): set one, pass --socket PATH, or run \
                 this command with --no-daemon",
            )
        })
    }

    /// Creates the store directory (0700) if it is missing.
    pub fn create_dir(&self) -> Result<(), CliError> {
        private_dir(&self.dir)
    }

    /// The credential store this store's key lives in, as recorded by the first engine that
    /// opened it; `None` before that.
    pub fn recorded_key_store(&self) -> Result<Option<KeyStoreChoice>, CliError> {
        use std::io::Read;
        let path = self.dir.join(KEY_STORE_RECORD_FILE_NAME);
        let mut text = String::new();
        match std::fs::File::open(&path) {
            Ok(file) => {
                file.take(KEY_STORE_RECORD_MAX_BYTES)
                    .read_to_string(&mut text)
                    .map_err(|e| CliError::unavailable(format!("{}: {e}", path.display())))?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(CliError::unavailable(format!("{}: {e}", path.display()))),
        }
        text.trim().parse().map(Some).map_err(|_| {
            CliError::usage(format!(
                "{} does not name a credential store (secret-service or keyutils); fix or \
                 remove it",
                path.display()
            ))
        })
    }

    /// Records `kind` as the store's credential store. The file is created 0600 (never with
    /// the umask's mode and narrowed later); one an older annal wrote wider is narrowed through
    /// its open descriptor.
    pub fn record_key_store(&self, kind: &str) -> Result<(), CliError> {
        use std::io::Write;
        use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
        let path = self.dir.join(KEY_STORE_RECORD_FILE_NAME);
        let failed = |e: std::io::Error| CliError::unavailable(format!("{}: {e}", path.display()));
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(PRIVATE_FILE_MODE)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .open(&path)
            .map_err(failed)?;
        if file.metadata().map_err(failed)?.mode() & 0o7777 != PRIVATE_FILE_MODE {
            file.set_permissions(std::fs::Permissions::from_mode(PRIVATE_FILE_MODE))
                .map_err(failed)?;
        }
        file.write_all(format!("{kind}\n").as_bytes())
            .map_err(failed)
    }

    /// The choice to open: the recorded store when there is one (an explicit other choice is
    /// refused: the key is not there), else what was asked for.
    pub fn effective_key_store(&self) -> Result<KeyStoreChoice, CliError> {
        match self.recorded_key_store()? {
            None => Ok(self.key_store),
            Some(recorded) if self.key_store == KeyStoreChoice::Auto => Ok(recorded),
            Some(recorded) if recorded == self.key_store => Ok(recorded),
            Some(recorded) => Err(CliError::usage(format!(
                "this store's key is in the {recorded} store, not {}: pass --key-store \
                 {recorded} (or auto)",
                self.key_store
            ))),
        }
    }
}

impl Location {
    /// The store's credential store, opened (the recorded one, see `effective_key_store`).
    pub fn key_provider(&self) -> Result<Box<dyn KeyProvider>, CliError> {
        let choice = self.effective_key_store()?;
        open_provider(choice, CredentialNaming::Annal, Box::new(OsEntropy)).map_err(|e| {
            CliError::unavailable(format!(
                "the {choice} credential store cannot be used: {e}; `annal doctor` says which \
                 store works here"
            ))
        })
    }

    /// The store's key, read (never created) from its credential store.
    pub fn store_key(&self) -> Result<KeyCustody, CliError> {
        self.store_key_in(self.key_provider()?.as_ref())
    }

    /// The store's key, read (never created) from `provider`, its credential store opened by
    /// [`Self::key_provider`] (for a command that reads more from that store).
    /// Which key is the store's: what its id and chunk headers say (`keys::open_store_key`).
    pub fn store_key_in(&self, provider: &dyn KeyProvider) -> Result<KeyCustody, CliError> {
        let namespace = &self.namespace;
        let scope = annal_engine::store::key_scope(&self.layout())
            .map_err(|e| CliError::found(format!("{e}")))?;
        annal_engine::keys::open_store_key(
            provider,
            namespace,
            &scope,
            annal_engine::keys::OpenMode::Read,
        )
        .map_err(|e| {
            CliError::unavailable(format!(
                "the key of namespace {} cannot be read ({}): `annal doctor` checks the \
                 credential stores",
                namespace.as_str(),
                e.category().as_str()
            ))
        })
    }
}

/// The socket file name for the store at `dir`.
fn socket_name(dir: &Path) -> String {
    let hash = blake3::hash(dir.as_os_str().as_encoded_bytes());
    let hex = hash.to_hex();
    format!("{}.sock", &hex[..SOCKET_NAME_HASH_HEX_CHARS])
}

/// `path` made absolute against the current directory (not canonicalized: it may not exist).
fn absolute(path: &Path) -> Result<PathBuf, CliError> {
    std::path::absolute(path).map_err(|e| CliError::usage(format!("{}: {e}", path.display())))
}

/// The XDG base directories, as etcetera's `Xdg` strategy reads them: `$XDG_STATE_HOME`,
/// `$XDG_CONFIG_HOME` and `$XDG_RUNTIME_DIR` count only when they are absolute paths (the XDG
/// spec: a relative one is invalid and ignored), else the defaults under the home directory.
///
/// etcetera takes the home from `HOME`, else from the password database. annal derives a
/// directory from the home only when `HOME` names it (an absolute path): a process whose
/// environment has no `HOME` gets no home-derived directory, and is told to pass `--store`
/// (as before). With no home at all (no `HOME` and no password entry) etcetera names no base
/// directory, not even `$XDG_RUNTIME_DIR`'s.
pub struct BaseDirs {
    /// The strategy, when a home was found.
    xdg: Option<Xdg>,
}

impl BaseDirs {
    /// The base directories of this process's environment.
    pub fn from_env() -> Self {
        Self {
            xdg: Xdg::new().ok(),
        }
    }

    /// `$XDG_STATE_HOME`, else `$HOME/.local/state`.
    pub fn state_home(&self) -> Option<PathBuf> {
        let xdg = self.xdg.as_ref()?;
        home_named(xdg, xdg.state_dir()?, &[".local", "state"])
    }

    /// `$XDG_CONFIG_HOME`, else `$HOME/.config`.
    pub fn config_home(&self) -> Option<PathBuf> {
        let xdg = self.xdg.as_ref()?;
        home_named(xdg, xdg.config_dir(), &[".config"])
    }

    /// `$XDG_RUNTIME_DIR`, when it is set to an absolute path.
    pub fn runtime_dir(&self) -> Option<PathBuf> {
        self.xdg.as_ref()?.runtime_dir()
    }
}

/// `dir`, unless it is the default `home/<default>` and `HOME` does not name that home as an
/// absolute path (etcetera's home then came from the password database, or from a relative
/// `HOME`).
fn home_named(xdg: &Xdg, dir: PathBuf, default: &[&str]) -> Option<PathBuf> {
    let from_home = dir
        == default
            .iter()
            .fold(xdg.home_dir().to_path_buf(), |d, c| d.join(c));
    let named = std::env::var_os("HOME").is_some_and(|home| Path::new(&home).is_absolute());
    (!from_home || named).then_some(dir)
}

/// `$XDG_STATE_HOME`, else `$HOME/.local/state` ([`BaseDirs::state_home`]).
fn default_state_home() -> Result<PathBuf, CliError> {
    BaseDirs::from_env().state_home().ok_or_else(|| {
        CliError::usage(
            "neither XDG_STATE_HOME nor HOME is set to an absolute path: set one, or pass \
             --store DIR",
        )
    })
}

/// The directory for daemon sockets, in the documented order (module doc): `None` only when
/// neither a runtime directory nor a state directory can be named.
fn socket_dir() -> Option<PathBuf> {
    let base = BaseDirs::from_env();
    if let Some(run) = base.runtime_dir() {
        return Some(run.join(RUNTIME_SOCKET_DIR_NAME));
    }
    let login =
        Path::new(LOGIN_RUNTIME_DIR_PARENT).join(rustix::process::geteuid().as_raw().to_string());
    if check_private_dir(&login).is_ok() {
        return Some(login.join(RUNTIME_SOCKET_DIR_NAME));
    }
    base.state_home()
        .map(|state| state.join("annal").join(PRIVATE_SOCKET_DIR_NAME))
}

/// Creates `dir` (and its parents) with mode 0700 when missing; refuses an existing directory
/// that another user owns or that others may enter (the one rule, `runtime_dir`).
pub fn private_dir(dir: &Path) -> Result<(), CliError> {
    create_private_dir(dir).map_err(|e| CliError::unavailable(e.to_string()))
}
