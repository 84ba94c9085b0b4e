//! `annal inspect STORE --key-hex-file FILE [--json]`: the offline, read-only store decoder.
//!
//! For forensics, support and interop. It opens nothing for writing (not the store, not the
//! writer lock, not the key file), appends no access record, and refuses a key file that group
//! or others can read. It prints every chunk's verdict and every accepted event in sequence
//! order; with `--json`, one object
//! `{"chunks":[{"file","verdict","records","first_sequence","last_sequence","detail"}],"events":[..]}`
//! whose events are the decrypted plaintexts embedded byte for byte.
//!
//! With `--query JSON` (the `history_query` arguments, e.g. `'{"limit":3}'`) it answers that
//! query through the same planner as the engine (`annal_engine::query::plan`), offline and
//! read-only (no access record, no file created or changed); `--retention-days N` applies the
//! retention cutoff (none unless given); with `--json` it prints the contract's query response
//! object. A bad request is refused with the contract's code (`invalid_history_query`,
//! `invalid_history_query_range`) and exit 2; a damaged store fails closed with
//! `history_storage_corrupt` and exit 1.
//!
//! Exit codes: 0 when every chunk is complete or torn (a torn tail is a crash, not a fault);
//! 1 when a chunk is corrupt or unreadable, chunks conflict, or the key is probably wrong; 2 for bad usage or
//! input (unsafe or malformed key file, not a store, unreadable store).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use annal_engine::profile::ChunkVerdict;
use std::sync::Arc;

use annal_engine::keys::HistoryKeys;
use annal_engine::storage::{Access, StoreLayout};
use annal_engine::store::{History, StoreReader, StoreReport, open_store};
use annal_schema::Event;

use serde::Serialize;
use serde_json::value::RawValue;

/// Arguments of `annal inspect`.
#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    /// The store root directory.
    pub store: PathBuf,
    /// A file holding the 32-byte namespace root key as 64 hex characters. Must not be readable
    /// by group or others.
    #[arg(long)]
    pub key_hex_file: PathBuf,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Answer this `history_query` (its JSON arguments) instead of listing the store.
    #[arg(long, value_name = "JSON")]
    pub query: Option<String>,
    /// With `--query`: hide events older than this many days (no cutoff unless given).
    #[arg(long, value_name = "N", requires = "query")]
    pub retention_days: Option<u32>,
}

/// One chunk in the JSON output.
#[derive(Serialize)]
struct JsonChunk<'a> {
    /// File name inside `chunks/`.
    file: &'a str,
    /// `complete`, `torn_tail` or `corrupt`.
    verdict: &'static str,
    /// Valid records in the chunk.
    records: usize,
    /// Sequence of the first valid record.
    first_sequence: Option<u64>,
    /// Sequence of the last valid record.
    last_sequence: Option<u64>,
    /// The corrupt reason, for a corrupt chunk.
    detail: Option<&'static str>,
}

/// The whole JSON output.
#[derive(Serialize)]
struct JsonReport<'a> {
    /// Every chunk, ordered by first sequence.
    chunks: Vec<JsonChunk<'a>>,
    /// Every accepted event, in sequence order, byte-identical to its plaintext.
    events: Vec<Box<RawValue>>,
}

/// Runs `annal inspect`.
pub fn run(args: &InspectArgs) -> ExitCode {
    let key = match crate::keyfile::load_key(&args.key_hex_file) {
        Ok(key) => key,
        Err(message) => {
            eprintln!("annal inspect: {}: {message}", args.key_hex_file.display());
            return ExitCode::from(2);
        }
    };
    // Read-only, as the store is: no sidecar is needed, no lock is taken, nothing is created.
    let storage = match open_store(&StoreLayout::contract_store_only(&args.store), Access::Read) {
        Ok(storage) => storage,
        Err(e) => {
            eprintln!("annal inspect: {e}");
            return ExitCode::from(2);
        }
    };
    let reader = StoreReader::<History>::new(Arc::new(storage));
    let session_key = key.session_id_key();
    let keys = HistoryKeys::from_root(key);
    let report = match reader.read(&keys) {
        Ok(report) => report,
        Err(e) => {
            eprintln!("annal inspect: {e}");
            return ExitCode::from(2);
        }
    };
    drop(keys);
    if let Some(query) = &args.query {
        return answer_query(query, args, &report, &session_key);
    }
    let printed = if args.json {
        print_json(&report)
    } else {
        print_text(&report)
    };
    if let Err(message) = printed {
        eprintln!("annal inspect: {message}");
        return ExitCode::from(2);
    }
    for conflict in &report.conflicts {
        eprintln!(
            "annal inspect: sequence {} in {} conflicts with {}",
            conflict.sequence, conflict.conflicting_file, conflict.kept_file
        );
    }
    if report.probable_wrong_key {
        eprintln!(
            "annal inspect: every chunk fails authentication at record 0: probably the wrong key"
        );
    }
    if report.has_corruption() || report.has_unreadable() || report.probable_wrong_key {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// `--query`: parses the request with the contract's parser, plans it over the store's records
/// with the engine's planner, prints the events (or the refusal's code).
fn answer_query(
    query: &str,
    args: &InspectArgs,
    report: &StoreReport<Event>,
    session_key: &annal_engine::keys::SessionIdKey,
) -> ExitCode {
    use annal_engine::query::{Index, IndexEntry, RetentionCutoff, plan};
    use annal_engine::store::RecordLocation;
    use annal_schema::ErrorCode;
    use annal_schema::tools::{QueryRequest, QueryResponse, ToolError};
    let refuse = |code: ErrorCode, exit: u8| {
        let line = if args.json {
            serde_json::to_string(&ToolError { code }).unwrap_or_default()
        } else {
            format!("refused: {code}")
        };
        match crate::write_out(&format!("{line}\n")) {
            Ok(()) => ExitCode::from(exit),
            Err(code) => code,
        }
    };
    let request = match serde_json::from_str::<serde_json::Value>(query)
        .map_err(|_| ErrorCode::InvalidHistoryQuery)
        .and_then(|value| QueryRequest::parse(&value))
    {
        Ok(request) => request,
        Err(code) => return refuse(code, 2),
    };
    // Fail closed: a damaged store answers nothing.
    if report.has_corruption() || report.has_unreadable() || report.probable_wrong_key {
        return refuse(ErrorCode::HistoryStorageCorrupt, 1);
    }
    let mut entries = Vec::with_capacity(report.events.len());
    let mut by_sequence = std::collections::HashMap::with_capacity(report.events.len());
    for (chunk, record) in report.events.iter().filter_map(|loc| {
        let chunk = report.chunks.get(loc.chunk)?;
        Some((chunk, chunk.verdict.records().get(loc.record)?))
    }) {
        let Some(chunk_id) = chunk.chunk_id else {
            continue;
        };
        let location = RecordLocation {
            chunk_id,
            position: record.position,
            offset: record.offset,
            len: record.len,
            sequence: record.sequence(),
        };
        entries.push(IndexEntry::of(&record.event, location));
        by_sequence.insert(record.sequence(), &record.event);
    }
    let index = Index::from_entries(entries);
    let cutoff = args.retention_days.map_or(RetentionCutoff::NONE, |days| {
        RetentionCutoff::new(
            annal_engine::clock::Clock::now_since_epoch(&annal_engine::clock::SystemClock),
            days,
        )
    });
    let events: Vec<Event> = plan(&request, &index, session_key, cutoff)
        .iter()
        .filter_map(|location| by_sequence.get(&location.sequence).map(|e| (*e).clone()))
        .collect();
    let mut stdout = std::io::stdout().lock();
    let written = if args.json {
        serde_json::to_writer(&mut stdout, &QueryResponse { events })
            .map_err(|e| e.to_string())
            .and_then(|()| writeln!(stdout).map_err(|e| e.to_string()))
    } else {
        events.iter().try_for_each(|event| {
            writeln!(
                stdout,
                "event {} {}",
                event.data.sequence,
                String::from_utf8_lossy(&event.to_json_vec())
            )
            .map_err(|e| e.to_string())
        })
    };
    match written {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("annal inspect: {message}");
            ExitCode::from(2)
        }
    }
}

fn detail(verdict: &ChunkVerdict) -> Option<&'static str> {
    match verdict {
        ChunkVerdict::Corrupt { reason, .. } => Some(reason.as_str()),
        ChunkVerdict::Unreadable { reason } => Some(reason.as_str()),
        _ => None,
    }
}

/// The first and last sequence of a chunk's valid records.
fn sequence_range(chunk: &annal_engine::store::ChunkReport<Event>) -> (Option<u64>, Option<u64>) {
    (
        chunk.first_record().map(|r| r.sequence()),
        chunk.last_record().map(|r| r.sequence()),
    )
}

fn print_json(report: &StoreReport<Event>) -> Result<(), String> {
    let chunks = report
        .chunks
        .iter()
        .map(|c| JsonChunk {
            file: &c.file_name,
            verdict: c.verdict.name(),
            records: c.verdict.records().len(),
            first_sequence: sequence_range(c).0,
            last_sequence: sequence_range(c).1,
            detail: detail(&c.verdict),
        })
        .collect();
    let mut events = Vec::with_capacity(report.events.len());
    for record in report.records() {
        // The reader validated the plaintext as a v0 event, so it is UTF-8 JSON; RawValue keeps
        // its exact bytes.
        let text = String::from_utf8(record.plaintext.clone())
            .map_err(|_| "an event plaintext is not UTF-8".to_owned())?;
        events.push(RawValue::from_string(text).map_err(|e| e.to_string())?);
    }
    let out = JsonReport { chunks, events };
    let mut stdout = std::io::stdout().lock();
    serde_json::to_writer(&mut stdout, &out).map_err(|e| e.to_string())?;
    writeln!(stdout).map_err(|e| e.to_string())
}

fn print_text(report: &StoreReport<Event>) -> Result<(), String> {
    let mut stdout = std::io::stdout().lock();
    let mut out = |line: String| writeln!(stdout, "{line}").map_err(|e| e.to_string());
    for chunk in &report.chunks {
        let range = match sequence_range(chunk) {
            (Some(first), Some(last)) => format!(" sequences {first}..={last}"),
            _ => String::new(),
        };
        let extra = match &chunk.verdict {
            ChunkVerdict::Complete { .. } => String::new(),
            ChunkVerdict::TornTail { valid_len, .. } => {
                format!(" (incomplete final record after byte {valid_len})")
            }
            ChunkVerdict::Corrupt {
                record_index,
                offset,
                reason,
            } => match record_index {
                Some(index) => format!(" ({reason} at record {index}, byte {offset})"),
                None => format!(" ({reason} in the header)"),
            },
            ChunkVerdict::Unreadable { reason } => format!(" ({})", reason.as_str()),
        };
        out(format!(
            "chunk {} {} records {}{range}{extra}",
            chunk.file_name,
            chunk.verdict.name(),
            chunk.verdict.records().len()
        ))?;
    }
    for record in report.records() {
        out(format!(
            "event {} {}",
            record.sequence(),
            String::from_utf8_lossy(&record.plaintext)
        ))?;
    }
    Ok(())
}
