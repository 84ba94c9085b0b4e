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
//! `reordered`, `unsealed`, `seal_invalid`, and `quarantined` or `pruned`, which are not
//! damage: the journal records them) and the store its own (`rolled_back`,
//! `checkpoint_missing`, `checkpoint_unreadable`, `chain_gap`, `chain_broken`, ...); see
//! `docs/design.md` ("Verify"). The checkpoint that detects a rollback of the whole directory
//! lives in the credential store beside the key: it is read (after the flush, before the seals)
//! and compared in the credential-store mode (`"checkpoint_checked": true`), and not read by the
//! offline mode (`"checkpoint_checked": false`, and the text says so).
//!
//! Exit codes: 0 when nothing was found; 1 when anything was (a rollback included); 2 for bad
//! usage or input.

use std::io::Write;
use std::path::PathBuf;

use crate::location::Location;
use std::process::ExitCode;
use std::sync::Arc;

use annal_engine::keys::{HistoryKeys, KeyProvider};
use annal_engine::seal::{
    CheckpointReading, CheckpointStore, CredentialCheckpoints, SealKey, StoreFinding, verify,
};
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

/// The history keys, the seal key, the journal keys (the journal says which chunks were
/// pruned), and the credential store they came from (kept to read the checkpoint): from the key
/// file (no store), or from the store's credential store.
type Keys = (
    HistoryKeys,
    SealKey,
    annal_engine::keys::JournalKeys,
    Option<Box<dyn KeyProvider>>,
);

/// The keys: from the key file, or from the store's credential store.
fn keys(args: &VerifyArgs, location: &Location) -> Result<Keys, crate::CliError> {
    if let Some(file) = &args.key_hex_file {
        let key = crate::keyfile::load_key(file)
            .map_err(|message| crate::CliError::usage(format!("{}: {message}", file.display())))?;
        let seal_key = SealKey::from_purpose_key(&key.seal_key());
        let journal = annal_engine::keys::JournalKeys::from_namespace_root(&key);
        return Ok((HistoryKeys::from_root(key), seal_key, journal, None));
    }
    let without_key = |mut error: crate::CliError| {
        error
            .message
            .push_str("; without the key nothing can be verified");
        error
    };
    let provider = location.key_provider().map_err(without_key)?;
    let custody = location
        .store_key_in(provider.as_ref())
        .map_err(without_key)?;
    Ok((
        custody.history_keys(),
        SealKey::from_purpose_key(&custody.seal_key()),
        custody.journal_keys(),
        Some(provider),
    ))
}

/// The checkpoint from the credential store beside the key (`NotConsulted` offline). A
/// checkpoint that cannot be read is a finding, not a failure to run: the rest is still checked.
fn checkpoint(provider: Option<&dyn KeyProvider>, location: &Location) -> CheckpointReading {
    let Some(provider) = provider else {
        return CheckpointReading::NotConsulted;
    };
    // The store's checkpoint is named by its id (none: the legacy per-namespace name).
    let store_id = location
        .layout()
        .sidecar()
        .and_then(|sidecar| annal_engine::store::read_store_id(sidecar).ok().flatten());
    match CredentialCheckpoints::new(provider, &location.namespace, store_id.as_ref()).load() {
        Ok(held) => CheckpointReading::Read(held),
        Err(error) => {
            eprintln!(
                "annal verify: the seal checkpoint cannot be read ({}: {error}); a rollback of \
                 the whole directory cannot be ruled out",
                error.category().as_str()
            );
            CheckpointReading::Unreadable
        }
    }
}

/// One line about a store finding, with what it compared.
fn store_line(finding: &StoreFinding) -> String {
    match finding {
        StoreFinding::RolledBack { checkpoint, newest } => format!(
            "store rolled_back: the credential store's checkpoint names seal {}, the newest \
             seal here is {} (the directory is an older copy)",
            checkpoint.ordinal,
            newest.map_or("none".to_owned(), |n| n.ordinal.to_string())
        ),
        StoreFinding::CheckpointMissing { newest } => format!(
            "store checkpoint_missing: {} seals but no checkpoint in the credential store; a \
             rollback cannot be ruled out",
            newest.ordinal
        ),
        other => format!("store {}", other.as_str()),
    }
}

/// Asks a daemon serving the store, if one runs, to make everything captured durable.
fn flush_daemon(location: &Location) {
    let Ok(runtime) = crate::runtime() else {
        return;
    };
    runtime.block_on(async {
        if let Ok(Some(mut client)) = crate::link::Link::running(location).await {
            let _ = client
                .request(&annal_actors::daemon::Request::Flush {})
                .await;
        }
    });
}

/// Runs `annal verify`.
pub fn run(args: &VerifyArgs, location: &Location) -> ExitCode {
    let (keys, seal_key, journal_keys, provider) = match keys(args, location) {
        Ok(keys) => keys,
        Err(error) => {
            eprintln!("annal verify: {}", error.message);
            return ExitCode::from(error.exit);
        }
    };
    if args.key_hex_file.is_none() {
        flush_daemon(location);
    }
    // Before the seals are read: the checkpoint only names seals already durable.
    let checkpoint = checkpoint(provider.as_deref(), location);
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
    let verified = verify(&storage, &keys, &seal_key, checkpoint);
    bar.finish_and_clear();
    // A sealed chunk the journal records as pruned is `pruned`, not `missing`; a journal that
    // cannot be read leaves it `missing` (a deletion is never taken for a prune).
    let pruned = annal_engine::store::pruned_chunks(&storage, &journal_keys).unwrap_or_default();
    let report = match verified {
        Ok(report) => report.with_pruned(&pruned),
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
        for finding in &report.store {
            lines.push(store_line(finding));
        }
        let checkpoint = match checkpoint {
            CheckpointReading::NotConsulted => {
                "the credential-store checkpoint was not checked offline"
            }
            CheckpointReading::Read(_) => "checked against the credential-store checkpoint",
            _ => "the credential-store checkpoint could not be read",
        };
        lines.push(format!(
            "{} ({} seals; {checkpoint})",
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
