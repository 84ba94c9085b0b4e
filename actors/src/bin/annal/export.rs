//! `annal export`: the whole history (or what `--since` and `--session` keep) as one archive
//! encrypted to age X25519 recipients with the `age` crate (`import.rs` reads it back). The
//! content is `archive.rs`'s; docs/format.md ("Export archives") describes both layers.
//!
//! An export is the owner's read: it pages through the store with the daemon's `query`
//! request (or in this process with `--no-daemon`), each page audited as the owner's
//! (`local_cli`) query and appending the contract's `access` event as `annal list` does
//! (unless `annal owner-access off`). Owner reads return at most 200 events, so it pages twice
//! with bounded memory: first from the newest down to learn where each page starts (only those
//! sequences are kept), then up again, each page's events streamed into the age encryptor
//! oldest first. The sequences above the newest event seen first (this export's own access
//! events among them) are not read.
//!
//! Once the content was read, the export itself is journaled (`record_export`, the audit
//! journal's `owner_exported`): `annal audit` lists it as the owner's `export` with its count.
//!
//! A file is written 0600 beside its destination, synced, and renamed into place only when
//! complete; on any error it is removed, so nothing half-written is left. `--plaintext`
//! writes the same content unencrypted, only to a file named with `--out` and only once
//! confirmed (`--yes`, or the prompt on a terminal).

use std::io::{IsTerminal, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::str::FromStr;

use annal_actors::daemon::Request;
use annal_schema::Event;
use annal_schema::tools::QUERY_LIMIT_MAX_EVENTS;
use serde_json::Value;

use crate::archive::{self, HEADER_LINE, Tally};
use crate::link::Link;
use crate::location::Location;
use crate::private_file::PRIVATE_FILE_MODE;
use crate::reads::{FilterArgs, events, request};
use crate::{CliError, report_error};

/// Events one owner read returns at most (one page).
const PAGE_EVENTS: u64 = QUERY_LIMIT_MAX_EVENTS as u64;

/// Arguments of `annal export`.
#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    /// An age X25519 recipient (age1...) the archive is encrypted to; repeat it for several.
    #[arg(long = "recipient", value_name = "AGE_RECIPIENT")]
    pub recipients: Vec<String>,
    /// Only events at or after WHEN: a duration back from now (30m, 2h, 7d) or a time (as
    /// `annal list --since`).
    #[arg(long, value_name = "WHEN")]
    pub since: Option<String>,
    /// Only this session's events: its opaque id or its raw label.
    #[arg(long, alias = "session-id", value_name = "SESSION")]
    pub session: Option<String>,
    /// The archive's file (written 0600, complete or not at all); default: standard output,
    /// when it is not a terminal.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Write JSON Lines without encryption (needs --out FILE and a confirmation).
    #[arg(long)]
    pub plaintext: bool,
    /// Confirm --plaintext without asking.
    #[arg(long)]
    pub yes: bool,
}

/// The recipients, each parsed; a bad one names `--recipient` and the form.
fn recipients(args: &ExportArgs) -> Result<Vec<age::x25519::Recipient>, CliError> {
    args.recipients
        .iter()
        .map(|text| {
            age::x25519::Recipient::from_str(text.trim()).map_err(|why| {
                CliError::usage(format!(
                    "--recipient {text:?}: not an age X25519 recipient ({why}): give the \
                     age1... line age-keygen printed as `Public key:`"
                ))
            })
        })
        .collect()
}

/// The plaintext guard: `--plaintext` needs `--out FILE` and a confirmation.
fn confirm_plaintext(args: &ExportArgs) -> Result<(), CliError> {
    if args.out.is_none() {
        return Err(CliError::usage(
            "--plaintext writes the events unencrypted, so only to a file you name: add \
             --out FILE (or drop --plaintext and give --recipient)",
        ));
    }
    if args.yes {
        return Ok(());
    }
    if std::io::stdin().is_terminal() && std::io::stderr().is_terminal() {
        let confirmed = dialoguer::Confirm::new()
            .with_prompt("Write the history unencrypted (it leaves the encryption behind)?")
            .default(false)
            .interact()
            .map_err(|e| CliError::usage(format!("no confirmation: {e}")))?;
        if confirmed {
            return Ok(());
        }
    }
    Err(CliError::usage(
        "--plaintext writes the events unencrypted: confirm with --yes (or answer the prompt \
         on a terminal)",
    ))
}

/// Where the archive goes: a file beside its destination (renamed in by [`Sink::finish`]) or
/// standard output.
enum Sink {
    File {
        staging: PathBuf,
        path: PathBuf,
        file: std::fs::File,
    },
    Stdout(std::io::Stdout),
}

impl Sink {
    fn open(out: Option<&Path>) -> Result<Self, CliError> {
        let Some(path) = out else {
            if std::io::stdout().is_terminal() {
                return Err(CliError::usage(
                    "the archive is binary: give --out FILE or redirect standard output",
                ));
            }
            return Ok(Self::Stdout(std::io::stdout()));
        };
        let name = path
            .file_name()
            .ok_or_else(|| CliError::usage("--out: give a file name"))?;
        let staging = path.with_file_name(format!(
            ".{}.{}.tmp",
            name.to_string_lossy(),
            std::process::id()
        ));
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(PRIVATE_FILE_MODE)
            .open(&staging)
            .map_err(|e| CliError::usage(format!("--out {}: {e}", path.display())))?;
        Ok(Self::File {
            staging,
            path: path.to_path_buf(),
            file,
        })
    }

    /// Syncs and renames the file into place.
    fn finish(self) -> Result<(), CliError> {
        match self {
            Self::File {
                staging,
                path,
                file,
            } => {
                let done = file
                    .sync_all()
                    .and_then(|()| std::fs::rename(&staging, &path));
                if let Err(e) = done {
                    let _ = std::fs::remove_file(&staging);
                    return Err(CliError::unavailable(format!("{}: {e}", path.display())));
                }
                Ok(())
            }
            Self::Stdout(mut out) => out
                .flush()
                .map_err(|e| CliError::unavailable(format!("standard output: {e}"))),
        }
    }

    /// Removes the unfinished file.
    fn abandon(self) {
        if let Self::File { staging, .. } = self {
            let _ = std::fs::remove_file(staging);
        }
    }
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Self::File { file, .. } => file.write(buf),
            Self::Stdout(out) => out.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Self::File { file, .. } => file.flush(),
            Self::Stdout(out) => out.flush(),
        }
    }
}

/// The hex digest of the store's seal-chain head (`annal verify`'s tip), when the key and the
/// seals can be read; none otherwise (nothing sealed yet included).
fn seal_chain_head(location: &Location) -> Option<String> {
    use annal_engine::seal::{SealKey, chain_tip, read_seals};
    let provider = location.key_provider().ok()?;
    let custody = location.store_key_in(provider.as_ref()).ok()?;
    let storage =
        annal_engine::store::open_store(&location.layout(), annal_engine::storage::Access::Read)
            .ok()?;
    let seals = read_seals(&storage, &SealKey::from_purpose_key(&custody.seal_key())).ok()?;
    let tip = chain_tip(&seals)?;
    Some(tip.digest().iter().map(|b| format!("{b:02x}")).collect())
}

/// One owner read of at most a page: sequences `since..=until` narrowed by the filter.
async fn page(
    link: &mut Link,
    filter: &FilterArgs,
    since: Option<u64>,
    until: Option<u64>,
) -> Result<Vec<Event>, CliError> {
    let mut arguments = serde_json::Map::new();
    arguments.insert("limit".into(), Value::from(PAGE_EVENTS));
    if let Some(since) = since {
        arguments.insert("since_sequence".into(), Value::from(since));
    }
    if let Some(until) = until {
        arguments.insert("until_sequence".into(), Value::from(until));
    }
    let value = link.request(request(arguments, filter, None)?).await?;
    events(&value)?
        .into_iter()
        .map(|value| {
            Event::from_json_value(value).map_err(|e| {
                CliError::unavailable(format!("the store answered an event off the contract: {e}"))
            })
        })
        .collect()
}

/// Pages from the newest down: where each page starts (newest page first) and the newest
/// sequence; nothing when no event matches.
async fn page_starts(link: &mut Link, filter: &FilterArgs) -> Result<(Vec<u64>, u64), CliError> {
    let mut starts = Vec::new();
    let mut top = None;
    let mut until = None;
    loop {
        let events = page(link, filter, None, until).await?;
        let (Some(first), Some(last)) = (events.first(), events.last()) else {
            break;
        };
        let first = first.data.sequence.get();
        top.get_or_insert(last.data.sequence.get());
        starts.push(first);
        if (events.len() as u64) < PAGE_EVENTS || first <= 1 {
            break;
        }
        until = Some(first - 1);
    }
    Ok((starts, top.unwrap_or_default()))
}

/// Writes the archive content (header, events, manifest) to `out`; the tally.
async fn write_content(
    link: &mut Link,
    filter: &FilterArgs,
    out: &mut impl Write,
    exported_at_ms: u64,
    head: Option<String>,
) -> Result<Tally, CliError> {
    let io = |e: std::io::Error| CliError::unavailable(format!("writing the archive: {e}"));
    out.write_all(HEADER_LINE).map_err(io)?;
    out.write_all(b"\n").map_err(io)?;
    let (starts, top) = page_starts(link, filter).await?;
    let mut tally = Tally::new();
    let mut line_no = 1;
    // Oldest page first: each window ends where the next (newer) page starts.
    let mut ends = starts
        .iter()
        .map(|s| s.saturating_sub(1))
        .collect::<Vec<_>>();
    ends.insert(0, top);
    for (start, end) in starts.iter().rev().zip(ends.iter().rev().skip(1)) {
        for event in page(link, filter, Some(*start), Some(*end)).await? {
            let line = archive::event_line(&event);
            line_no += 1;
            tally
                .push(event.data.sequence.get(), &line, line_no)
                .map_err(|e| CliError::unavailable(format!("the store's answer: {e}")))?;
            out.write_all(&line).map_err(io)?;
        }
    }
    let filtered = filter.since.is_some() || filter.session.is_some();
    out.write_all(&tally.manifest(exported_at_ms, filtered, head).to_line())
        .map_err(io)?;
    Ok(tally)
}

/// `annal export`.
pub fn export(location: &Location, no_daemon: bool, args: &ExportArgs) -> ExitCode {
    match run_export(location, no_daemon, args) {
        Ok(message) => {
            eprintln!("annal: {message}");
            ExitCode::SUCCESS
        }
        Err(error) => report_error(&error),
    }
}

fn run_export(location: &Location, no_daemon: bool, args: &ExportArgs) -> Result<String, CliError> {
    let recipients = recipients(args)?;
    if args.plaintext {
        if !recipients.is_empty() {
            return Err(CliError::usage(
                "--plaintext and --recipient exclude each other: drop one",
            ));
        }
        confirm_plaintext(args)?;
    } else if recipients.is_empty() {
        return Err(CliError::usage(
            "give --recipient age1... (an age X25519 recipient; repeat for several), or \
             --plaintext --out FILE --yes for unencrypted JSON Lines",
        ));
    }
    let filter = FilterArgs {
        since: args.since.clone(),
        session: args.session.clone(),
        ..FilterArgs::default()
    };
    // The filters' values are checked before anything is opened or written.
    request(serde_json::Map::new(), &filter, None)?;
    let exported_at_ms = annal_engine::clock::Clock::now_ms(&annal_engine::clock::SystemClock);
    let head = seal_chain_head(location);
    let mut sink = Sink::open(args.out.as_deref())?;
    let runtime = crate::runtime()?;
    let written = runtime.block_on(async {
        let mut link = Link::open(location, no_daemon).await?;
        let result = if args.plaintext {
            write_content(&mut link, &filter, &mut sink, exported_at_ms, head).await
        } else {
            encrypted(
                &mut link,
                &filter,
                &recipients,
                &mut sink,
                exported_at_ms,
                head,
            )
            .await
        };
        // Journaled as an export (`owner_exported`, in `annal audit`) once its content was
        // read, beside the owner's reads it was made of.
        let result = match result {
            Ok(tally) => {
                let (first_sequence, last_sequence) = tally.range();
                let record = Request::RecordExport {
                    events: tally.count(),
                    first_sequence,
                    last_sequence,
                    encrypted: !args.plaintext,
                };
                link.request(record).await.map(|_| tally)
            }
            Err(error) => Err(error),
        };
        link.close().await;
        result
    });
    let tally = match written {
        Ok(tally) => tally,
        Err(error) => {
            sink.abandon();
            return Err(error);
        }
    };
    sink.finish()?;
    let to = args
        .out
        .as_ref()
        .map_or_else(|| "standard output".to_owned(), |p| p.display().to_string());
    let how = if args.plaintext {
        "unencrypted"
    } else {
        "encrypted"
    };
    Ok(format!("exported {} events ({how}) to {to}", tally.count()))
}

/// [`write_content`] through the age encryptor.
async fn encrypted(
    link: &mut Link,
    filter: &FilterArgs,
    recipients: &[age::x25519::Recipient],
    sink: &mut Sink,
    exported_at_ms: u64,
    head: Option<String>,
) -> Result<Tally, CliError> {
    let encryptor =
        age::Encryptor::with_recipients(recipients.iter().map(|r| r as &dyn age::Recipient))
            .map_err(|e| CliError::usage(format!("--recipient: {e}")))?;
    let io = |e: std::io::Error| CliError::unavailable(format!("writing the archive: {e}"));
    let mut writer = encryptor.wrap_output(sink).map_err(io)?;
    let tally = write_content(link, filter, &mut writer, exported_at_ms, head).await?;
    writer.finish().map_err(io)?;
    Ok(tally)
}
