//! `annal verify [DIR] [--key-hex-file FILE] [--json]`: checks a store's chunks, seals and seal
//! chain.
//!
//! Without `--key-hex-file`, the store is the one the global options name (`--store`,
//! `--namespace`; `DIR` overrides the directory) and its key is read from the credential store
//! that holds it; a daemon serving the store is asked to flush first, so what was captured is
//! checked too. With `--key-hex-file` (offline forensics) `DIR` is required.
//!
//! Read-only, like `inspect`: opens nothing for writing, takes no lock, creates nothing. `DIR` is
//! a namespace directory (`computer-history/` and annal's `engine/` sidecar inside it) or a bare
//! contract store (then there are no seals: only the chunks are checked). Every chunk gets its
//! findings (`ok`, `torn_tail`, `corrupt`, `unreadable`, `missing`, `replaced`, `duplicated`,
//! `reordered`, `unsealed`, `seal_invalid`) and the store its own (`rolled_back`, `chain_gap`,
//! `chain_broken`, ...); see `docs/design.md` ("Verify"). The checkpoint that detects a rollback
//! of the whole directory lives in the credential store and is not read by this offline mode
//! (`"checkpoint_checked": false`).
//!
//! Exit codes: 0 when nothing was found; 1 when anything was; 2 for bad usage or input.

use std::io::Write;
use std::path::PathBuf;

use crate::location::Location;
use std::process::ExitCode;
use std::sync::Arc;

use annal_engine::keys::HistoryKeys;
use annal_engine::seal::{SealKey, verify};
use annal_engine::storage::{Access, Storage, StoreLayout};
use annal_engine::store::{MARKER_FILE_NAME, open_store};

/// Arguments of `annal verify`.
#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    /// The namespace directory (or a bare contract store); default: the store the global
    /// options name.
    pub dir: Option<PathBuf>,
    /// A file holding the 32-byte namespace root key as 64 hex characters (offline mode; needs
    /// DIR). Must not be readable by group or others. Without it, the key comes from the
    /// credential store.
    #[arg(long, requires = "dir")]
    pub key_hex_file: Option<PathBuf>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// The history keys and seal key: from the key file, or from the store's credential store.
fn keys(args: &VerifyArgs, location: &Location) -> Result<(HistoryKeys, SealKey), crate::CliError> {
    if let Some(file) = &args.key_hex_file {
        let key = crate::keyfile::load_key(file)
            .map_err(|message| crate::CliError::usage(format!("{}: {message}", file.display())))?;
        let seal_key = SealKey::from_purpose_key(&key.seal_key());
        return Ok((HistoryKeys::from_root(key), seal_key));
    }
    let custody = location.store_key().map_err(|mut error| {
        error
            .message
            .push_str("; without the key nothing can be verified");
        error
    })?;
    Ok((
        custody.history_keys(),
        SealKey::from_purpose_key(&custody.seal_key()),
    ))
}

/// Asks a daemon serving the store, if one runs, to make everything captured durable.
fn flush_daemon(location: &Location) {
    let Ok(runtime) = crate::runtime() else {
        return;
    };
    runtime.block_on(async {
        if let Some(mut client) = crate::link::Link::running(location).await {
            let _ = client
                .request(&annal_actors::daemon::Request::Flush {})
                .await;
        }
    });
}

/// Runs `annal verify`.
pub fn run(args: &VerifyArgs, location: &Location) -> ExitCode {
    let (keys, seal_key) = match keys(args, location) {
        Ok(keys) => keys,
        Err(error) => {
            eprintln!("annal verify: {}", error.message);
            return ExitCode::from(error.exit);
        }
    };
    if args.key_hex_file.is_none() {
        flush_daemon(location);
    }
    let dir = args.dir.clone().unwrap_or_else(|| location.dir.clone());
    let layout = if dir.join(MARKER_FILE_NAME).exists() {
        StoreLayout::contract_store_only(&dir)
    } else {
        StoreLayout::in_namespace_dir(&dir)
    };
    let storage: Arc<dyn Storage> = match open_store(&layout, Access::Read) {
        Ok(storage) => Arc::new(storage),
        Err(e) => {
            eprintln!("annal verify: {e}");
            return ExitCode::from(2);
        }
    };
    let bar = crate::repair::spinner("verifying every chunk and seal");
    let verified = verify(&storage, &keys, &seal_key, None);
    bar.finish_and_clear();
    let report = match verified {
        Ok(report) => report,
        Err(e) => {
            eprintln!("annal verify: {e}");
            return ExitCode::from(2);
        }
    };
    let chunks: Vec<serde_json::Value> = report
        .chunks
        .iter()
        .map(|chunk| {
            serde_json::json!({
                "file": chunk.file_name,
                "records": chunk.records,
                "sealed": chunk.sealed,
                "findings": chunk.findings.iter().map(|f| f.as_str()).collect::<Vec<_>>(),
            })
        })
        .collect();
    let store: Vec<&str> = report.store.iter().map(|f| f.as_str()).collect();
    let clean = report.is_clean();
    let mut stdout = std::io::stdout().lock();
    let written = if args.json {
        let value = serde_json::json!({
            "clean": clean,
            "seals": report.seals,
            "checkpoint_checked": report.checkpoint_checked,
            "chunks": chunks,
            "store": store,
        });
        writeln!(stdout, "{value}")
    } else {
        let mut lines = Vec::new();
        for chunk in &report.chunks {
            let findings: Vec<&str> = chunk.findings.iter().map(|f| f.as_str()).collect();
            lines.push(format!(
                "chunk {} records {} {}",
                chunk.file_name,
                chunk.records,
                findings.join(",")
            ));
        }
        for finding in &store {
            lines.push(format!("store {finding}"));
        }
        lines.push(format!(
            "{} ({} seals; the credential-store checkpoint was not checked offline)",
            if clean { "clean" } else { "FINDINGS" },
            report.seals
        ));
        writeln!(stdout, "{}", lines.join("\n"))
    };
    if written.is_err() {
        return ExitCode::from(2);
    }
    if clean {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
