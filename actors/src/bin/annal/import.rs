//! `annal import FILE --identity FILE [--check]`: reads an archive `annal export` wrote
//! (`archive.rs`), decrypted with an age identity file, and checks it whole: the header, every
//! event (contract JSON in annal's compact form, sequences increasing), and the manifest
//! against what was read (counts, first and last sequence, gaps, BLAKE3 digest). A tampered or
//! truncated archive fails age's authentication; a wrong identity opens no recipient stanza.
//!
//! With `--check` nothing is written. Without it the events go into a new store, the one the
//! global `--namespace` (and `--store`) name, which must not exist yet:
//!
//! 1. a store is created aside, `.NAME.import-PID` beside the store directory, with a store id
//!    of its own and the "own key" choice recorded (docs/key-custody.md, "One key per store");
//! 2. its key is created in the credential store, durably (`open_store_key`, as the writer's
//!    `enable` does) before any chunk names it;
//! 3. the events are written as they are read, in batches of at most 256, with their ids,
//!    sources and sequences (`annal_engine::store::import::Importer`), then synced and
//!    closed;
//! 4. when the oldest event is older than the default retention (7 days) covers, the new
//!    store's retention is journaled long enough to keep it visible (at most 3650 days), so
//!    its first writer neither hides nor prunes what was imported;
//! 5. only when the whole archive verified (the manifest is its last line) is the directory
//!    renamed into place (never over an existing one) and its parent synced.
//!
//! Any failure removes the directory aside and destroys its key, so nothing half-written is
//! left; a crash leaves at most the directory aside (docs/design.md, "Export and import: what
//! a crash leaves"). The store is not enabled: capture starts only with `annal enable`. Its
//! chunks are sealed by the first writer that opens it (a crash's leftovers are sealed the
//! same way).

use std::collections::BTreeSet;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use annal_engine::keys::{KeyProvider, StoreKeyScope};
use annal_engine::storage::{Access, Storage};
use annal_schema::Event;

use crate::archive::{self, ArchiveError, Manifest};
use crate::location::Location;
use crate::{CliError, report_error};

/// Milliseconds in a day.
const MS_PER_DAY: u64 = 86_400_000;

/// The retention (days) a new store needs for an event of `oldest_ms` to stay visible at
/// `now_ms`, with a day to spare: none when the default retention already covers it, at most
/// the longest retention (older events stay hidden, and are pruned, as in any store).
fn retention_days_for(oldest_ms: u64, now_ms: u64) -> Option<u32> {
    use annal_engine::journal::RETENTION_MAX_DAYS;
    use annal_schema::tools::DEFAULT_RETENTION_DAYS;
    let age_days = now_ms.saturating_sub(oldest_ms).div_ceil(MS_PER_DAY) + 1;
    let days = u32::try_from(age_days)
        .unwrap_or(u32::MAX)
        .min(RETENTION_MAX_DAYS);
    (days > DEFAULT_RETENTION_DAYS).then_some(days)
}

/// Arguments of `annal import`.
#[derive(Debug, clap::Args)]
pub struct ImportArgs {
    /// The archive `annal export` wrote.
    pub file: PathBuf,
    /// An age identity file (as age-keygen writes it) holding a key the archive was encrypted
    /// to.
    #[arg(long, value_name = "FILE")]
    pub identity: PathBuf,
    /// Verify only: decrypt, check every event, the counts and the digest, and write nothing.
    #[arg(long)]
    pub check: bool,
    #[command(flatten)]
    pub out: crate::owner::OutputArgs,
}

/// `annal import`.
pub fn import(location: &Location, args: &ImportArgs) -> ExitCode {
    match run(location, args) {
        Ok(text) => match crate::write_out(&text) {
            Ok(()) => ExitCode::SUCCESS,
            Err(code) => code,
        },
        Err(error) => report_error(&error),
    }
}

/// Why an archive is refused, for a person (exit 1).
fn refused(file: &Path, why: impl std::fmt::Display) -> CliError {
    CliError::found(format!("{}: refused: {why}", file.display()))
}

/// The identities of `--identity`.
fn identities(path: &Path) -> Result<Vec<Box<dyn age::Identity + Send + Sync>>, CliError> {
    let bad = |e: &dyn std::fmt::Display| {
        CliError::usage(format!(
            "--identity {}: {e}: give the identity file age-keygen wrote",
            path.display()
        ))
    };
    let identities = age::IdentityFile::from_file(path.to_string_lossy().into_owned())
        .map_err(|e| bad(&e))?
        .into_identities()
        .map_err(|e| bad(&e))?;
    if identities.is_empty() {
        return Err(bad(&"it holds no identity"));
    }
    Ok(identities)
}

/// Reads and checks the archive `args.file`, handing each event to `on_event`.
fn read_archive(
    args: &ImportArgs,
    on_event: impl FnMut(Event, &[u8]) -> Result<(), ArchiveError>,
) -> Result<Manifest, CliError> {
    let identities = identities(&args.identity)?;
    let file = std::fs::File::open(&args.file)
        .map_err(|e| CliError::usage(format!("{}: {e}", args.file.display())))?;
    let decryptor = age::Decryptor::new_buffered(BufReader::new(file)).map_err(|e| {
        refused(
            &args.file,
            format!("not an age archive, or its header is damaged ({e})"),
        )
    })?;
    let reader = decryptor
        .decrypt(identities.iter().map(|i| i.as_ref() as &dyn age::Identity))
        .map_err(|e| match e {
            age::DecryptError::NoMatchingKeys => refused(
                &args.file,
                format!(
                    "no identity in {} opens it (wrong identity: give the one whose public \
                     key was a --recipient of the export)",
                    args.identity.display()
                ),
            ),
            other => refused(&args.file, format!("its header does not open ({other})")),
        })?;
    archive::read_content(&mut BufReader::new(reader), on_event)
        .map(|(manifest, _)| manifest)
        .map_err(|e| match e {
            ArchiveError::Read(why) => refused(
                &args.file,
                format!("tampered or truncated: the encryption's authentication failed ({why})"),
            ),
            ArchiveError::Sink(why) => CliError::unavailable(format!(
                "{}: the new store could not be written ({why}); nothing was kept",
                args.file.display()
            )),
            other => refused(&args.file, other),
        })
}

fn run(location: &Location, args: &ImportArgs) -> Result<String, CliError> {
    if args.check {
        let manifest = read_archive(args, |_, _| Ok(()))?;
        return Ok(summary(args, &manifest, None));
    }
    if std::fs::symlink_metadata(&location.dir).is_ok() {
        return Err(CliError::usage(format!(
            "{} exists: import writes a new store only; name a new one with --namespace NEW \
             (or --store DIR)",
            location.dir.display()
        )));
    }
    let staging = Staging::create(location)?;
    match staging.fill(args) {
        Ok((manifest, retention)) => {
            staging.commit(location)?;
            Ok(summary(args, &manifest, Some((location, retention))))
        }
        Err(error) => {
            staging.discard();
            Err(error)
        }
    }
}

/// What `import` says: the manifest's figures, and where the store is.
fn summary(
    args: &ImportArgs,
    manifest: &Manifest,
    into: Option<(&Location, Option<u32>)>,
) -> String {
    if args.out.json {
        let mut value = serde_json::json!({ "checked": true, "manifest": manifest });
        if let Some((location, retention)) = into {
            value["imported"] = serde_json::json!({
                "namespace": location.namespace.as_str(),
                "dir": location.dir,
                "retention_days_set": retention,
            });
        }
        return format!("{value}\n");
    }
    let range = match (manifest.first_sequence, manifest.last_sequence) {
        (Some(first), Some(last)) => format!(", sequences {first}..={last}"),
        _ => String::new(),
    };
    let outcome = match into {
        None => "nothing written (--check)".to_owned(),
        Some((location, retention)) => format!(
            "imported into namespace {} ({}); it is not enabled{}",
            location.namespace.as_str(),
            location.dir.display(),
            retention.map_or_else(String::new, |days| format!(
                "; its retention is {days} days, so the oldest event stays visible"
            ))
        ),
    };
    format!(
        "{}: verified: {} events{range}, {} missing; content digest {}; {outcome}\n",
        args.file.display(),
        manifest.event_count,
        manifest.missing_sequences,
        manifest.content_blake3
    )
}

/// The new store, built aside until it is complete.
struct Staging {
    /// The directory aside (a namespace directory).
    dir: PathBuf,
    /// Its credential store.
    provider: Box<dyn KeyProvider>,
    /// Its store id, once created (names its key).
    scope: StoreKeyScope,
    /// The staged location (for the key-store record).
    location: Location,
}

impl Staging {
    /// Creates the store aside with its own store id and the own-key choice.
    fn create(location: &Location) -> Result<Self, CliError> {
        let name = location
            .dir
            .file_name()
            .ok_or_else(|| CliError::usage("--store: give a directory with a name"))?;
        let dir = location.dir.with_file_name(format!(
            ".{}.import-{}",
            name.to_string_lossy(),
            std::process::id()
        ));
        let provider = location.key_provider()?;
        let staged = Location {
            dir: dir.clone(),
            ..location.clone()
        };
        let layout = staged.layout();
        let unavailable = |e: &dyn std::fmt::Display| {
            CliError::unavailable(format!("cannot create the new store aside: {e}"))
        };
        if let Some(parent) = dir.parent() {
            crate::private_file::directory(parent).map_err(|e| unavailable(&e))?;
        }
        let made = (|| {
            annal_engine::store::create_store(&layout).map_err(|e| unavailable(&e))?;
            let sidecar = layout
                .sidecar()
                .ok_or_else(|| unavailable(&"the store has no sidecar"))?;
            annal_engine::store::record_own_key(sidecar).map_err(|e| unavailable(&e))?;
            annal_engine::store::key_scope(&layout).map_err(|e| unavailable(&e))
        })();
        match made {
            Ok(scope) => Ok(Self {
                dir,
                provider,
                scope,
                location: staged,
            }),
            Err(error) => {
                let _ = std::fs::remove_dir_all(&dir);
                Err(error)
            }
        }
    }

    /// Creates the key durably, then writes the archive's events as they are verified
    /// (`annal_engine::store::import::Importer`).
    fn fill(&self, args: &ImportArgs) -> Result<(Manifest, Option<u32>), CliError> {
        use annal_engine::store::import::{ImportError, Importer};
        let layout = self.location.layout();
        let storage: Arc<dyn Storage> = Arc::new(
            annal_engine::store::open_store(&layout, Access::Write)
                .map_err(|e| CliError::unavailable(format!("cannot open the new store: {e}")))?,
        );
        let clock: Arc<dyn annal_engine::clock::Clock> = Arc::new(annal_engine::clock::SystemClock);
        let written = |e: ImportError| match e {
            ImportError::Key(key) => CliError::unavailable(format!(
                "the new store's key could not be created ({}): `annal doctor` checks the \
                 credential stores; nothing was kept",
                key.category().as_str()
            )),
            other => CliError::unavailable(format!(
                "the new store could not be written ({other}); nothing was kept"
            )),
        };
        let mut importer = Importer::open(
            storage,
            self.provider.as_ref(),
            &self.location.namespace,
            &self.scope,
            Arc::clone(&clock),
        )
        .map_err(written)?;
        self.location
            .record_key_store(self.provider.kind().as_str())?;
        let mut oldest_ms = u64::MAX;
        let manifest = read_archive(args, |event, _| {
            let at_ms = u64::try_from(event.time.since_epoch().as_millis()).unwrap_or(u64::MAX);
            oldest_ms = oldest_ms.min(at_ms);
            importer
                .push(event)
                .map_err(|e| ArchiveError::Sink(e.to_string()))
        })?;
        let retention = retention_days_for(oldest_ms, clock.now_ms());
        importer.finish(retention).map_err(written)?;
        Ok((manifest, retention))
    }

    /// Renames the finished store into place (never over an existing one) and syncs its
    /// parent; on failure the store aside is discarded.
    fn commit(self, location: &Location) -> Result<(), CliError> {
        use rustix::fs::{CWD, RenameFlags, renameat_with};
        let renamed = renameat_with(CWD, &self.dir, CWD, &location.dir, RenameFlags::NOREPLACE)
            .map_err(std::io::Error::from)
            .and_then(|()| match location.dir.parent() {
                Some(parent) => std::fs::File::open(parent).and_then(|d| d.sync_all()),
                None => Ok(()),
            });
        match renamed {
            Ok(()) => Ok(()),
            Err(e) => {
                let target = location.dir.display().to_string();
                self.discard();
                Err(CliError::unavailable(format!(
                    "the new store could not be put in place at {target} ({e}); nothing was kept"
                )))
            }
        }
    }

    /// Destroys the new store's key (when it was created) and removes the store aside.
    fn discard(self) {
        let mut scope = self.scope.clone();
        if let Ok(Some(id)) = annal_engine::store::key_scope(&self.location.layout()).map(|s| s.id)
        {
            scope.id = Some(id);
        }
        if let Some(id) = &scope.id {
            let mut named: BTreeSet<_> = scope.named.clone();
            named.insert(self.location.namespace.store_reference(id));
            scope.named = named;
        }
        let _ = annal_engine::keys::destroy_store_keys(
            self.provider.as_ref(),
            &self.location.namespace,
            &scope,
        );
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retention_is_raised_only_past_the_default_and_never_past_the_maximum() {
        let now = 1_000 * MS_PER_DAY;
        assert_eq!(retention_days_for(now, now), None);
        assert_eq!(retention_days_for(now - 5 * MS_PER_DAY, now), None);
        // 6 days and a bit: 7 days, plus one to spare.
        assert_eq!(retention_days_for(now - 6 * MS_PER_DAY - 1, now), Some(8));
        assert_eq!(retention_days_for(now - 400 * MS_PER_DAY, now), Some(401));
        assert_eq!(retention_days_for(0, u64::MAX), Some(3_650));
        // An event from the future needs nothing.
        assert_eq!(retention_days_for(now + MS_PER_DAY, now), None);
    }
}
