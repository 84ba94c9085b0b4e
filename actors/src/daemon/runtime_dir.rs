//! The one rule for a private directory: the directory that holds a daemon's socket (and the
//! store's own directory) must belong to the user annal runs as and be closed to everyone else
//! (no group or other permission bits: 0700 or stricter).
//!
//! The daemon applies it before it binds its socket ([`create_private_dir`]), and every client
//! applies it before it connects ([`check_private_dir`]): a socket in a directory that another
//! user owns, or that others may write to (a sticky world-writable `XDG_RUNTIME_DIR`), may be
//! anyone's, so nothing is sent to it. The client then checks the peer itself
//! (`SO_PEERCRED`, see [`DaemonClient::connect`](super::DaemonClient::connect)).

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Mode of every directory annal creates for a store or a socket.
pub const PRIVATE_DIR_MODE: u32 = 0o700;

/// Permission bits a private directory must not have: any for the group or for others.
const SHARED_MODE_BITS: u32 = 0o077;

/// Why a directory is not private, each naming the directory and the fix.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeDirError {
    /// It does not exist (a client finds no daemon there).
    #[error("{} does not exist", path.display())]
    Missing {
        /// The directory.
        path: PathBuf,
    },
    /// It could not be created or read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The directory.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// Something other than a directory is at its path.
    #[error("{} is not a directory: remove it, or pass --socket PATH", path.display())]
    NotADirectory {
        /// The path.
        path: PathBuf,
    },
    /// Another user owns it.
    #[error(
        "{} belongs to uid {owner}, not to this user (uid {own}); annal will not use it: \
         remove it, or point XDG_RUNTIME_DIR (or --socket) at a directory of your own",
        path.display()
    )]
    NotOwned {
        /// The directory.
        path: PathBuf,
        /// Its owner.
        owner: u32,
        /// This process's effective uid.
        own: u32,
    },
    /// Others may enter it or write to it.
    #[error(
        "{} can be entered by other users (mode {mode:o}): run `chmod 700 {}`",
        path.display(),
        path.display()
    )]
    OpenToOthers {
        /// The directory.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
}

/// Checks that `dir` exists, is a directory (symbolic links followed), belongs to this
/// process's effective uid and has no group or other permission bits. Never creates or changes
/// anything.
pub fn check_private_dir(dir: &Path) -> Result<(), RuntimeDirError> {
    let path = || dir.to_path_buf();
    let meta = match std::fs::metadata(dir) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(RuntimeDirError::Missing { path: path() });
        }
        Err(source) => {
            return Err(RuntimeDirError::Io {
                path: path(),
                source,
            });
        }
    };
    if !meta.is_dir() {
        return Err(RuntimeDirError::NotADirectory { path: path() });
    }
    let own = rustix::process::geteuid().as_raw();
    if meta.uid() != own {
        return Err(RuntimeDirError::NotOwned {
            path: path(),
            owner: meta.uid(),
            own,
        });
    }
    let mode = meta.permissions().mode() & 0o7777;
    if mode & SHARED_MODE_BITS != 0 {
        return Err(RuntimeDirError::OpenToOthers { path: path(), mode });
    }
    Ok(())
}

/// Creates `dir` (and its missing parents) with mode [`PRIVATE_DIR_MODE`], then applies
/// [`check_private_dir`]: an existing directory is never loosened or taken over, only refused.
pub fn create_private_dir(dir: &Path) -> Result<(), RuntimeDirError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(PRIVATE_DIR_MODE)
        .create(dir)
        .map_err(|source| RuntimeDirError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
    check_private_dir(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_private_dir_is_made_0700_and_a_shared_one_is_refused_never_loosened() {
        let root = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let dir = root.path().join("a").join("b");
        assert!(matches!(
            check_private_dir(&dir),
            Err(RuntimeDirError::Missing { .. })
        ));
        assert!(create_private_dir(&dir).is_ok());
        let mode = |p: &Path| {
            std::fs::metadata(p)
                .map(|m| m.permissions().mode() & 0o7777)
                .unwrap_or_default()
        };
        assert_eq!(mode(&dir), PRIVATE_DIR_MODE);
        assert!(check_private_dir(&dir).is_ok());
        for shared in [0o1777, 0o755, 0o710, 0o701] {
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(shared))
                .unwrap_or_else(|e| panic!("{e}"));
            let error = create_private_dir(&dir).err();
            assert!(
                matches!(error, Some(RuntimeDirError::OpenToOthers { .. })),
                "{shared:o}: {error:?}"
            );
            assert_eq!(
                mode(&dir),
                shared,
                "never loosened or tightened behind the owner"
            );
            let message = error.map(|e| e.to_string()).unwrap_or_default();
            assert!(message.contains(&dir.display().to_string()), "{message}");
            assert!(message.contains("chmod 700"), "{message}");
        }
        let file = root.path().join("file");
        std::fs::write(&file, b"").unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(
            check_private_dir(&file),
            Err(RuntimeDirError::NotADirectory { .. })
        ));
    }
}
