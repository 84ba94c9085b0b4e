//! Writing one file annal ships into a folder of the user's (`annal skill install`, `annal
//! service install`): directories it creates are 0700 and the file 0600 from its creation
//! (written beside, synced, then renamed into place, so no half-written file is ever seen). The
//! same bytes already there are left alone; other bytes, or something else at the path, are the
//! user's and are replaced only with `--force`.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::{CliError, EXIT_UNAVAILABLE, EXIT_USAGE};

/// Mode of a directory `install` creates.
pub const PRIVATE_DIR_MODE: u32 = 0o700;

/// Mode of the file `install` writes.
pub const PRIVATE_FILE_MODE: u32 = 0o600;

/// What `install` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Installed {
    /// The file was written (new, or replaced with `--force`).
    Written,
    /// The same bytes were already there.
    Unchanged,
}

/// Why `install` wrote nothing.
#[derive(Debug)]
pub enum InstallError {
    /// A file with other bytes is already there.
    Differs {
        /// The file.
        path: PathBuf,
        /// The command that prints what annal would write (for the comparison).
        compare: &'static str,
    },
    /// Something that is not a directory stands where a directory must be, or not a file where
    /// the file goes.
    NotADirectory {
        /// The path.
        path: PathBuf,
    },
    /// The file system refused.
    Io {
        /// The path it refused.
        path: PathBuf,
        /// What it said.
        error: std::io::Error,
    },
}

impl std::fmt::Display for InstallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Differs { path, compare } => write!(
                f,
                "{} exists and differs from what annal writes: compare it with `{compare}`, \
                 then pass --force to replace it",
                path.display()
            ),
            Self::NotADirectory { path } => write!(
                f,
                "{} is in the way: a directory is needed there (or a file where the file goes); \
                 move it aside or choose another directory",
                path.display()
            ),
            Self::Io { path, error } => write!(f, "{}: {error}", path.display()),
        }
    }
}

impl From<InstallError> for CliError {
    fn from(error: InstallError) -> Self {
        let exit = match &error {
            InstallError::Differs { .. } | InstallError::NotADirectory { .. } => EXIT_USAGE,
            InstallError::Io { .. } => EXIT_UNAVAILABLE,
        };
        Self {
            exit,
            message: error.to_string(),
        }
    }
}

/// Creates `dir` (and its missing parents) with [`PRIVATE_DIR_MODE`]; an existing directory is
/// left as it is.
pub fn directory(dir: &Path) -> Result<(), InstallError> {
    match std::fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(_) => Err(InstallError::NotADirectory {
            path: dir.to_path_buf(),
        }),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => std::fs::DirBuilder::new()
            .recursive(true)
            .mode(PRIVATE_DIR_MODE)
            .create(dir)
            .map_err(|error| InstallError::Io {
                path: dir.to_path_buf(),
                error,
            }),
        Err(error) => Err(InstallError::Io {
            path: dir.to_path_buf(),
            error,
        }),
    }
}

/// Writes `contents` as `folder/name` (module doc); `compare` names the command that prints
/// them. The file's path and what was done.
pub fn install(
    folder: &Path,
    name: &str,
    contents: &[u8],
    force: bool,
    compare: &'static str,
) -> Result<(PathBuf, Installed), InstallError> {
    directory(folder)?;
    let path = folder.join(name);
    match std::fs::symlink_metadata(&path) {
        Ok(meta) if meta.is_file() => {
            let existing = std::fs::read(&path).map_err(|error| InstallError::Io {
                path: path.clone(),
                error,
            })?;
            if existing == contents {
                return Ok((path, Installed::Unchanged));
            }
            if !force {
                return Err(InstallError::Differs { path, compare });
            }
        }
        Ok(meta) if meta.is_dir() => return Err(InstallError::NotADirectory { path }),
        // A symbolic link or another kind of file: replaced only when asked.
        Ok(_) if !force => return Err(InstallError::Differs { path, compare }),
        Ok(_) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(InstallError::Io { path, error }),
    }
    let staging = folder.join(format!(".{name}.{}.tmp", std::process::id()));
    let written = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(PRIVATE_FILE_MODE)
            .open(&staging)?;
        file.write_all(contents)?;
        file.sync_all()?;
        std::fs::rename(&staging, &path)
    })();
    if let Err(error) = written {
        let _ = std::fs::remove_file(&staging);
        return Err(InstallError::Io { path, error });
    }
    Ok((path, Installed::Written))
}
