//! Bounded identifier and name newtypes.
//!
//! Each type checks its value once, at construction or deserialization, so holding one proves the
//! value is within the contract.
//!
//! Names have two rule sets. **Read rules** (deserialization, `new_lenient`) accept what the
//! published JSON Schema and the reference implementation accept, so a reference-written record
//! such as `"bundle_id":"Web Content"` never makes a reader refuse its chunk. **Write rules**
//! (`new`, `FromStr`, `TryFrom<String>`) are annal's own, deliberately narrow: a bundle id
//! without whitespace or control characters, a capability of `[a-z0-9._-]`, and application
//! names that hold no URL, path, query string or (display names) window title
//! ([`check_identity_shape`], the one place that rule lives) cannot carry typed text, paths or
//! other prohibited content (ARCHITECTURE.md section 9, seed 000). Every value the write rules
//! accept also passes the read rules, so whatever annal writes it can read back. Ids (hex) have
//! one rule set: the schema's pattern is already narrow.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Length of an opaque id in hex characters (128 bits).
pub const OPAQUE_ID_LEN_CHARS: usize = 32;
/// Longest capability name, in characters.
pub const CAPABILITY_MAX_LEN_CHARS: usize = 128;
/// Longest bundle id, in characters.
pub const BUNDLE_ID_MAX_LEN_CHARS: usize = 160;
/// Longest display name, in characters.
pub const DISPLAY_NAME_MAX_LEN_CHARS: usize = 120;
/// Longest CloudEvents subject, in characters.
pub const SUBJECT_MAX_LEN_CHARS: usize = 160;
/// The fixed prefix of an event's `source`.
pub const SOURCE_URN_PREFIX: &str = "urn:cua-driver:history:";

/// Why a bounded string was refused. Carries no part of the refused value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum InvalidId {
    /// The value is empty or longer than its limit.
    Length,
    /// The value holds a character outside its allowed set.
    Charset,
    /// An application name holds a URL (`scheme://`). Identity write rules only.
    Url,
    /// An application name holds a path separator (`/` or `\`): an absolute, home-relative,
    /// relative, Windows drive or UNC path. Identity write rules only.
    Path,
    /// An application name holds a query string (`?key=value`). Identity write rules only.
    QueryString,
    /// A display name holds a window title's separator (see [`TITLE_SEPARATORS`]). Identity
    /// write rules only.
    WindowTitle,
}

impl std::error::Error for InvalidId {}

impl fmt::Display for InvalidId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Length => "value is empty or too long",
            Self::Charset => "value holds a character outside its allowed set",
            Self::Url => {
                "value holds a URL (`scheme://`); give the application's identifier or name, \
                 never an address"
            }
            Self::Path => {
                "value holds `/` or `\\`, as a file path does; give the application's \
                 identifier or name, never a path"
            }
            Self::QueryString => {
                "value holds a query string (`?key=value`); give the application's identifier \
                 or name alone"
            }
            Self::WindowTitle => {
                "value holds a window title's separator (` - `, ` | `, ...); give the \
                 application's name alone, never a window's title"
            }
        })
    }
}

fn check_len(s: &str, max_chars: usize) -> Result<(), InvalidId> {
    let n = s.chars().count();
    if n == 0 || n > max_chars {
        Err(InvalidId::Length)
    } else {
        Ok(())
    }
}

/// Implements the shared plumbing of a validated string newtype: `new`, `as_str`, `Display`,
/// `TryFrom<String>`, `FromStr` and `Serialize`. With one check, deserialization applies it too;
/// with `write:` and `read:` checks, deserialization and `new_lenient` apply the read check and
/// `meets_write_rules` reports the write check. `@text` alone gives `Display`, `TryFrom<String>`,
/// `FromStr` and `Serialize` to a type with its own `new` and `as_str`; `@inline` gives a
/// fixed-length type holding its text in a byte array `new`, `as_str`, the `@text` impls, a
/// `Debug` of the text and a borrowing `Deserialize` ([`OpaqueId`], [`SourceUrn`]).
macro_rules! bounded_string {
    ($name:ident, $check:path) => {
        bounded_string!(@common $name, $check);

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let value = String::deserialize(d)?;
                Self::new(value).map_err(serde::de::Error::custom)
            }
        }
    };
    ($name:ident, write: $write:path, read: $read:path) => {
        bounded_string!(@common $name, $write);

        impl $name {
            /// Validates `value` against the read rules only: what the published schema and the
            /// reference accept. The value may still break annal's write rules.
            pub fn new_lenient(value: impl Into<String>) -> Result<Self, InvalidId> {
                let value = value.into();
                $read(&value)?;
                Ok(Self(value))
            }

            /// Whether the value also passes annal's write rules (a value read leniently may not).
            pub(crate) fn meets_write_rules(&self) -> bool {
                $write(&self.0).is_ok()
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let value = String::deserialize(d)?;
                Self::new_lenient(value).map_err(serde::de::Error::custom)
            }
        }
    };
    (@common $name:ident, $check:path) => {
        impl $name {
            /// Validates `value` against annal's write rules.
            pub fn new(value: impl Into<String>) -> Result<Self, InvalidId> {
                let value = value.into();
                $check(&value)?;
                Ok(Self(value))
            }

            /// The validated value.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        bounded_string!(@text $name);
    };
    // A type holding its text inline: the `@text` impls, `Debug` showing the text, and a
    // deserializer that borrows the input when it can (no `String` per value read).
    (@inline $name:ident, $check:path, new: $new_doc:literal, expecting: $expecting:literal) => {
        impl $name {
            #[doc = $new_doc]
            pub fn new(value: impl AsRef<str>) -> Result<Self, InvalidId> {
                let value = value.as_ref();
                $check(value)?;
                value
                    .as_bytes()
                    .try_into()
                    .map(Self)
                    .map_err(|_| InvalidId::Length)
            }

            /// The validated value.
            pub fn as_str(&self) -> &str {
                // Only a validated ASCII value is ever stored, so this never falls back.
                std::str::from_utf8(&self.0).unwrap_or_default()
            }
        }

        bounded_string!(@text $name);

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_tuple(stringify!($name)).field(&self.as_str()).finish()
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct TextVisitor;
                impl serde::de::Visitor<'_> for TextVisitor {
                    type Value = $name;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str($expecting)
                    }
                    fn visit_str<E: serde::de::Error>(self, value: &str) -> Result<$name, E> {
                        $name::new(value).map_err(E::custom)
                    }
                }
                d.deserialize_str(TextVisitor)
            }
        }
    };
    // The impls that only need `new` and `as_str`, whatever holds the text.
    (@text $name:ident) => {
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl TryFrom<String> for $name {
            type Error = InvalidId;
            fn try_from(value: String) -> Result<Self, InvalidId> {
                Self::new(value)
            }
        }

        impl std::str::FromStr for $name {
            type Err = InvalidId;
            fn from_str(value: &str) -> Result<Self, InvalidId> {
                Self::new(value)
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }
    };
}

/// A 128-bit opaque identifier: exactly 32 lower-case hex characters. Event, session, action,
/// stream and chunk ids all have this form.
///
/// The digits are held inline (no heap allocation): the writer makes two or three ids per event
/// and the Query actor frees them on another thread, where a `String` each cost a `malloc` on
/// glibc's slow cross-thread path. The API is that of the string newtypes.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpaqueId([u8; OPAQUE_ID_LEN_CHARS]);

fn check_opaque_id(s: &str) -> Result<(), InvalidId> {
    if s.len() != OPAQUE_ID_LEN_CHARS {
        return Err(InvalidId::Length);
    }
    if !s.bytes().all(|b| hex_digit(b, HexCase::Lower).is_some()) {
        return Err(InvalidId::Charset);
    }
    Ok(())
}

impl OpaqueId {
    /// The id of 16 raw bytes, as lower-case hex.
    pub fn from_bytes(bytes: [u8; 16]) -> Self {
        let mut digits = [0u8; OPAQUE_ID_LEN_CHARS];
        write_lower_hex(&bytes, &mut digits);
        Self(digits)
    }

    /// The 16 raw bytes of the id.
    pub fn to_bytes(&self) -> [u8; 16] {
        // The value was validated as 32 lower-case hex digits, so decoding cannot fail.
        decode_lower_hex(self.as_str()).unwrap_or([0; 16])
    }
}

bounded_string!(@inline OpaqueId, check_opaque_id,
    new: "Validates `value`: exactly 32 lower-case hex digits.",
    expecting: "32 lower-case hex digits");

/// The lower-case hex spelling of `bytes` (two digits per byte): the one hex encoder, the
/// inverse of [`decode_hex_into`] with [`HexCase::Lower`].
pub fn encode_lower_hex(bytes: &[u8]) -> String {
    /// Input bytes spelled per round in a stack buffer, then appended with one copy: no
    /// per-digit capacity check and no zeroed allocation.
    const ROUND_BYTES: usize = 16;
    let mut out = String::with_capacity(bytes.len() * 2);
    for round in bytes.chunks(ROUND_BYTES) {
        let mut digits = [0u8; ROUND_BYTES * 2];
        let digits = &mut digits[..round.len() * 2];
        write_lower_hex(round, digits);
        // Hex digits are ASCII, so this never fails.
        out.push_str(std::str::from_utf8(digits).unwrap_or_default());
    }
    out
}

/// Writes the lower-case hex digits of `bytes` into `digits` (two per byte; `digits` holds
/// `2 * bytes.len()`, any surplus is left as it is).
fn write_lower_hex(bytes: &[u8], digits: &mut [u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for (pair, b) in digits.chunks_exact_mut(2).zip(bytes) {
        if let [high, low] = pair {
            *high = HEX[usize::from(b >> 4)];
            *low = HEX[usize::from(b & 0x0f)];
        }
    }
}

/// Which letter case a hex decoder accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HexCase {
    /// Only `a`..=`f`: the one spelling of ids on the wire, so each id has one text form.
    Lower,
    /// `a`..=`f` and `A`..=`F`: for hand-made input such as a key file.
    Either,
}

/// The value of one hex digit in `case`, or `None`.
fn hex_digit(digit: u8, case: HexCase) -> Option<u8> {
    match digit {
        b'0'..=b'9' => Some(digit - b'0'),
        b'a'..=b'f' => Some(digit - b'a' + 10),
        b'A'..=b'F' if case == HexCase::Either => Some(digit - b'A' + 10),
        _ => None,
    }
}

/// Decodes exactly `2 * out.len()` hex digits into `out`.
///
/// `out` is written only once every digit is known good, so a caller holding secret bytes
/// (a key) can decode straight into its own zeroizing buffer and never sees a partial value.
/// The error says whether the length or a digit was wrong, never which digit.
pub fn decode_hex_into(digits: &[u8], case: HexCase, out: &mut [u8]) -> Result<(), InvalidId> {
    if digits.len() != out.len() * 2 {
        return Err(InvalidId::Length);
    }
    if !digits.iter().all(|&d| hex_digit(d, case).is_some()) {
        return Err(InvalidId::Charset);
    }
    for (slot, pair) in out.iter_mut().zip(digits.chunks_exact(2)) {
        let high = hex_digit(pair[0], case).unwrap_or(0);
        let low = hex_digit(pair[1], case).unwrap_or(0);
        *slot = (high << 4) | low;
    }
    Ok(())
}

/// Decodes exactly `2 * N` lower-case hex characters, as ids are written; `None` otherwise.
pub fn decode_lower_hex<const N: usize>(text: &str) -> Option<[u8; N]> {
    let mut out = [0u8; N];
    decode_hex_into(text.as_bytes(), HexCase::Lower, &mut out).ok()?;
    Some(out)
}

/// A Cua capability name such as `input.pointer.click`: 1..=128 characters.
///
/// Write rules: `[a-z0-9._-]`, starting with a letter (an identifier, not a URL or prose). Read
/// rules: any characters, as the published schema allows.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Capability(String);

fn check_capability(s: &str) -> Result<(), InvalidId> {
    check_len(s, CAPABILITY_MAX_LEN_CHARS)?;
    let mut bytes = s.bytes();
    let first_is_letter = bytes.next().is_some_and(|b| b.is_ascii_lowercase());
    if !first_is_letter
        || !s
            .bytes()
            .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'.' | b'_' | b'-'))
    {
        return Err(InvalidId::Charset);
    }
    Ok(())
}

fn check_capability_read(s: &str) -> Result<(), InvalidId> {
    check_len(s, CAPABILITY_MAX_LEN_CHARS)
}
bounded_string!(Capability, write: check_capability, read: check_capability_read);

/// The reference's rule for application names it reads from the platform: trimmed (no leading
/// or trailing whitespace) and on one line (no CR or LF). Anything else passes, because the
/// platform supplies these names: Linux falls back to the process name (`Web Content`), Windows
/// to the executable (`Code - Insiders.exe`).
fn check_reference_name(s: &str) -> Result<(), InvalidId> {
    let padded = s.starts_with(char::is_whitespace) || s.ends_with(char::is_whitespace);
    if padded || s.contains(['\r', '\n']) {
        return Err(InvalidId::Charset);
    }
    Ok(())
}

/// A platform application identifier (bundle id, AUMID, desktop id): 1..=160 characters.
///
/// Write rules: no whitespace or control characters, and none of the shapes seed 000 forbids in
/// history ([`check_identity_shape`]: no URL, path or query string). Read rules: trimmed, no CR
/// or LF (the reference's rule; see [`BundleId::new_lenient`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BundleId(String);

fn check_bundle_id(s: &str) -> Result<(), InvalidId> {
    check_len(s, BUNDLE_ID_MAX_LEN_CHARS)?;
    if has_whitespace_or_control(s) {
        return Err(InvalidId::Charset);
    }
    check_identity_shape(s)
}

/// Whether `s` holds whitespace or a control character.
fn has_whitespace_or_control(s: &str) -> bool {
    if s.is_ascii() {
        // In ASCII, whitespace and control characters are exactly these bytes.
        s.bytes().any(|b| b <= b' ' || b == 0x7f)
    } else {
        s.chars().any(|c| c.is_whitespace() || c.is_control())
    }
}

fn check_bundle_id_read(s: &str) -> Result<(), InvalidId> {
    check_len(s, BUNDLE_ID_MAX_LEN_CHARS)?;
    check_reference_name(s)
}
bounded_string!(BundleId, write: check_bundle_id, read: check_bundle_id_read);

/// The identity write rule both application fields share: the one place annal refuses, on
/// write, the shapes seed 000 forbids in history (URLs, file paths, query strings). A name is
/// refused when it holds
/// - `/` or `\` anywhere: a URL (`scheme://`, [`InvalidId::Url`]) or a path of any kind
///   (`/home/...`, `~/...`, `Documents/...`, `C:\...`, `C:/...`, `\\server\...`,
///   [`InvalidId::Path`]). No application identifier holds a slash, and a display name that
///   needs one (rare) is refused with the rest: failing closed is the rule;
/// - a `?` whose following word (up to whitespace) holds `=`: a query string
///   ([`InvalidId::QueryString`]). A `?` ending a word (`Millionaire?`) is a name.
///
/// Reads never apply it: a reference-written record stays readable.
fn check_identity_shape(s: &str) -> Result<(), InvalidId> {
    if s.bytes().any(|b| b == b'/' || b == b'\\') {
        return Err(if s.contains("://") {
            InvalidId::Url
        } else {
            InvalidId::Path
        });
    }
    let query = s.split('?').skip(1).any(|after| {
        after
            .split(char::is_whitespace)
            .next()
            .is_some_and(|word| word.contains('='))
    });
    if query {
        return Err(InvalidId::QueryString);
    }
    Ok(())
}

/// The separators window titles join their parts with (`Document - Application`,
/// `Inbox | Mail`): hyphen-minus (and a doubled one), figure dash, en dash, em dash, horizontal
/// bar, minus sign, vertical bar, fullwidth vertical bar, middle dot and bullet.
pub const TITLE_SEPARATORS: [&str; 11] = [
    "-", "--", "\u{2012}", "\u{2013}", "\u{2014}", "\u{2015}", "\u{2212}", "|", "\u{ff5c}",
    "\u{b7}", "\u{2022}",
];

/// Whether `s` reads like a window title: one of [`TITLE_SEPARATORS`] standing alone between
/// two words (whitespace on both sides, more than one part). A separator inside a word
/// (`Wi-Fi`) or at either end (`Tools -`) is not one.
fn has_title_separator(s: &str) -> bool {
    let mut pieces = s.split(char::is_whitespace).skip(1).peekable();
    while let Some(piece) = pieces.next() {
        if pieces.peek().is_some() && TITLE_SEPARATORS.contains(&piece) {
            return true;
        }
    }
    false
}

/// An application's display name: 1..=120 characters.
///
/// Write rules: no control characters, trimmed (so it also passes the read rules), none of the
/// shapes seed 000 forbids ([`check_identity_shape`]: no URL, path or query string), and not
/// the shape of a window title (no [`TITLE_SEPARATORS`] between words). The line for real
/// names: a display name is the application's name alone, so a platform name that reads like a
/// title (`Code - Insiders`) is refused too; the bundle id still identifies the application.
/// Read rules: trimmed, no CR or LF.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DisplayName(String);

fn check_display_name(s: &str) -> Result<(), InvalidId> {
    check_display_name_read(s)?;
    if has_control(s) {
        return Err(InvalidId::Charset);
    }
    check_identity_shape(s)?;
    if has_title_separator(s) {
        return Err(InvalidId::WindowTitle);
    }
    Ok(())
}

fn check_display_name_read(s: &str) -> Result<(), InvalidId> {
    check_len(s, DISPLAY_NAME_MAX_LEN_CHARS)?;
    check_reference_name(s)
}
bounded_string!(DisplayName, write: check_display_name, read: check_display_name_read);

/// The CloudEvents `subject`: 1..=160 characters.
///
/// Write rules: no control characters. Read rules: any characters, as the published schema
/// allows.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Subject(String);

fn check_subject(s: &str) -> Result<(), InvalidId> {
    check_len(s, SUBJECT_MAX_LEN_CHARS)?;
    if has_control(s) {
        return Err(InvalidId::Charset);
    }
    Ok(())
}

fn check_subject_read(s: &str) -> Result<(), InvalidId> {
    check_len(s, SUBJECT_MAX_LEN_CHARS)
}
bounded_string!(Subject, write: check_subject, read: check_subject_read);

impl Subject {
    /// The subject the reference writes for an action's events: `action/<action id>`.
    pub fn for_action(action_id: &OpaqueId) -> Self {
        Self(concat_two(ACTION_SUBJECT_PREFIX, action_id.as_str()))
    }
}

/// Whether `s` holds a control character (`char::is_control`: C0, DEL and C1). The writer
/// checks several names per event: ASCII text, nearly all of it, is checked bytewise.
fn has_control(s: &str) -> bool {
    if s.is_ascii() {
        // A fold without an early exit vectorizes; these names are short.
        s.bytes()
            .fold(false, |any, b| any | (b < b' ' || b == 0x7f))
    } else {
        s.chars().any(char::is_control)
    }
}

/// The prefix of an action's subject.
const ACTION_SUBJECT_PREFIX: &str = "action/";

/// `prefix` then `rest`, in one allocation of the exact size (the writer makes one subject per
/// action event; `format!` costs several times as much).
fn concat_two(prefix: &str, rest: &str) -> String {
    let mut s = String::with_capacity(prefix.len() + rest.len());
    s.push_str(prefix);
    s.push_str(rest);
    s
}

/// Length of every `source`: [`SOURCE_URN_PREFIX`] and a 32-digit stream id.
const SOURCE_URN_LEN_BYTES: usize = SOURCE_URN_PREFIX.len() + OPAQUE_ID_LEN_CHARS;

/// The CloudEvents `source` of a history stream: `urn:cua-driver:history:` + 32 lower hex.
///
/// Held inline, like [`OpaqueId`] and for the same reason: the writer gives every event its
/// stream's source and the Query actor frees the events on another thread, where a `String`
/// each cost a `malloc` on glibc's slow cross-thread path. The API is that of the string
/// newtypes.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SourceUrn([u8; SOURCE_URN_LEN_BYTES]);

fn check_source(s: &str) -> Result<(), InvalidId> {
    let Some(stream) = s.strip_prefix(SOURCE_URN_PREFIX) else {
        return Err(InvalidId::Charset);
    };
    check_opaque_id(stream)
}

impl SourceUrn {
    /// The source of the stream with this id.
    pub fn for_stream(stream_id: &OpaqueId) -> Self {
        let mut text = [0u8; SOURCE_URN_LEN_BYTES];
        let (prefix, stream) = text.split_at_mut(SOURCE_URN_PREFIX.len());
        prefix.copy_from_slice(SOURCE_URN_PREFIX.as_bytes());
        stream.copy_from_slice(stream_id.as_str().as_bytes());
        Self(text)
    }

    /// The stream id part.
    pub fn stream_id(&self) -> &str {
        self.as_str()
            .get(SOURCE_URN_PREFIX.len()..)
            .unwrap_or_default()
    }
}

bounded_string!(@inline SourceUrn, check_source,
    new: "Validates `value`: [`SOURCE_URN_PREFIX`] and exactly 32 lower-case hex digits.",
    expecting: "a history source URN");

/// An event's position in its history stream: an integer >= 1, assigned by the writer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Sequence(std::num::NonZeroU64);

impl Sequence {
    /// The first sequence of a stream.
    pub const FIRST: Sequence = Sequence(std::num::NonZeroU64::MIN);

    /// `Some` for any value >= 1.
    pub const fn new(value: u64) -> Option<Self> {
        match std::num::NonZeroU64::new(value) {
            Some(v) => Some(Self(v)),
            None => None,
        }
    }

    /// The numeric value.
    pub const fn get(self) -> u64 {
        self.0.get()
    }

    /// The next sequence, or `None` at `u64::MAX`.
    pub const fn next(self) -> Option<Self> {
        match self.0.checked_add(1) {
            Some(v) => Some(Self(v)),
            None => None,
        }
    }
}

impl fmt::Display for Sequence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl Serialize for Sequence {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.get())
    }
}

impl<'de> Deserialize<'de> for Sequence {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = deserialize_json_integer(d)?;
        Self::new(value).ok_or_else(|| serde::de::Error::custom("sequence must be >= 1"))
    }
}

/// Reads a non-negative JSON integer into `u64`, counting a float with a zero fraction (`6.0`,
/// `6e0`) as the integer it equals, as JSON Schema draft 2020-12 does and as the reference may
/// write. A fraction, a negative number or a value beyond `u64` is refused, and the error never
/// carries the number. The one integer reader of every event field (`sequence`,
/// `delivered_count`, `returned_events`, `count`), which range-check the result themselves.
pub(crate) fn deserialize_json_integer<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    d.deserialize_u64(JsonInteger)
}

struct JsonInteger;

impl serde::de::Visitor<'_> for JsonInteger {
    type Value = u64;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a non-negative integer")
    }

    fn visit_u64<E: serde::de::Error>(self, value: u64) -> Result<u64, E> {
        Ok(value)
    }

    fn visit_i64<E: serde::de::Error>(self, value: i64) -> Result<u64, E> {
        u64::try_from(value).map_err(|_| E::custom("integer is negative"))
    }

    fn visit_f64<E: serde::de::Error>(self, value: f64) -> Result<u64, E> {
        // `u64::MAX as f64` rounds up to exactly 2^64, the first value that does not fit; every
        // f64 below it with a zero fraction converts exactly. NaN and infinities fail `fract`.
        const U64_END: f64 = u64::MAX as f64;
        if value.fract() == 0.0 && (0.0..U64_END).contains(&value) {
            Ok(value as u64)
        } else {
            Err(E::custom(
                "number is not a non-negative integer within 64 bits",
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_ascii_fast_paths_agree_with_the_char_predicates() {
        let mut samples: Vec<String> = (0u8..=0x7f)
            .map(|b| format!("a{}b", char::from(b)))
            .collect();
        samples.extend(
            [
                "é", "\u{85}", "\u{9f}", "\u{a0}", "\u{2028}", "\u{3000}", "😀", "a\u{80}",
            ]
            .map(String::from),
        );
        for s in &samples {
            assert_eq!(
                super::has_control(s),
                s.chars().any(char::is_control),
                "has_control({s:?})"
            );
            assert_eq!(
                super::has_whitespace_or_control(s),
                s.chars().any(|c| c.is_whitespace() || c.is_control()),
                "has_whitespace_or_control({s:?})"
            );
        }
    }

    use super::*;

    #[test]
    fn opaque_id_bounds() {
        assert!(OpaqueId::new("0123456789abcdef0123456789abcdef").is_ok());
        assert_eq!(
            OpaqueId::new("0123456789ABCDEF0123456789abcdef"),
            Err(InvalidId::Charset)
        );
        assert_eq!(
            OpaqueId::new("0123456789abcdef0123456789abcde"),
            Err(InvalidId::Length)
        );
        assert_eq!(OpaqueId::new(""), Err(InvalidId::Length));
        let id = OpaqueId::from_bytes([0xab; 16]);
        assert_eq!(id.as_str(), "abababababababababababababababab");
        assert_eq!(id.to_bytes(), [0xab; 16]);
    }

    #[test]
    fn hex_decoding() {
        assert_eq!(decode_lower_hex::<2>("0aff"), Some([0x0a, 0xff]));
        assert_eq!(decode_lower_hex::<2>("0AFF"), None);
        assert_eq!(decode_lower_hex::<2>("0af"), None);
        assert_eq!(decode_lower_hex::<2>("0aff0"), None);
        assert_eq!(decode_lower_hex::<2>("0afg"), None);
        assert_eq!(decode_lower_hex::<0>(""), Some([]));
        let mut out = [0x55u8; 2];
        assert_eq!(decode_hex_into(b"0AfF", HexCase::Either, &mut out), Ok(()));
        assert_eq!(out, [0x0a, 0xff]);
        // Nothing is written on failure.
        let mut out = [0x55u8; 2];
        assert_eq!(
            decode_hex_into(b"0aZf", HexCase::Either, &mut out),
            Err(InvalidId::Charset)
        );
        assert_eq!(
            decode_hex_into(b"0aF0", HexCase::Lower, &mut out),
            Err(InvalidId::Charset)
        );
        assert_eq!(
            decode_hex_into(b"0a", HexCase::Lower, &mut out),
            Err(InvalidId::Length)
        );
        assert_eq!(out, [0x55, 0x55]);
        for b in 0..=u8::MAX {
            let text = format!("{b:02x}");
            assert_eq!(decode_lower_hex::<1>(&text), Some([b]));
            let mut upper = [0u8; 1];
            let text = format!("{b:02X}");
            assert_eq!(
                decode_hex_into(text.as_bytes(), HexCase::Either, &mut upper),
                Ok(())
            );
            assert_eq!(upper, [b]);
        }
    }

    #[test]
    fn capability_bounds() {
        assert!(Capability::new("input.pointer.click").is_ok());
        assert!(Capability::new("a").is_ok());
        assert!(Capability::new("a".repeat(128)).is_ok());
        assert_eq!(Capability::new("a".repeat(129)), Err(InvalidId::Length));
        assert_eq!(Capability::new("1abc"), Err(InvalidId::Charset));
        assert_eq!(Capability::new("Input.click"), Err(InvalidId::Charset));
        assert_eq!(Capability::new("input click"), Err(InvalidId::Charset));
        assert_eq!(Capability::new("input/click"), Err(InvalidId::Charset));
    }

    #[test]
    fn identity_write_rules_refuse_urls_paths_queries_and_titles() {
        use InvalidId::{Path, QueryString, Url, WindowTitle};
        // (value, bundle id verdict, display name verdict); `Charset` where the bundle id's
        // whitespace rule refuses first.
        let cases = [
            ("https://evil.example/x?tok=1", Url, Url),
            ("vscode://file/notes", Url, Url),
            ("/home/alice/secret.txt", Path, Path),
            ("~/secret.txt", Path, Path),
            ("Documents/secret.txt", Path, Path),
            ("C:\\Users\\alice", Path, Path),
            ("C:/Users/alice", Path, Path),
            ("\\\\server\\share", Path, Path),
            ("inbox?tok=1", QueryString, QueryString),
            ("app?=1", QueryString, QueryString),
            ("Invoice - Inbox - Gmail", InvalidId::Charset, WindowTitle),
            ("Code - Insiders", InvalidId::Charset, WindowTitle),
            ("Plan \u{2014} Firefox", InvalidId::Charset, WindowTitle),
            ("Inbox\u{a0}|\u{a0}Mail", InvalidId::Charset, WindowTitle),
            ("Plan -- Docs", InvalidId::Charset, WindowTitle),
            ("Plan \u{2212} Docs", InvalidId::Charset, WindowTitle),
            ("Plan  \u{ff5c}  Docs", InvalidId::Charset, WindowTitle),
        ];
        for (value, bundle, display) in cases {
            assert_eq!(BundleId::new(value), Err(bundle), "{value:?}");
            assert_eq!(DisplayName::new(value), Err(display), "{value:?}");
            // Read leniently all the same: a reference-written record stays readable.
            assert!(BundleId::new_lenient(value).is_ok(), "{value:?}");
            assert!(DisplayName::new_lenient(value).is_ok(), "{value:?}");
        }
        for bundle in [
            "com.microsoft.VSCodeInsiders",
            "Microsoft.WindowsTerminal_8wekyb3d8bbwe!App",
            "Code-Insiders.exe",
            "org.gnome.Nautilus.desktop",
            "com.example.What?",
            "com.example:helper",
        ] {
            assert!(BundleId::new(bundle).is_ok(), "{bundle:?}");
        }
        for name in [
            "Visual Studio Code",
            "Wi-Fi Settings",
            "Notepad++",
            "Who Wants to Be a Millionaire?",
            "Q&A = Answers",
            "Tools -",
            "- Tools",
            "Zoom: Meetings",
            "Éditeur de texte",
        ] {
            assert!(DisplayName::new(name).is_ok(), "{name:?}");
        }
    }

    #[test]
    fn identity_refusals_name_the_fix_and_never_the_value() {
        for (error, fix) in [
            (InvalidId::Url, "never an address"),
            (InvalidId::Path, "never a path"),
            (InvalidId::QueryString, "name alone"),
            (InvalidId::WindowTitle, "never a window's title"),
        ] {
            let shown = format!("{error} {error:?}");
            assert!(shown.contains(fix), "{shown}");
            for planted in ["evil", "alice", "Invoice", "tok"] {
                assert!(!shown.contains(planted), "{shown}");
            }
        }
    }

    #[test]
    fn names_refuse_control_and_whitespace() {
        assert!(BundleId::new("com.example.App").is_ok());
        assert_eq!(BundleId::new("com example"), Err(InvalidId::Charset));
        assert_eq!(BundleId::new("x".repeat(161)), Err(InvalidId::Length));
        assert!(DisplayName::new("Text Editor").is_ok());
        assert!(DisplayName::new("é".repeat(120)).is_ok());
        assert_eq!(DisplayName::new("é".repeat(121)), Err(InvalidId::Length));
        assert_eq!(DisplayName::new("a\u{7}"), Err(InvalidId::Charset));
        assert_eq!(Subject::new("a\nb"), Err(InvalidId::Charset));
        assert_eq!(Subject::new("s".repeat(161)), Err(InvalidId::Length));
    }

    #[test]
    fn display_names_are_written_trimmed() {
        // Otherwise annal could write a name its own reader refuses.
        assert_eq!(DisplayName::new(" Terminal"), Err(InvalidId::Charset));
        assert_eq!(DisplayName::new("Terminal "), Err(InvalidId::Charset));
        assert!(DisplayName::new("Text Editor").is_ok());
    }

    #[test]
    fn names_read_leniently() {
        for name in ["Web Content", "Code - Insiders.exe", "a\tb", "x\u{1b}y"] {
            let read = BundleId::new_lenient(name).unwrap();
            assert!(!read.meets_write_rules(), "{name:?}");
            assert!(BundleId::new(name).is_err(), "{name:?}");
        }
        for name in [" a", "a ", "a\nb", "a\rb", "\u{2003}a", ""] {
            assert!(BundleId::new_lenient(name).is_err(), "{name:?}");
            assert!(DisplayName::new_lenient(name).is_err(), "{name:?}");
        }
        assert_eq!(
            BundleId::new_lenient("x".repeat(161)),
            Err(InvalidId::Length)
        );
        assert_eq!(
            DisplayName::new_lenient("x".repeat(121)),
            Err(InvalidId::Length)
        );
        assert!(DisplayName::new_lenient("Term\u{1b}inal").is_ok());
        for capability in ["Input.click", "input click", "1abc", "a\nb", " x "] {
            let read = Capability::new_lenient(capability).unwrap();
            assert!(!read.meets_write_rules(), "{capability:?}");
        }
        assert_eq!(Capability::new_lenient(""), Err(InvalidId::Length));
        assert_eq!(
            Capability::new_lenient("C".repeat(129)),
            Err(InvalidId::Length)
        );
        let subject = Subject::new_lenient("a\nb").unwrap();
        assert!(!subject.meets_write_rules());
        assert!(Subject::new("action/x").unwrap().meets_write_rules());
    }

    #[test]
    fn integers_written_as_floats_are_read() {
        use serde_json::{Value, json};
        let read = |v: Value| deserialize_json_integer(v).ok();
        assert_eq!(read(json!(7)), Some(7));
        assert_eq!(read(json!(7.0)), Some(7));
        assert_eq!(read(json!(-0.0)), Some(0));
        assert_eq!(read(json!(u64::MAX)), Some(u64::MAX));
        assert_eq!(
            read(json!(18_446_744_073_709_549_568.0)),
            Some(18_446_744_073_709_549_568)
        );
        for refused in [
            json!(7.5),
            json!(-1),
            json!(-1.0),
            json!(18_446_744_073_709_551_616.0),
            json!(1e300),
            json!("7"),
            json!(true),
            Value::Null,
        ] {
            assert_eq!(read(refused.clone()), None, "{refused}");
        }
        assert_eq!(
            serde_json::from_str::<Sequence>("1.0").ok(),
            Some(Sequence::FIRST)
        );
        assert!(serde_json::from_str::<Sequence>("0.0").is_err());
        assert!(serde_json::from_str::<Sequence>("1.5").is_err());
    }

    #[test]
    fn source_and_sequence() {
        let stream = OpaqueId::from_bytes([1; 16]);
        let source = SourceUrn::for_stream(&stream);
        assert_eq!(source.stream_id(), stream.as_str());
        assert!(SourceUrn::new("urn:cua-driver:history:ABCDEF").is_err());
        assert!(SourceUrn::new("urn:other:0123456789abcdef0123456789abcdef").is_err());
        assert_eq!(Sequence::new(0), None);
        assert_eq!(Sequence::FIRST.get(), 1);
        assert_eq!(Sequence::new(u64::MAX).and_then(Sequence::next), None);
    }

    #[test]
    fn an_inline_source_reads_writes_and_orders_as_its_text() {
        let text = "urn:cua-driver:history:0123456789abcdef0123456789abcdef";
        let source = SourceUrn::new(text).unwrap();
        assert_eq!(source.as_str(), text);
        assert_eq!(source.to_string(), text);
        assert_eq!(format!("{source:?}"), format!("SourceUrn({text:?})"));
        assert_eq!(source.stream_id(), "0123456789abcdef0123456789abcdef");
        let json = serde_json::to_string(&source).unwrap();
        assert_eq!(json, format!("{text:?}"));
        assert_eq!(serde_json::from_str::<SourceUrn>(&json).unwrap(), source);
        assert_eq!(
            serde_json::from_value::<SourceUrn>(serde_json::json!(text)).unwrap(),
            source
        );
        let later = SourceUrn::new("urn:cua-driver:history:1123456789abcdef0123456789abcdef");
        assert!(source < later.unwrap());
        for refused in [
            "",
            "urn:cua-driver:history:",
            "urn:cua-driver:history:0123456789abcdef0123456789abcde",
            "urn:cua-driver:history:0123456789abcdef0123456789abcdef0",
            "urn:cua-driver:history:0123456789ABCDEF0123456789abcdef",
            "urn:cua-driver:History:0123456789abcdef0123456789abcdef",
        ] {
            assert!(SourceUrn::new(refused).is_err(), "{refused:?} accepted");
            assert!(
                serde_json::from_value::<SourceUrn>(serde_json::json!(refused)).is_err(),
                "{refused:?} read"
            );
        }
    }
}
