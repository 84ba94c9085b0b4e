//! `annal verify DIR --key-hex-file FILE [--json]`: checks a store's chunks, seals and seal chain.
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
use std::process::ExitCode;
use std::sync::Arc;

use annal_engine::keys::HistoryKeys;
use annal_engine::seal::{SealKey, verify};
use annal_engine::storage::{Access, Storage, StoreLayout};
use annal_engine::store::{MARKER_FILE_NAME, open_store};

/// Arguments of `annal verify`.
#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    /// The namespace directory (or a bare contract store).
    pub dir: PathBuf,
    /// A file holding the 32-byte namespace root key as 64 hex characters. Must not be readable
    /// by group or others.
    #[arg(long)]
    pub key_hex_file: PathBuf,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Runs `annal verify`.
pub fn run(args: &VerifyArgs) -> ExitCode {
    let key = match crate::keyfile::load_key(&args.key_hex_file) {
        Ok(key) => key,
        Err(message) => {
            eprintln!("annal verify: {}: {message}", args.key_hex_file.display());
            return ExitCode::from(2);
        }
    };
    let layout = if args.dir.join(MARKER_FILE_NAME).exists() {
        StoreLayout::contract_store_only(&args.dir)
    } else {
        StoreLayout::in_namespace_dir(&args.dir)
    };
    let storage: Arc<dyn Storage> = match open_store(&layout, Access::Read) {
        Ok(storage) => Arc::new(storage),
        Err(e) => {
            eprintln!("annal verify: {e}");
            return ExitCode::from(2);
        }
    };
    let seal_key = SealKey::from_purpose_key(&key.seal_key());
    let keys = HistoryKeys::from_root(key);
    let report = match verify(&storage, &keys, &seal_key, None) {
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
