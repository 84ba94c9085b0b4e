//! [`BootId`]: which boot of the machine a process runs in.
//!
//! The history writer journals it with each sequence reservation. After a crash in the same
//! boot (a killed process, a writer that panicked), the kernel's page cache survived: every
//! record the crashed writer wrote, and so every record any reader could have seen, is in the
//! store's files. The next writer can then make those files durable and release the rest of
//! the reservation instead of skipping it (`docs/design.md`, "No gap without a cause"). After
//! another boot (a power loss) nothing says which unsynced records a reader saw, so the skip
//! stays.
//!
//! Linux publishes the boot id as a UUID in [`BOOT_ID_PATH`]; the shell reads it (the engine
//! does no I/O) and tests inject their own, so a simulated power loss acts as a new boot.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Where Linux publishes the current boot's id: a random UUID, new at every boot.
pub const BOOT_ID_PATH: &str = "/proc/sys/kernel/random/boot_id";

/// Bytes of a boot id (a UUID).
pub const BOOT_ID_BYTES: usize = 16;

/// One boot of the machine: 16 bytes, stored as 32 lowercase hex characters.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct BootId([u8; BOOT_ID_BYTES]);

/// Why a boot id did not parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BootIdError {
    /// Not 32 hex digits (hyphens between them allowed, as the kernel writes a UUID).
    #[error("a boot id is 32 hex digits (a UUID, hyphens allowed)")]
    NotHex,
}

impl BootId {
    /// A boot id of these bytes (tests and simulations name their boots).
    pub const fn from_bytes(bytes: [u8; BOOT_ID_BYTES]) -> Self {
        Self(bytes)
    }

    /// Parses the kernel's text (`8-4-4-4-12` hex digits and a newline) or the stored form
    /// (32 hex digits). Surrounding whitespace is ignored; anything else is refused.
    pub fn parse(text: &str) -> Result<Self, BootIdError> {
        let digits: Vec<u8> = text.trim().bytes().filter(|&b| b != b'-').collect();
        if digits.len() != 2 * BOOT_ID_BYTES {
            return Err(BootIdError::NotHex);
        }
        let mut bytes = [0u8; BOOT_ID_BYTES];
        for (byte, pair) in bytes.iter_mut().zip(digits.chunks_exact(2)) {
            let high = hex_value(pair[0]).ok_or(BootIdError::NotHex)?;
            let low = hex_value(pair[1]).ok_or(BootIdError::NotHex)?;
            *byte = high << 4 | low;
        }
        Ok(Self(bytes))
    }

    /// The stored form: 32 lowercase hex digits.
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
}

fn hex_value(digit: u8) -> Option<u8> {
    char::from(digit)
        .to_digit(16)
        .and_then(|v| u8::try_from(v).ok())
}

impl fmt::Debug for BootId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BootId({})", self.to_hex())
    }
}

impl Serialize for BootId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_hex())
    }
}

impl<'de> Deserialize<'de> for BootId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Exactly the stored form: 32 lowercase hex digits.
        let text = String::deserialize(d)?;
        Self::parse(&text)
            .ok()
            .filter(|id| id.to_hex() == text)
            .ok_or_else(|| serde::de::Error::custom("invalid boot id"))
    }
}

#[cfg(test)]
mod tests {
    use super::{BootId, BootIdError};

    #[test]
    fn the_kernels_uuid_and_the_stored_form_name_the_same_boot() {
        let kernel = BootId::parse("6f1c2a9e-0b3d-4e5f-8a7b-112233445566\n").unwrap();
        assert_eq!(kernel.to_hex(), "6f1c2a9e0b3d4e5f8a7b112233445566");
        assert_eq!(BootId::parse(&kernel.to_hex()), Ok(kernel));
    }

    #[test]
    fn anything_but_32_hex_digits_is_refused() {
        for bad in [
            "",
            "6f1c2a9e-0b3d-4e5f-8a7b-11223344556",
            "6f1c2a9e-0b3d-4e5f-8a7b-1122334455667",
            "6f1c2a9e-0b3d-4e5f-8a7b-11223344556g",
            "6f1c2a9e 0b3d 4e5f 8a7b 112233445566",
            "+f1c2a9e0b3d4e5f8a7b112233445566",
        ] {
            assert_eq!(BootId::parse(bad), Err(BootIdError::NotHex), "{bad:?}");
        }
    }
}
