//! `annal enable --own-key`: tells a store to take a key of its own when it is enabled, for a
//! second store of a namespace whose key another store owns (docs/key-custody.md, "One key per
//! store"). The choice is recorded in the store's sidecar (`engine/key-choice`), where the
//! writer reads it when it opens the key, so a running daemon takes it at the enable that
//! follows. It decides only for a store whose chunks name no key yet: afterwards the chunks do.

use crate::CliError;
use crate::location::Location;

/// Arguments of `annal enable`.
#[derive(Debug, clap::Args)]
pub struct EnableArgs {
    /// The output format.
    #[command(flatten)]
    pub out: crate::owner::OutputArgs,
    /// Give this store a key of its own instead of the namespace's key (which the stock
    /// reference implementation also uses, and which another store of the namespace may own).
    #[arg(long)]
    pub own_key: bool,
}

/// Records that the store at `location` takes a key of its own, creating the store first when
/// it does not exist yet.
pub fn record(location: &Location) -> Result<(), CliError> {
    let layout = location.layout();
    match annal_engine::store::create_store(&layout) {
        Ok(()) | Err(annal_engine::store::CreateStoreError::AlreadyExists { .. }) => {}
        Err(e) => {
            return Err(CliError::unavailable(format!(
                "cannot create the store: {e}"
            )));
        }
    }
    let sidecar = layout
        .sidecar()
        .ok_or_else(|| CliError::unavailable("the store has no sidecar"))?;
    annal_engine::store::record_own_key(sidecar)
        .map_err(|e| CliError::unavailable(format!("cannot record the key choice: {e}")))
}
