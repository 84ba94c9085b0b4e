//! `annal doctor [--json] [--key-store CHOICE]`: which credential stores are reachable, locked or
//! missing, each with its fixed category and a one-line hint for a person, and which store the
//! given `--key-store` choice selects; and, when the global options name an existing store,
//! which key naming that store uses (`store_key`: `reference` for the reference
//! implementation's name `com.trycua.<namespace>.computer-history.v1`, `store` for a key of the
//! store's own, `legacy` for annal's `<namespace>.history.v1` of stores written before the
//! reference naming, `none` when no chunk names a key yet), read from its chunk headers; and
//! whether that key can be read from the store's credential store (`store_key_state`: `usable`,
//! `owned_by_another_store` when the namespace's key belongs to another store of the same
//! namespace, which is why its enable was refused, or the key's fixed category), read only:
//! nothing is created or claimed.
//!
//! Never prints a secret, a store path, a service/account name or a raw D-Bus/OS error. The
//! probes never write to the Secret Service; the kernel-keyring probe writes and removes one
//! throw-away key in annal's own session keyring.
//!
//! Exit codes: 0 when at least one store is usable, 1 when none is.

use std::process::ExitCode;

use annal_engine::keys::{KeyStoreChoice, KeyStoreReport, chosen_store, probe_all};

use crate::location::Location;

/// What doctor says about the store the global options name.
struct StoreKey {
    /// Its key naming, from its chunk headers.
    naming: &'static str,
    /// Whether its key can be read (`usable`, `owned_by_another_store`, or a category).
    state: &'static str,
}

/// The key naming the store at `location` uses and whether its key reads (`None` when there is
/// no store there, or it cannot be read).
fn store_key(location: Option<&Location>) -> Option<StoreKey> {
    use annal_engine::keys::{KeyError, OpenMode, named_reference, open_store_key};
    let location = location?;
    let layout = location.layout();
    if !layout.history_root().exists() {
        return None;
    }
    let scope = annal_engine::store::key_scope(&layout).ok()?;
    let naming = named_reference(&location.namespace, &scope).map_or("none", |reference| {
        location.namespace.kind_of(&reference).as_str()
    });
    let state = match location.key_provider() {
        Ok(provider) => {
            match open_store_key(
                provider.as_ref(),
                &location.namespace,
                &scope,
                OpenMode::Read,
            ) {
                Ok(_) => "usable",
                Err(KeyError::OwnedByAnotherStore) => "owned_by_another_store",
                Err(error) => error.category().as_str(),
            }
        }
        Err(_) => "key_unavailable",
    };
    Some(StoreKey { naming, state })
}

/// The line for a person about the store's key.
fn store_key_text(key: &StoreKey) -> String {
    let mut out = format!(
        "this store's key naming: {}; its key: {}\n",
        key.naming, key.state
    );
    if key.state == "owned_by_another_store" {
        out.push_str(
            "  the namespace's key belongs to another store of the same namespace, so this \
             store cannot be enabled with it: `annal enable --own-key` gives it a key of its \
             own (which the stock reference cannot open), or use another --namespace \
             (docs/key-custody.md, \"One key per store\")\n",
        );
    }
    out
}

/// Arguments of `annal doctor`.
#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Runs `annal doctor`.
pub fn run(args: &DoctorArgs, choice: KeyStoreChoice, location: Option<&Location>) -> ExitCode {
    let reports = probe_all();
    let selected = chosen_store(choice, &reports);
    let key = store_key(location);
    let text = if args.json {
        let mut value = to_json(choice, selected, &reports);
        value["store_key"] = serde_json::json!(key.as_ref().map(|k| k.naming));
        value["store_key_state"] = serde_json::json!(key.as_ref().map(|k| k.state));
        format!("{value}\n")
    } else {
        let mut text = to_text(choice, selected, &reports);
        if let Some(key) = &key {
            text.push_str(&store_key_text(key));
        }
        text
    };
    if let Err(code) = crate::write_out(&text) {
        return code;
    }
    if reports
        .iter()
        .any(|r| r.state == annal_engine::keys::StoreState::Usable)
    {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn to_json(
    choice: KeyStoreChoice,
    selected: Option<annal_engine::keys::KeyStoreKind>,
    reports: &[KeyStoreReport],
) -> serde_json::Value {
    let stores: Vec<serde_json::Value> = reports
        .iter()
        .map(|r| {
            serde_json::json!({
                "store": r.kind.as_str(),
                "state": r.state.as_str(),
                "category": r.category().map(|c| c.as_str()),
                "hint": r.hint,
            })
        })
        .collect();
    serde_json::json!({
        "key_store": choice.as_str(),
        "selected": selected.map(|k| k.as_str()),
        "survives_reboot": selected.map(|k| k != annal_engine::keys::KeyStoreKind::Keyutils),
        "stores": stores,
    })
}

fn to_text(
    choice: KeyStoreChoice,
    selected: Option<annal_engine::keys::KeyStoreKind>,
    reports: &[KeyStoreReport],
) -> String {
    let mut table = comfy_table::Table::new();
    table
        .load_preset(comfy_table::presets::NOTHING)
        .set_header(["store", "state", "category", "hint"]);
    for r in reports {
        table.add_row([
            r.kind.as_str(),
            r.state.as_str(),
            r.category().map(|c| c.as_str()).unwrap_or("-"),
            r.hint,
        ]);
    }
    let mut out = String::from("credential stores:\n");
    for line in table.lines() {
        out.push_str(line.trim_end());
        out.push('\n');
    }
    match selected {
        Some(kind) => {
            out.push_str(&format!("--key-store {choice} selects: {kind}\n"));
            if kind == annal_engine::keys::KeyStoreKind::Keyutils {
                out.push_str(&format!(
                    "note: {}\n",
                    annal_engine::keys::KEYUTILS_DURABILITY_WARNING
                ));
            }
        }
        None => out.push_str(&format!(
            "--key-store {choice} selects: nothing usable (see the hints above)\n"
        )),
    }
    out
}
