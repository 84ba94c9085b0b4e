//! The export archive's content (docs/format.md, "Export archives"): what `annal export`
//! writes inside the age encryption (or bare, with `--plaintext`) and what `annal import`
//! checks. Pure: no file, key or daemon here.
//!
//! The content is JSON Lines:
//!
//! 1. the header line, `{"annal_export":1}` ([`HEADER_LINE`]);
//! 2. one line per event, oldest first, each exactly the event's compact contract JSON
//!    (`Event::to_json_vec`, what the writer stores), `data.sequence` strictly increasing;
//! 3. the manifest line, `{"annal_export_manifest":{...}}` ([`Manifest`]): the counts, the
//!    first and last sequence, the gaps, the seal-chain head the export was read under, the
//!    annal version, and the BLAKE3 digest of the event lines' bytes.
//!
//! The manifest comes last so that an export streams (the counts and digest are known only
//! once every event was written); a reader holds one line at a time. [`Tally`] counts what
//! was read and [`Tally::check`] compares it with the manifest: a count, a sequence, a gap or
//! the digest that differs is refused, naming the field.

use std::io::BufRead;

use annal_schema::Event;
use serde::{Deserialize, Serialize};

/// The archive content's format version (the header line's value).
pub const FORMAT_VERSION: u32 = 1;

/// The header line, without its newline.
pub const HEADER_LINE: &[u8] = b"{\"annal_export\":1}";

/// How the manifest line starts (the event lines never do: an event starts with
/// `{"specversion":`).
const MANIFEST_PREFIX: &[u8] = b"{\"annal_export_manifest\":";

/// Longest line a reader accepts, in bytes: an event's plaintext bound (64 KiB) or a manifest
/// with every gap listed, with room to spare.
pub const LINE_MAX_BYTES: usize = 256 * 1024;

/// Most gaps the manifest lists one by one; `missing_sequences` counts them all.
pub const GAPS_LISTED_MAX: usize = 1_024;

/// Length of the content digest (BLAKE3), in bytes.
const DIGEST_LEN_BYTES: usize = 32;

/// The manifest: what the archive holds, for the importer to check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// [`FORMAT_VERSION`].
    pub format_version: u32,
    /// The version of annal that wrote it.
    pub annal_version: String,
    /// When the export began, in ms since the epoch.
    pub exported_at_ms: u64,
    /// Events in the archive.
    pub event_count: u64,
    /// The first event's `data.sequence` (none when empty).
    pub first_sequence: Option<u64>,
    /// The last event's `data.sequence` (none when empty).
    pub last_sequence: Option<u64>,
    /// Sequences between the first and the last that no event of the archive has (skipped
    /// after a crash, pruned, or left out by the export's filters).
    pub missing_sequences: u64,
    /// The gaps as inclusive `[first, last]` ranges, the first [`GAPS_LISTED_MAX`] of them.
    pub gaps: Vec<[u64; 2]>,
    /// Whether the export's filters (`--since`, `--session`) left events out (the session
    /// itself is not named: it may be a private label).
    pub filtered: bool,
    /// The hex BLAKE3 digest of the newest verified seal of the store when the export began
    /// (`annal verify`'s chain head), or none when nothing was sealed yet or the seals could
    /// not be read.
    pub seal_chain_head: Option<String>,
    /// The hex BLAKE3 digest of the event lines' bytes, newlines included.
    pub content_blake3: String,
}

/// The manifest line's wrapper.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ManifestLine {
    annal_export_manifest: Manifest,
}

impl Manifest {
    /// The manifest line, with its newline.
    pub fn to_line(&self) -> Vec<u8> {
        let line = ManifestLine {
            annal_export_manifest: self.clone(),
        };
        // A struct of strings, integers and arrays always serializes.
        let mut bytes = serde_json::to_vec(&line).unwrap_or_default();
        bytes.push(b'\n');
        bytes
    }
}

/// Why an archive's content is refused. Each names what differs.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ArchiveError {
    /// The first line is not the header.
    #[error("not an annal export (the first line is not {{\"annal_export\":1}})")]
    NotAnArchive,
    /// A line is longer than [`LINE_MAX_BYTES`].
    #[error("line {line} is longer than {LINE_MAX_BYTES} bytes")]
    LineTooLong {
        /// Its 1-based number.
        line: u64,
    },
    /// A line is not an event of the contract.
    #[error("line {line} is not an event of the contract: {why}")]
    InvalidEvent {
        /// Its 1-based number.
        line: u64,
        /// What the parser said.
        why: String,
    },
    /// A line is an event, but not in the compact form annal writes (so it would not import
    /// byte for byte).
    #[error("line {line} is not the event's compact JSON")]
    NonCanonicalEvent {
        /// Its 1-based number.
        line: u64,
    },
    /// An event's sequence is not above the previous one's.
    #[error("line {line}: data.sequence {sequence} does not follow {previous}")]
    SequenceNotIncreasing {
        /// Its 1-based number.
        line: u64,
        /// Its sequence.
        sequence: u64,
        /// The previous event's.
        previous: u64,
    },
    /// The content ends before the manifest line: a truncated archive.
    #[error("the archive ends before its manifest (truncated)")]
    ManifestMissing,
    /// The manifest line does not parse.
    #[error("the manifest does not parse: {why}")]
    InvalidManifest {
        /// What the parser said.
        why: String,
    },
    /// The manifest is of another format version.
    #[error("the manifest's format_version is {found}; this annal reads {FORMAT_VERSION}")]
    UnsupportedVersion {
        /// What it says.
        found: u32,
    },
    /// Something follows the manifest line.
    #[error("bytes follow the manifest line")]
    TrailingData,
    /// A manifest field does not match what the archive holds.
    #[error("the manifest's {field} is {manifest}, the archive holds {found}")]
    Mismatch {
        /// The field.
        field: &'static str,
        /// What the manifest says.
        manifest: String,
        /// What was counted.
        found: String,
    },
    /// Writing an event where it goes failed (`annal import`'s new store).
    #[error("writing the imported store failed: {0}")]
    Sink(String),
    /// Reading failed (for an age archive: a tampered or truncated payload fails here).
    #[error("reading the archive failed: {0}")]
    Read(String),
}

/// What was read or written so far: the counts, sequences, gaps and digest a manifest states.
#[derive(Debug, Clone)]
pub struct Tally {
    count: u64,
    first: Option<u64>,
    last: Option<u64>,
    missing: u64,
    gaps: Vec<[u64; 2]>,
    hasher: blake3::Hasher,
}

impl Default for Tally {
    fn default() -> Self {
        Self::new()
    }
}

impl Tally {
    /// Nothing yet.
    pub fn new() -> Self {
        Self {
            count: 0,
            first: None,
            last: None,
            missing: 0,
            gaps: Vec::new(),
            hasher: blake3::Hasher::new(),
        }
    }

    /// Events counted.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The first and last sequence counted, 0 each when none was.
    pub fn range(&self) -> (u64, u64) {
        (self.first.unwrap_or(0), self.last.unwrap_or(0))
    }

    /// Adds the event line `line` (its bytes with the newline) of sequence `sequence`; `line_no`
    /// names it in the error when the sequence does not increase.
    pub fn push(&mut self, sequence: u64, line: &[u8], line_no: u64) -> Result<(), ArchiveError> {
        if let Some(previous) = self.last {
            if sequence <= previous {
                return Err(ArchiveError::SequenceNotIncreasing {
                    line: line_no,
                    sequence,
                    previous,
                });
            }
            if sequence > previous + 1 {
                self.missing += sequence - previous - 1;
                if self.gaps.len() < GAPS_LISTED_MAX {
                    self.gaps.push([previous + 1, sequence - 1]);
                }
            }
        }
        self.first.get_or_insert(sequence);
        self.last = Some(sequence);
        self.count += 1;
        self.hasher.update(line);
        Ok(())
    }

    /// The hex digest of the lines pushed.
    pub fn digest_hex(&self) -> String {
        let digest: [u8; DIGEST_LEN_BYTES] = *self.hasher.finalize().as_bytes();
        digest.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The manifest of what was pushed.
    pub fn manifest(
        &self,
        exported_at_ms: u64,
        filtered: bool,
        seal_chain_head: Option<String>,
    ) -> Manifest {
        Manifest {
            format_version: FORMAT_VERSION,
            annal_version: env!("CARGO_PKG_VERSION").to_owned(),
            exported_at_ms,
            event_count: self.count,
            first_sequence: self.first,
            last_sequence: self.last,
            missing_sequences: self.missing,
            gaps: self.gaps.clone(),
            filtered,
            seal_chain_head,
            content_blake3: self.digest_hex(),
        }
    }

    /// Whether `manifest` states exactly what was read: the first field that differs is the
    /// error (the count first, the digest last).
    pub fn check(&self, manifest: &Manifest) -> Result<(), ArchiveError> {
        if manifest.format_version != FORMAT_VERSION {
            return Err(ArchiveError::UnsupportedVersion {
                found: manifest.format_version,
            });
        }
        let show = |v: Option<u64>| v.map_or_else(|| "none".to_owned(), |v| v.to_string());
        let mismatch = |field, manifest: String, found: String| {
            Err(ArchiveError::Mismatch {
                field,
                manifest,
                found,
            })
        };
        if manifest.event_count != self.count {
            return mismatch(
                "event_count",
                manifest.event_count.to_string(),
                self.count.to_string(),
            );
        }
        if manifest.first_sequence != self.first {
            return mismatch(
                "first_sequence",
                show(manifest.first_sequence),
                show(self.first),
            );
        }
        if manifest.last_sequence != self.last {
            return mismatch(
                "last_sequence",
                show(manifest.last_sequence),
                show(self.last),
            );
        }
        if manifest.missing_sequences != self.missing || manifest.gaps != self.gaps {
            return mismatch(
                "gaps",
                format!("{} missing", manifest.missing_sequences),
                format!("{} missing", self.missing),
            );
        }
        let digest = self.digest_hex();
        if manifest.content_blake3 != digest {
            return mismatch("content_blake3", manifest.content_blake3.clone(), digest);
        }
        Ok(())
    }
}

/// One event line for the archive: the event's compact JSON and a newline.
pub fn event_line(event: &Event) -> Vec<u8> {
    let mut line = event.to_json_vec();
    line.push(b'\n');
    line
}

/// Reads one line (with its newline, when there is one) into `buf`, at most
/// [`LINE_MAX_BYTES`]. `Ok(false)` at the end.
fn read_line(
    input: &mut impl BufRead,
    buf: &mut Vec<u8>,
    line_no: u64,
) -> Result<bool, ArchiveError> {
    use std::io::Read;
    buf.clear();
    let limit = LINE_MAX_BYTES as u64 + 1;
    let read = input
        .by_ref()
        .take(limit)
        .read_until(b'\n', buf)
        .map_err(|e| ArchiveError::Read(e.to_string()))?;
    if buf.len() > LINE_MAX_BYTES {
        return Err(ArchiveError::LineTooLong { line: line_no });
    }
    Ok(read > 0)
}

/// Reads a whole archive content from `input`: checks the header, each event (contract JSON in
/// its compact form, sequences increasing), hands each to `on_event` with its line, and checks
/// the manifest against what was read. One line is held at a time. The manifest and the tally
/// when everything holds.
pub fn read_content(
    input: &mut impl BufRead,
    mut on_event: impl FnMut(Event, &[u8]) -> Result<(), ArchiveError>,
) -> Result<(Manifest, Tally), ArchiveError> {
    let mut buf = Vec::new();
    let mut line_no = 1;
    if !read_line(input, &mut buf, line_no)? || buf.strip_suffix(b"\n") != Some(HEADER_LINE) {
        return Err(ArchiveError::NotAnArchive);
    }
    let mut tally = Tally::new();
    loop {
        line_no += 1;
        if !read_line(input, &mut buf, line_no)? {
            return Err(ArchiveError::ManifestMissing);
        }
        if buf.starts_with(MANIFEST_PREFIX) {
            let Some(body) = buf.strip_suffix(b"\n") else {
                return Err(ArchiveError::ManifestMissing);
            };
            let manifest = serde_json::from_slice::<ManifestLine>(body)
                .map_err(|e| ArchiveError::InvalidManifest { why: e.to_string() })?
                .annal_export_manifest;
            if read_line(input, &mut buf, line_no + 1)? {
                return Err(ArchiveError::TrailingData);
            }
            tally.check(&manifest)?;
            return Ok((manifest, tally));
        }
        let Some(body) = buf.strip_suffix(b"\n") else {
            // An event line without its newline: the content was cut.
            return Err(ArchiveError::ManifestMissing);
        };
        let event = Event::from_json_slice(body).map_err(|e| ArchiveError::InvalidEvent {
            line: line_no,
            why: e.to_string(),
        })?;
        if event.to_json_vec() != body {
            return Err(ArchiveError::NonCanonicalEvent { line: line_no });
        }
        tally.push(event.data.sequence.get(), &buf, line_no)?;
        on_event(event, &buf)?;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// A valid event of sequence `sequence` (a reference fixture's, renumbered).
    fn event(sequence: u64) -> Event {
        let json = serde_json::json!({
            "specversion": "1.0",
            "id": format!("45d6ca1e8ad900f3c985cf8ada86f5{:02x}", sequence % 256),
            "source": "urn:cua-driver:history:6dd3aa1eef99854a9a3d39ba1e2315f1",
            "type": "cua-driver.history.action_completed.v0",
            "subject": "action/c59b2bd6db1046865a0a1cb7d63ddffa",
            "time": "2026-11-30T22:14:03.769293727Z",
            "datacontenttype": "application/json",
            "dataschema": "urn:cua-driver:schema:history-event:v0",
            "data": {
                "session_id": "b11ddce8dbd1872c9250e3f67dad2d9d",
                "action_id": "c59b2bd6db1046865a0a1cb7d63ddffa",
                "sequence": sequence,
                "platform": "linux",
                "process_model": "in_daemon",
                "capability": "input.keyboard.type",
                "caller_category": "cua_runtime",
                "application": {"bundle_id": "org.example.terminal", "display_name": "Terminal"},
                "payload": {
                    "kind": "action_completed",
                    "effect": "partial",
                    "route": "global_input",
                    "delivery": "foreground",
                    "delivered_count": 3,
                    "evidence_kinds": ["value_readback", "window_change"],
                    "escalation_kind": "retry_with_foreground_delivery"
                }
            }
        });
        Event::from_json_value(json).expect("a contract event")
    }

    fn content(sequences: &[u64], edit: impl FnOnce(&mut Manifest)) -> Vec<u8> {
        let mut out = HEADER_LINE.to_vec();
        out.push(b'\n');
        let mut tally = Tally::new();
        for (i, s) in sequences.iter().enumerate() {
            let line = event_line(&event(*s));
            tally.push(*s, &line, i as u64 + 2).unwrap();
            out.extend_from_slice(&line);
        }
        let mut manifest = tally.manifest(1, false, None);
        edit(&mut manifest);
        out.extend_from_slice(&manifest.to_line());
        out
    }

    fn read(bytes: &[u8]) -> Result<Manifest, ArchiveError> {
        read_content(&mut &bytes[..], |_, _| Ok(())).map(|(manifest, _)| manifest)
    }

    #[test]
    fn a_written_content_reads_back_with_its_gaps() {
        let bytes = content(&[3, 4, 7, 9], |_| {});
        let mut seen = Vec::new();
        let (manifest, tally) = read_content(&mut &bytes[..], |e: Event, line| {
            seen.push((e.data.sequence.get(), line.to_vec()));
            Ok(())
        })
        .unwrap();
        assert_eq!(tally.count(), 4);
        assert_eq!(manifest.first_sequence, Some(3));
        assert_eq!(manifest.last_sequence, Some(9));
        assert_eq!(manifest.missing_sequences, 3);
        assert_eq!(manifest.gaps, vec![[5, 6], [8, 8]]);
        assert_eq!(seen[0].1, event_line(&event(3)));
        assert_eq!(seen.len(), 4);
    }

    #[test]
    fn an_empty_archive_reads_back() {
        let manifest = read(&content(&[], |_| {})).unwrap();
        assert_eq!(manifest.event_count, 0);
        assert_eq!(manifest.first_sequence, None);
    }

    #[test]
    fn a_wrong_count_is_refused_naming_event_count() {
        let error = read(&content(&[1, 2], |m| m.event_count = 3)).unwrap_err();
        assert!(matches!(
            error,
            ArchiveError::Mismatch {
                field: "event_count",
                ..
            }
        ));
    }

    /// One change to a manifest.
    type Edit = fn(&mut Manifest);

    #[test]
    fn each_manifest_field_is_checked() {
        let cases: [(&str, Edit); 4] = [
            ("first_sequence", |m| m.first_sequence = Some(2)),
            ("last_sequence", |m| m.last_sequence = Some(9)),
            ("gaps", |m| m.missing_sequences = 0),
            ("content_blake3", |m| m.content_blake3 = "00".repeat(32)),
        ];
        for (name, edit) in cases {
            match read(&content(&[1, 5], edit)) {
                Err(ArchiveError::Mismatch { field, .. }) => assert_eq!(field, name),
                other => panic!("{name}: {other:?}"),
            }
        }
    }

    #[test]
    fn an_edited_event_fails_the_digest() {
        let mut bytes = content(&[1, 2], |_| {});
        let text = String::from_utf8(bytes.clone()).unwrap();
        let edited = text.replacen("\"delivered_count\":3", "\"delivered_count\":4", 1);
        assert_ne!(text, edited);
        bytes = edited.into_bytes();
        match read(&bytes) {
            Err(ArchiveError::Mismatch { field, .. }) => assert_eq!(field, "content_blake3"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_cut_content_is_refused_as_truncated() {
        let bytes = content(&[1, 2], |_| {});
        let manifest_at = bytes.len() - content(&[], |_| {}).len() + HEADER_LINE.len() + 1;
        for cut in [manifest_at, manifest_at - 5, bytes.len() - 1] {
            let error = read(&bytes[..cut]).unwrap_err();
            assert!(
                matches!(
                    error,
                    ArchiveError::ManifestMissing | ArchiveError::InvalidManifest { .. }
                ),
                "cut at {cut}: {error:?}"
            );
        }
    }

    #[test]
    fn other_contents_are_refused() {
        assert_eq!(read(b""), Err(ArchiveError::NotAnArchive));
        assert_eq!(
            read(b"{\"annal_export\":2}\n"),
            Err(ArchiveError::NotAnArchive)
        );
        let mut trailing = content(&[1], |_| {});
        trailing.extend_from_slice(b"x\n");
        assert_eq!(read(&trailing), Err(ArchiveError::TrailingData));
        let mut unordered = HEADER_LINE.to_vec();
        unordered.push(b'\n');
        unordered.extend(event_line(&event(2)));
        unordered.extend(event_line(&event(2)));
        assert!(matches!(
            read(&unordered),
            Err(ArchiveError::SequenceNotIncreasing { line: 3, .. })
        ));
        let mut pretty = HEADER_LINE.to_vec();
        pretty.push(b'\n');
        pretty.extend(serde_json::to_vec(&serde_json::to_value(event(1)).unwrap()).unwrap());
        pretty.extend(b" \n");
        assert!(matches!(
            read(&pretty),
            Err(ArchiveError::NonCanonicalEvent { line: 2 })
                | Err(ArchiveError::InvalidEvent { .. })
        ));
        let version = content(&[1], |m| m.format_version = 2);
        assert_eq!(
            read(&version),
            Err(ArchiveError::UnsupportedVersion { found: 2 })
        );
    }

    #[test]
    fn a_line_over_the_bound_is_refused() {
        let mut long = HEADER_LINE.to_vec();
        long.push(b'\n');
        long.extend(std::iter::repeat_n(b' ', LINE_MAX_BYTES + 1));
        assert_eq!(read(&long), Err(ArchiveError::LineTooLong { line: 2 }));
    }
}
