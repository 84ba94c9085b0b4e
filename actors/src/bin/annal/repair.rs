//! The owner's offline maintenance: `annal repair --quarantine CHUNK` and `annal index rebuild`.
//!
//! Both need the store's writer lock: they stop the store's daemon first (it drains), open the
//! store in this process with the key from its credential store, do their work, and let the next
//! command start a daemon again.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use annal_engine::clock::SystemClock;
use annal_engine::index::{IndexKey, rebuild_index_files};
use annal_engine::keys::KeyCustody;
use annal_engine::profile::ChunkId;
use annal_engine::storage::{Access, Storage};
use annal_engine::store::{open_store, parse_chunk_file_name, quarantine_chunk};
use serde_json::json;

use crate::location::Location;
use crate::owner::{OutputArgs, stop_daemon};
use crate::{CliError, report_error};

/// How often the spinner of a long step redraws, in milliseconds.
const SPINNER_TICK_MS: u64 = 100;

/// Arguments of `annal repair`.
#[derive(Debug, clap::Args)]
pub struct RepairArgs {
    /// Move this chunk (its id, or its `<id>.cborseq` file name, as `annal verify` prints it)
    /// into `engine/quarantine/` and record it in the journal; the rest of the store then reads
    /// normally. Nothing is deleted.
    #[arg(long, value_name = "CHUNK")]
    pub quarantine: String,
    #[command(flatten)]
    pub out: OutputArgs,
}

/// `annal index ...`.
#[derive(Debug, clap::Args)]
pub struct IndexArgs {
    /// What to do with the derived index.
    #[command(subcommand)]
    pub command: IndexCommand,
}

/// The index commands.
#[derive(Debug, clap::Subcommand)]
pub enum IndexCommand {
    /// Rebuild every index file from its chunk (the index is derived, never authoritative).
    Rebuild(OutputArgs),
}

/// The store opened for writing with its key, the daemon stopped first.
fn open_offline(location: &Location) -> Result<(Arc<dyn Storage>, KeyCustody), CliError> {
    stop_daemon(location)?;
    let layout = location.layout();
    if !layout.history_root().exists() {
        return Err(CliError::usage(format!(
            "there is no store at {}: nothing to do",
            location.dir.display()
        )));
    }
    let storage = open_store(&layout, Access::Write)
        .map_err(|e| CliError::unavailable(format!("cannot open the store for writing: {e}")))?;
    let custody = location.store_key()?;
    Ok((Arc::new(storage), custody))
}

/// A spinner for one long step (`verify`, `index rebuild`).
pub fn spinner(message: &'static str) -> indicatif::ProgressBar {
    // Drawn on stderr, and hidden by indicatif when stderr is not a terminal.
    let bar = indicatif::ProgressBar::new_spinner();
    bar.set_message(message);
    bar.enable_steady_tick(Duration::from_millis(SPINNER_TICK_MS));
    bar
}

/// Runs `annal repair`.
pub fn repair(location: &Location, args: &RepairArgs) -> ExitCode {
    let result = (|| {
        let text = args.quarantine.trim();
        let chunk = parse_chunk_file_name(text)
            .or_else(|| ChunkId::from_hex(text))
            .ok_or_else(|| {
                CliError::usage(
                    "--quarantine: a chunk id (32 lower-case hex) or its <id>.cborseq file name",
                )
            })?;
        let (storage, custody) = open_offline(location)?;
        let done = quarantine_chunk(
            &storage,
            chunk,
            &custody.journal_keys(),
            custody.reference(),
            Arc::new(SystemClock),
        )
        .map_err(|e| CliError::found(format!("repair: {e}")))?;
        Ok(json!({
            "quarantined": chunk.to_hex(),
            "moved": done.moved,
            "recorded": done.recorded,
        }))
    })();
    match result {
        Ok(value) => crate::owner::print(&args.out, &value, || {
            format!(
                "chunk {} moved to engine/quarantine/ (kept, no longer read) and recorded in \
                 the journal; the rest of the store reads normally.\n",
                value["quarantined"].as_str().unwrap_or_default()
            )
        }),
        Err(error) => report_error(&error),
    }
}

/// Runs `annal index rebuild`.
pub fn index(location: &Location, args: &IndexArgs) -> ExitCode {
    let IndexCommand::Rebuild(out) = &args.command;
    let result = (|| {
        let (storage, custody) = open_offline(location)?;
        let bar = spinner("rebuilding the index from every chunk");
        let rebuilt = rebuild_index_files(
            &storage,
            &custody.history_keys(),
            &IndexKey::new(&custody.index_key()),
        );
        bar.finish_and_clear();
        let (_, report) = rebuilt.map_err(|e| CliError::found(format!("index rebuild: {e}")))?;
        Ok(json!({
            "chunks": report.chunks,
            "index_files_written": report.chunks_scanned.saturating_sub(report.write_failures),
            "write_failures": report.write_failures,
            "orphans_removed": report.orphans_removed,
            "corrupt": report.corrupt,
        }))
    })();
    match result {
        Ok(value) => {
            let failed = value["write_failures"].as_u64().unwrap_or(0) > 0;
            let code = crate::owner::print(out, &value, || {
                format!(
                    "index rebuilt: {} chunks, {} index files written, {} stale files removed{}\n",
                    value["chunks"],
                    value["index_files_written"],
                    value["orphans_removed"],
                    if failed { "; some writes FAILED" } else { "" }
                )
            });
            if failed {
                ExitCode::from(crate::EXIT_FOUND_PROBLEM)
            } else {
                code
            }
        }
        Err(error) => report_error(&error),
    }
}
