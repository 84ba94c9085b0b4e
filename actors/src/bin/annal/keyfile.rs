//! Reading a root key from a file for the offline tools (`inspect`, `verify`) and for
//! `annal report --key-file` / `annal stats --key-file`: read-only, no
//! symlink, regular file only, refused when group or others may read or write it.

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use annal_engine::keys::RootKey;
use annal_engine::keys::material::KEY_LEN_BYTES;
use annal_schema::ids::{HexCase, decode_hex_into};
use zeroize::Zeroizing;

/// Largest key file read, in bytes: 64 hex characters plus generous whitespace.
const MAX_KEY_FILE_BYTES: u64 = 256;

/// Reads the key file read-only, refusing symlinks, non-regular files and any mode that lets
/// group or others read or write it.
pub fn load_key(path: &Path) -> Result<RootKey, String> {
    load_key_bytes(path).map(|bytes| RootKey::from_bytes(*bytes))
}

/// [`load_key`]'s bytes, for a credential store held in memory (`annal report --key-file`).
pub fn load_key_bytes(path: &Path) -> Result<Zeroizing<[u8; KEY_LEN_BYTES]>, String> {
    // Read-only and O_NOFOLLOW: a symlink planted in place of the key file is refused.
    let file = annal_engine::storage::fs::open_regular_file_no_follow(path)
        .map_err(|e| format!("cannot open key file: {e}"))?;
    let meta = file
        .metadata()
        .map_err(|e| format!("cannot stat key file: {e}"))?;
    if !meta.is_file() {
        return Err("key file is not a regular file".into());
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(format!(
            "key file mode is {mode:04o}; it must not be accessible by group or others (chmod 600)"
        ));
    }
    let mut text = Zeroizing::new(Vec::with_capacity(80));
    file.take(MAX_KEY_FILE_BYTES + 1)
        .read_to_end(&mut text)
        .map_err(|e| format!("cannot read key file: {e}"))?;
    if text.len() as u64 > MAX_KEY_FILE_BYTES {
        return Err("key file is too long".into());
    }
    let digits: Zeroizing<Vec<u8>> = Zeroizing::new(
        text.iter()
            .copied()
            .filter(|b| !b.is_ascii_whitespace())
            .collect(),
    );
    if digits.len() != KEY_LEN_BYTES * 2 {
        return Err("key file must hold exactly 64 hex characters".into());
    }
    let mut bytes = Zeroizing::new([0u8; KEY_LEN_BYTES]);
    // Either case: the key file is written by hand or by tools that may use upper case.
    decode_hex_into(&digits, HexCase::Either, bytes.as_mut_slice())
        .map_err(|_| "key file must hold exactly 64 hex characters".to_owned())?;
    Ok(bytes)
}
