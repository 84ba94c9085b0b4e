//! `annal mcp-config --actor A [--manifest M | --write-manifest PATH] [--client C]`: the MCP
//! server entry an agent host needs, printed as the JSON block its client reads.
//!
//! - `claude`, `cursor` and `generic` read `{"mcpServers": {NAME: {"command", "args"}}}`;
//!   `vscode` reads `{"servers": {NAME: {"type": "stdio", "command", "args"}}}`.
//! - `command` is the absolute path of this `annal` binary (`std::env::current_exe`), so the
//!   host needs no `PATH`. `args` start `["mcp", "--actor", A]`, then `--manifest` (absolute)
//!   when one is given, then the store options as this shell resolves them (`--namespace`,
//!   `--store`, `--socket`, and `--key-store` unless `auto`): a host starts its servers with a
//!   bare environment (the official SDKs pass only `HOME`, `PATH`, `USER`, `SHELL`, `TERM`,
//!   `LOGNAME`), and pinned options make its server reach the same store and daemon as the
//!   owner's shell whatever that environment holds.
//! - `--manifest M` is read and parsed with annal's manifest parser first: a manifest the server
//!   would refuse at start is refused here (exit 2), naming the field, never a value.
//! - `--write-manifest PATH` writes a starter bounded-mode manifest (the contract's version 3
//!   form: both operations and both tools, one hour, idle ten minutes; 0600, never over an
//!   existing file) and points the entry's `--manifest` at it.
//!
//! Nothing is started, connected or granted: writing the entry into a host's configuration is
//! the owner's approval, and the manifest takes effect when the host starts the server.

use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use annal_engine::keys::KeyStoreChoice;
use annal_engine::policy::manifest::{
    CONTRACT_EXAMPLE_MANIFEST, MANIFEST_MAX_LEN_BYTES, Manifest, ManifestError,
};
use annal_engine::policy::{ACTOR_ID_MAX_LEN_CHARS, ActorId};
use serde_json::{Value, json};

use crate::location::Location;
use crate::owner::finish;
use crate::{CliError, EXIT_UNAVAILABLE, EXIT_USAGE};

/// The server's name in the printed block.
pub const SERVER_NAME: &str = "annal-history";

/// Mode of a manifest `--write-manifest` creates.
const MANIFEST_FILE_MODE: u32 = 0o600;

/// The comment line the starter manifest opens with.
const STARTER_MANIFEST_HEADER: &str = "# annal bounded-mode manifest (docs/policy.md). Approved \
     for the actor when its `annal mcp --manifest` starts.\n";

/// The starter manifest `--write-manifest` writes: the contract's example bounded form
/// ([`CONTRACT_EXAMPLE_MANIFEST`]: both operations, one hour, idle ten minutes) under a comment
/// saying what it is (parsed by a test with [`Manifest::parse`]).
pub fn starter_manifest() -> String {
    format!("{STARTER_MANIFEST_HEADER}{CONTRACT_EXAMPLE_MANIFEST}")
}

/// The MCP clients whose configuration block this prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Client {
    /// Claude Desktop and Claude Code: `mcpServers`.
    Claude,
    /// Cursor: `mcpServers`.
    Cursor,
    /// Visual Studio Code: `servers`, with `"type": "stdio"`.
    Vscode,
    /// Any client that reads the common `mcpServers` block.
    Generic,
}

/// Arguments of `annal mcp-config`.
#[derive(Debug, clap::Args)]
pub struct McpConfigArgs {
    /// The agent the server speaks for (its grants are per actor).
    #[arg(long)]
    pub actor: String,
    /// A bounded-mode manifest the server approves at start (checked now).
    #[arg(long, value_name = "FILE", conflicts_with = "write_manifest")]
    pub manifest: Option<PathBuf>,
    /// Whose configuration format to print.
    #[arg(long, value_enum, default_value_t = Client::Generic)]
    pub client: Client,
    /// Write a starter bounded-mode manifest (version 3) to PATH and use it.
    #[arg(long, value_name = "PATH")]
    pub write_manifest: Option<PathBuf>,
}

/// Why `mcp-config` printed nothing.
#[derive(Debug)]
pub enum ConfigError {
    /// `--actor` is not an actor id.
    Actor,
    /// The manifest cannot be read.
    ManifestUnreadable {
        /// The file.
        path: PathBuf,
        /// What the file system said.
        error: std::io::Error,
    },
    /// The manifest is not one `annal mcp` would approve.
    ManifestRefused {
        /// The file.
        path: PathBuf,
        /// Why (names a field, never a value).
        error: ManifestError,
    },
    /// `--write-manifest` names a file that exists.
    ManifestExists {
        /// The file.
        path: PathBuf,
    },
    /// The starter manifest could not be written.
    ManifestWrite {
        /// The file.
        path: PathBuf,
        /// What the file system said.
        error: std::io::Error,
    },
    /// A relative path cannot be made absolute (no current directory).
    NoCurrentDir(std::io::Error),
    /// This binary's own path is unknown.
    Executable(std::io::Error),
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Actor => write!(
                f,
                "--actor: 1..={ACTOR_ID_MAX_LEN_CHARS} characters of letters, digits, '.', '_' \
                 or '-', starting with a letter or digit"
            ),
            Self::ManifestUnreadable { path, error } => {
                write!(f, "--manifest {}: {error}", path.display())
            }
            Self::ManifestRefused { path, error } => write!(
                f,
                "--manifest {}: {error} (docs/policy.md shows the form; `annal mcp-config \
                 --write-manifest PATH` writes a starter one)",
                path.display()
            ),
            Self::ManifestExists { path } => write!(
                f,
                "--write-manifest {}: the file exists; pass it as --manifest, or choose \
                 another path",
                path.display()
            ),
            Self::ManifestWrite { path, error } => {
                write!(f, "--write-manifest {}: {error}", path.display())
            }
            Self::NoCurrentDir(error) => write!(f, "cannot read the current directory: {error}"),
            Self::Executable(error) => write!(f, "cannot find the annal executable: {error}"),
        }
    }
}

impl From<ConfigError> for CliError {
    fn from(error: ConfigError) -> Self {
        let exit = match &error {
            ConfigError::Actor
            | ConfigError::ManifestUnreadable { .. }
            | ConfigError::ManifestRefused { .. }
            | ConfigError::ManifestExists { .. } => EXIT_USAGE,
            ConfigError::ManifestWrite { .. }
            | ConfigError::NoCurrentDir(_)
            | ConfigError::Executable(_) => EXIT_UNAVAILABLE,
        };
        Self {
            exit,
            message: error.to_string(),
        }
    }
}

/// `path`, absolute (relative to the current directory), without touching the file system
/// beyond reading the current directory.
fn absolute(path: &Path) -> Result<PathBuf, ConfigError> {
    std::path::absolute(path).map_err(ConfigError::NoCurrentDir)
}

/// Reads `path` and checks it is a manifest `annal mcp` would approve.
fn checked_manifest(path: &Path) -> Result<(), ConfigError> {
    let unreadable = |error| ConfigError::ManifestUnreadable {
        path: path.to_path_buf(),
        error,
    };
    let file = std::fs::File::open(path).map_err(unreadable)?;
    let mut text = String::new();
    file.take(MANIFEST_MAX_LEN_BYTES as u64 + 1)
        .read_to_string(&mut text)
        .map_err(unreadable)?;
    Manifest::parse(&text)
        .map(|_| ())
        .map_err(|error| ConfigError::ManifestRefused {
            path: path.to_path_buf(),
            error,
        })
}

/// Writes [`starter_manifest`] to a new file at `path` (0600).
fn write_starter(path: &Path) -> Result<(), ConfigError> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(MANIFEST_FILE_MODE)
        .open(path)
        .map_err(|error| {
            if error.kind() == std::io::ErrorKind::AlreadyExists {
                ConfigError::ManifestExists {
                    path: path.to_path_buf(),
                }
            } else {
                ConfigError::ManifestWrite {
                    path: path.to_path_buf(),
                    error,
                }
            }
        })?;
    file.write_all(starter_manifest().as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|error| ConfigError::ManifestWrite {
            path: path.to_path_buf(),
            error,
        })
}

/// The server's arguments: `mcp --actor A [--manifest M]`, then the store options pinned.
pub fn server_args(location: &Location, actor: &str, manifest: Option<&Path>) -> Vec<String> {
    let mut args = vec!["mcp".to_owned(), "--actor".to_owned(), actor.to_owned()];
    if let Some(manifest) = manifest {
        args.push("--manifest".to_owned());
        args.push(manifest.display().to_string());
    }
    args.push("--namespace".to_owned());
    args.push(location.namespace.as_str().to_owned());
    args.push("--store".to_owned());
    args.push(location.dir.display().to_string());
    if let Some(socket) = &location.socket {
        args.push("--socket".to_owned());
        args.push(socket.display().to_string());
    }
    if location.key_store != KeyStoreChoice::Auto {
        args.push("--key-store".to_owned());
        args.push(location.key_store.as_str().to_owned());
    }
    args
}

/// The JSON block `client` reads, for a server started as `command args`.
pub fn block(client: Client, command: &str, args: &[String]) -> Value {
    match client {
        Client::Claude | Client::Cursor | Client::Generic => json!({
            "mcpServers": {SERVER_NAME: {"command": command, "args": args}}
        }),
        Client::Vscode => json!({
            "servers": {SERVER_NAME: {"type": "stdio", "command": command, "args": args}}
        }),
    }
}

/// The block for `args` (module doc); writes the starter manifest when asked.
fn config(location: &Location, args: &McpConfigArgs) -> Result<Value, ConfigError> {
    ActorId::new(&args.actor).map_err(|_| ConfigError::Actor)?;
    let manifest = match (&args.manifest, &args.write_manifest) {
        (Some(path), _) => {
            checked_manifest(path)?;
            Some(absolute(path)?)
        }
        (None, Some(path)) => {
            let path = absolute(path)?;
            write_starter(&path)?;
            Some(path)
        }
        (None, None) => None,
    };
    let exe = std::env::current_exe().map_err(ConfigError::Executable)?;
    let server = server_args(location, &args.actor, manifest.as_deref());
    Ok(block(args.client, &exe.display().to_string(), &server))
}

/// Runs `annal mcp-config`.
pub fn run(location: &Location, args: &McpConfigArgs) -> ExitCode {
    finish(
        config(location, args)
            .map_err(CliError::from)
            .and_then(|value| {
                let text = serde_json::to_string_pretty(&value)
                    .map_err(|e| CliError::unavailable(format!("cannot print the block: {e}")))?;
                Ok(match crate::write_out(&format!("{text}\n")) {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(code) => code,
                })
            }),
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn the_starter_manifest_is_one_annal_approves_for_both_tools() {
        let manifest = Manifest::parse(&starter_manifest()).unwrap();
        assert_eq!(
            manifest.operations(),
            [
                annal_engine::policy::Operation::Status,
                annal_engine::policy::Operation::Query
            ]
        );
        let terms = manifest.terms();
        assert_eq!(
            terms,
            annal_engine::policy::GrantTerms::new(3_600, 600).unwrap()
        );
    }

    #[test]
    fn each_client_gets_its_own_block() {
        let args = vec!["mcp".to_owned(), "--actor".to_owned(), "a".to_owned()];
        for client in [Client::Claude, Client::Cursor, Client::Generic] {
            let value = block(client, "/bin/annal", &args);
            assert_eq!(value.as_object().unwrap().len(), 1);
            let server = &value["mcpServers"][SERVER_NAME];
            assert_eq!(server["command"], "/bin/annal");
            assert_eq!(server["args"], json!(["mcp", "--actor", "a"]));
            assert!(server.get("type").is_none(), "{value}");
        }
        let value = block(Client::Vscode, "/bin/annal", &args);
        assert!(value.get("mcpServers").is_none());
        assert_eq!(value["servers"][SERVER_NAME]["type"], "stdio");
        assert_eq!(value["servers"][SERVER_NAME]["command"], "/bin/annal");
    }
}
