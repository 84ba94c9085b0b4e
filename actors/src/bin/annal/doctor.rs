//! `annal doctor [--json] [--key-store CHOICE]`: which credential stores are reachable, locked or
//! missing, each with its fixed category and a one-line hint for a person, and which store the
//! given `--key-store` choice selects.
//!
//! Never prints a secret, a store path, a service/account name or a raw D-Bus/OS error. The
//! probes never write to the Secret Service; the kernel-keyring probe writes and removes one
//! throw-away key in annal's own session keyring.
//!
//! Exit codes: 0 when at least one store is usable, 1 when none is.

use std::process::ExitCode;

use annal_engine::keys::{KeyStoreChoice, KeyStoreReport, chosen_store, probe_all};

/// Arguments of `annal doctor`.
#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Runs `annal doctor`.
pub fn run(args: &DoctorArgs, choice: KeyStoreChoice) -> ExitCode {
    let reports = probe_all();
    let selected = chosen_store(choice, &reports);
    if args.json {
        println!("{}", to_json(choice, selected, &reports));
    } else {
        print!("{}", to_text(choice, selected, &reports));
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
    let mut out = String::from("credential stores:\n");
    for r in reports {
        out.push_str(&format!(
            "  {:<15} {:<8} {:<19} {}\n",
            r.kind.as_str(),
            r.state.as_str(),
            r.category().map(|c| c.as_str()).unwrap_or("-"),
            r.hint
        ));
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
