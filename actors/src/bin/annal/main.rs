//! The `annal` command-line tool.
//!
//! # Layout
//!
//! - `main.rs`: the global options, argument parsing and dispatch, [`CliError`] and the exit
//!   codes.
//! - `location.rs`: where a store, its daemon's socket and its key-store record live.
//! - `link.rs`: how a command reaches its store: the daemon (started on demand) or, with
//!   `--no-daemon`, an engine in this process.
//! - `owner.rs`: the owner's commands over the daemon: `enable` ... `status`, `grant`,
//!   `revoke`, `agents`, `owner-access`, `stop`, `socket`, `delete`.
//! - `reads.rs`: the owner's reads, `list`, `show`, `query` and `search`, with the owner's
//!   filters.
//! - `report/`: `annal report` (one self-contained HTML page) and `annal stats`, owner reads
//!   through the gate with the journal's facts.
//! - `repair.rs`: `annal repair --quarantine` and `annal index rebuild` (offline, the daemon
//!   stopped first).
//! - `serve.rs`: `annal serve`, the daemon.
//! - `mcp.rs`: `annal mcp`, the MCP stdio server over the policy gate.
//! - `mcp_config.rs`: `annal mcp-config`, the server entry a host's MCP client reads, and a
//!   starter bounded-mode manifest.
//! - `skill.rs`: `annal skill show | instruction | install`, the bundled agent skill and
//!   system-instruction text.
//! - `shell.rs`: `annal completions SHELL` and `annal man`, generated from the clap definition.
//! - `service.rs`: `annal service show | install | uninstall`, a systemd user unit for the daemon.
//! - `private_file.rs`: writing one shipped file into a folder of the user's (skill, service).
//! - `demo.rs`: `annal demo`, the whole pipeline on a temporary store with a short report.
//! - `inspect.rs`, `verify.rs`: the offline read-only decoder and checker (`keyfile.rs` reads
//!   their key file).
//! - `export.rs`, `import.rs`, `archive.rs`: `annal export`, `annal import` (into a new
//!   store, or `--check`), and the archive's content (manifest, digest, reading, checking).
//! - `doctor.rs`: `annal doctor`, credential-store diagnostics.
//! - `own_key.rs`: `annal enable --own-key`, a key of the store's own (docs/key-custody.md).
//!
//! # Exit codes
//!
//! | code | meaning |
//! | --- | --- |
//! | 0 | success |
//! | 1 | the command ran and found a problem or was refused (a corrupt chunk, a denied read, no usable key store) |
//! | 2 | bad usage or input (unknown flag, bad value, unsafe key file, not a store, no confirmation) |
//! | 3 | history is unavailable (no daemon could be reached or started, the store or key cannot be opened) |
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

use annal_engine::keys::KeyStoreChoice;
use clap::{Parser, Subcommand};

mod archive;
mod demo;
mod doctor;
mod export;
mod import;
mod inspect;
mod keyfile;
mod link;
mod location;
mod mcp;
mod mcp_config;
mod metrics;
mod own_key;
mod owner;
mod private_file;
mod reads;
mod repair;
mod report;
mod serve;
mod service;
mod shell;
mod skill;
mod verify;
mod views;

/// Exit code: the command ran and found a problem, or was refused.
pub const EXIT_FOUND_PROBLEM: u8 = 1;
/// Exit code: bad usage or input.
pub const EXIT_USAGE: u8 = 2;
/// Exit code: history is unavailable.
pub const EXIT_UNAVAILABLE: u8 = 3;
/// Exit code: the reader of standard output went away (a closed pipe, `annal list | head -1`):
/// 128 + SIGPIPE, what a shell reports for a process a closed pipe ended.
pub const EXIT_CLOSED_PIPE: u8 = 141;

/// Writes `text` to standard output. A reader that went away ends the command quietly with
/// [`EXIT_CLOSED_PIPE`] (never a panic, which `print!` would be); any other write failure is
/// [`EXIT_UNAVAILABLE`].
pub fn write_out(text: &str) -> Result<(), ExitCode> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => {
            Err(ExitCode::from(EXIT_CLOSED_PIPE))
        }
        Err(_) => Err(ExitCode::from(EXIT_UNAVAILABLE)),
    }
}

const EXIT_CODES_HELP: &str = "Exit codes: 0 success; 1 the command ran and found a problem or \
     was refused; 2 bad usage or input; 3 history unavailable (no daemon, store or key); 141 the \
     reader of the output went away (a closed pipe). See docs/cli.md.";

/// An encrypted, append-only local history of what computer-use agents did.
#[derive(Debug, Parser)]
#[command(name = "annal", version, after_help = EXIT_CODES_HELP)]
struct Cli {
    /// The store directory (default: `$XDG_STATE_HOME/annal/<namespace>`, else
    /// `~/.local/state/annal/<namespace>`).
    #[arg(long, global = true, value_name = "DIR")]
    store: Option<PathBuf>,
    /// The namespace: names the store's key and its default directory.
    #[arg(long, global = true, default_value = "default", value_name = "NAME")]
    namespace: String,
    /// The credential store for the key: secret-service, keyutils, or auto (an unlocked Secret
    /// Service if one answers, else the kernel keyring). A store remembers the one it was
    /// created with.
    #[arg(long, global = true, default_value_t = KeyStoreChoice::Auto, value_parser = parse_choice)]
    key_store: KeyStoreChoice,
    /// The daemon's socket (default: `<dir>/<hash of the store path>.sock`, the dir being
    /// `$XDG_RUNTIME_DIR/annal`, else a private `/run/user/UID/annal`, else
    /// `$XDG_STATE_HOME/annal/.run` or `~/.local/state/annal/.run`; `annal socket` prints it).
    #[arg(long, global = true, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Open the store in this process (taking its writer lock) instead of through the daemon.
    #[arg(long, global = true)]
    no_daemon: bool,
    /// The command to run.
    #[command(subcommand)]
    command: Command,
}

fn parse_choice(text: &str) -> Result<KeyStoreChoice, String> {
    text.parse().map_err(|e| format!("{e}"))
}

/// Every `annal` command.
#[derive(Debug, Subcommand)]
enum Command {
    /// Turn history on (the owner's opt-in); says which credential store holds the key.
    Enable(own_key::EnableArgs),
    /// Turn history off: capture stops, what was recorded stays.
    Disable(owner::OutputArgs),
    /// Pause capture.
    Pause(owner::OutputArgs),
    /// Resume capture.
    Resume(owner::OutputArgs),
    /// Make everything captured so far durable.
    Flush(owner::OutputArgs),
    /// What is recorded: the contract's status and the key's credential store.
    Status(owner::OutputArgs),
    /// Set how many days of history queries see (1..=3650, default 7); older events leave
    /// every answer at once and are pruned from disk.
    Retention(owner::RetentionArgs),
    /// Set the encrypted-byte quota (for example 100MiB; 1MiB..=1TiB) and what capture does
    /// at it.
    Quota(owner::QuotaArgs),
    /// The newest N events (default 20), oldest first; --since, --until, --app,
    /// --capability, --outcome and --session narrow them.
    List(reads::ListArgs),
    /// One event by its sequence number.
    Show(reads::ShowArgs),
    /// A `history_query` as the owner (local_cli), the tool's fields as flags, with the
    /// owner's filters.
    Query(reads::QueryArgs),
    /// The newest events whose capability or application (bundle id, display name) holds
    /// TEXT, ignoring case; the owner's filters narrow them further.
    Search(reads::SearchArgs),
    /// Write the history (or what --since and --session keep) to one archive encrypted to
    /// age recipients: the owner's read, audited, paging through the whole store.
    Export(export::ExportArgs),
    /// Read an archive `annal export` wrote (decrypt with an age identity, check every event,
    /// the counts and the digest) into a new store (the namespace must not exist), or only
    /// check it with --check.
    Import(import::ImportArgs),
    /// Write one self-contained HTML report (no network, no script): a timeline per session,
    /// activity, mixes, gaps and drops, health changes, agent access and disk use.
    Report(report::ReportArgs),
    /// Totals, top capabilities and applications, outcomes, sessions, a per-day sparkline,
    /// drops, gaps and disk use, on the terminal (or --json).
    Stats(report::StatsArgs),
    /// Grant an agent one operation (status or query) for a bounded time.
    Grant(owner::GrantArgs),
    /// Revoke every grant of an agent; its next call is refused, also after its MCP server
    /// restarts with the same manifest.
    Revoke(owner::RevokeArgs),
    /// The grants in force (source, expiry, idle deadline, last use) and the revoked agents.
    Grants(views::GrantsArgs),
    /// Who read the history: every agent's call, its verdict, outcome and returned count.
    Audit(views::AuditArgs),
    /// A host's deterministic consultation: status, the newest slice when usable, and the
    /// verdict (use, use with caveats, continue without history). Exits 0 unless misused.
    Preflight(views::PreflightArgs),
    /// Turn every agent off or back on.
    Agents(owner::AgentsArgs),
    /// Whether your own reads append the contract's access event (on, the default) or not
    /// (off: still audited). Agents' reads always do.
    OwnerAccess(owner::OwnerAccessArgs),
    /// Destroy the store's key and delete the store (asks for confirmation unless --yes).
    Delete(owner::DeleteArgs),
    /// Move a corrupt chunk aside (never deleted) so the rest of the store reads again.
    Repair(repair::RepairArgs),
    /// The derived index: `annal index rebuild`.
    Index(repair::IndexArgs),
    /// Run the store's daemon in the foreground.
    Serve(serve::ServeArgs),
    /// Stop the store's daemon (bounded drain).
    Stop(owner::OutputArgs),
    /// Print the path of the store's daemon socket (where every front-end looks for it).
    Socket(owner::OutputArgs),
    /// Serve history_status and history_query to one agent over MCP on stdio.
    Mcp(mcp::McpArgs),
    /// Print the MCP server entry for an agent host's client (claude, cursor, vscode,
    /// generic), with this binary's absolute path; optionally write a starter manifest.
    McpConfig(mcp_config::McpConfigArgs),
    /// The bundled agent skill: `show` prints it, `instruction` the system-instruction text,
    /// `install DIR` writes DIR/annal-history/SKILL.md.
    Skill(skill::SkillArgs),
    /// Print a completion script for SHELL (bash, zsh, fish, elvish, powershell).
    Completions(shell::CompletionsArgs),
    /// Print the manual page (roff), for `man -l -` or a man directory.
    Man,
    /// A systemd user unit that starts this store's daemon at login: show, install, uninstall.
    Service(service::ServiceArgs),
    /// Run the whole pipeline on a temporary store and print a short report (no set-up).
    Demo(demo::DemoArgs),
    /// Decode a store offline for forensics and interop (read-only; never writes).
    Inspect(inspect::InspectArgs),
    /// Report which credential stores are reachable, locked or missing.
    Doctor(doctor::DoctorArgs),
    /// Check a store's chunks, seals and seal chain (read-only); non-zero exit on any finding.
    Verify(verify::VerifyArgs),
}

/// Why a command failed: what to print and which exit code.
#[derive(Debug)]
pub struct CliError {
    /// The exit code.
    pub exit: u8,
    /// The problem and the fix, for a person.
    pub message: String,
}

impl CliError {
    /// Bad usage or input (exit 2).
    pub fn usage(message: impl Into<String>) -> Self {
        Self {
            exit: EXIT_USAGE,
            message: message.into(),
        }
    }

    /// History unavailable (exit 3).
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self {
            exit: EXIT_UNAVAILABLE,
            message: message.into(),
        }
    }

    /// The command ran and found a problem or was refused (exit 1).
    pub fn found(message: impl Into<String>) -> Self {
        Self {
            exit: EXIT_FOUND_PROBLEM,
            message: message.into(),
        }
    }
}

/// The small runtime a command runs its socket I/O on (the engine, when one runs in this
/// process, has its own).
pub fn runtime() -> Result<tokio::runtime::Runtime, CliError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::unavailable(format!("cannot start a runtime: {e}")))
}

/// Prints `error` and returns its exit code.
pub fn report_error(error: &CliError) -> ExitCode {
    eprintln!("annal: {}", error.message);
    ExitCode::from(error.exit)
}

fn main() -> ExitCode {
    // Before any thread exists: give the process its own kernel session keyring, so the
    // keyutils key store works in every thread spawned later (see annal_engine::keys::keyutils).
    // A failure here only makes that store unusable; `doctor` reports it.
    let _ = annal_engine::keys::establish_session_keyring();
    let cli = Cli::parse();
    let location = || {
        location::Location::resolve(
            cli.store.as_deref(),
            &cli.namespace,
            cli.key_store,
            cli.socket.as_deref(),
        )
    };
    let with_location = |run: &dyn Fn(&location::Location) -> ExitCode| match location() {
        Ok(location) => run(&location),
        Err(error) => report_error(&error),
    };
    let no_daemon = cli.no_daemon;
    match &cli.command {
        Command::Enable(args) => with_location(&|l| {
            if args.own_key
                && let Err(error) = own_key::record(l)
            {
                return report_error(&error);
            }
            owner::control(l, no_daemon, owner::Control::Enable, &args.out)
        }),
        Command::Disable(out) => {
            with_location(&|l| owner::control(l, no_daemon, owner::Control::Disable, out))
        }
        Command::Pause(out) => {
            with_location(&|l| owner::control(l, no_daemon, owner::Control::Pause, out))
        }
        Command::Resume(out) => {
            with_location(&|l| owner::control(l, no_daemon, owner::Control::Resume, out))
        }
        Command::Flush(out) => {
            with_location(&|l| owner::control(l, no_daemon, owner::Control::Flush, out))
        }
        Command::Status(out) => {
            with_location(&|l| owner::control(l, no_daemon, owner::Control::Status, out))
        }
        Command::Retention(args) => with_location(&|l| owner::retention(l, no_daemon, args)),
        Command::Quota(args) => with_location(&|l| owner::quota(l, no_daemon, args)),
        Command::List(args) => with_location(&|l| reads::list(l, no_daemon, args)),
        Command::Show(args) => with_location(&|l| reads::show(l, no_daemon, args)),
        Command::Query(args) => with_location(&|l| reads::query(l, no_daemon, args)),
        Command::Search(args) => with_location(&|l| reads::search(l, no_daemon, args)),
        Command::Export(args) => with_location(&|l| export::export(l, no_daemon, args)),
        Command::Import(args) => with_location(&|l| import::import(l, args)),
        Command::Report(args) => with_location(&|l| report::report(l, no_daemon, args)),
        Command::Stats(args) => with_location(&|l| report::stats(l, no_daemon, args)),
        Command::Grant(args) => with_location(&|l| owner::grant(l, no_daemon, args)),
        Command::Revoke(args) => with_location(&|l| owner::revoke(l, no_daemon, args)),
        Command::Grants(args) => with_location(&|l| views::grants(l, no_daemon, args)),
        Command::Audit(args) => with_location(&|l| views::audit(l, no_daemon, args)),
        Command::Preflight(args) => with_location(&|l| views::preflight(l, no_daemon, args)),
        Command::Agents(args) => with_location(&|l| owner::agents(l, no_daemon, args)),
        Command::OwnerAccess(args) => with_location(&|l| owner::owner_access(l, no_daemon, args)),
        Command::Delete(args) => with_location(&|l| owner::delete(l, args)),
        Command::Repair(args) => with_location(&|l| repair::repair(l, args)),
        Command::Index(args) => with_location(&|l| repair::index(l, args)),
        Command::Serve(args) => with_location(&|l| serve::run(l, args)),
        Command::Stop(out) => with_location(&|l| owner::stop(l, out)),
        Command::Socket(out) => with_location(&|l| owner::socket(l, out)),
        Command::Mcp(args) => with_location(&|l| mcp::run(l, no_daemon, args)),
        Command::McpConfig(args) => with_location(&|l| mcp_config::run(l, args)),
        Command::Skill(args) => skill::run(args),
        Command::Completions(args) => shell::completions::<Cli>(args),
        Command::Man => shell::man::<Cli>(),
        Command::Service(args) => with_location(&|l| service::run(l, args)),
        Command::Demo(args) => demo::run(args),
        Command::Inspect(args) => inspect::run(args),
        Command::Doctor(args) => doctor::run(args, cli.key_store, location().ok().as_ref()),
        Command::Verify(args) => with_location(&|l| verify::run(args, l)),
    }
}
