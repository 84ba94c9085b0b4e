//! How a command reaches its store: through the store's daemon (started on demand, as
//! `gpg-agent` is), or in this process with `--no-daemon` (taking the writer lock itself).
//!
//! The daemon is reached only through [`DaemonClient::connect`], which checks the socket's
//! directory and the peer's uid before anything is sent: a socket that is not this user's
//! daemon's is an error naming the path and the fix, never a reason to start another daemon.
//! Every request is checked against the frame bound before it is sent or dispatched
//! ([`check_request_size`]), whichever way the store is reached: an oversized one is the
//! owner's `invalid_request` (exit 2) at once.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use annal_actors::daemon::{
    ClientError, ConnectionState, DaemonClient, DaemonErrorCode, Dispatcher, Reply, Request,
    check_request_size,
};
use annal_actors::{Engine, EngineConfig, EngineError};

use crate::CliError;
use crate::location::{Location, private_dir};

/// Longest a command waits for a daemon it started to answer, in milliseconds (the daemon may
/// create a key in the Secret Service first).
pub const DAEMON_START_DEADLINE_MS: u64 = 20_000;

/// How often a command polls for the daemon it started, in milliseconds.
const DAEMON_START_POLL_MS: u64 = 20;

/// How long a daemon started on demand stays up with no client and nothing to flush, in
/// seconds.
pub const DAEMON_IDLE_EXIT_SECS: u64 = 60;

/// Whether a failed request lost its connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lost {
    /// The daemon closed the connection or broke the protocol.
    Yes,
    /// The connection, if any, is as it was (a refusal, a timeout, an oversized request).
    No,
}

/// A command's way to its store.
pub enum Link {
    /// A connection to the store's daemon.
    Daemon(DaemonClient),
    /// The store opened in this process.
    InProcess {
        /// Answers requests over the engine.
        dispatcher: Dispatcher,
        /// This "connection"'s capture state.
        connection: Box<ConnectionState>,
        /// The engine, shut down when the command ends.
        engine: Arc<Engine>,
    },
}

/// What records the store's credential store once `enable` made sure the key is there (never
/// earlier: a `status` on a fresh machine must not pin the choice before any key exists).
pub fn record_on_enable(location: &Location, kind: &str) -> annal_actors::daemon::EnableHook {
    let location = location.clone();
    let kind = kind.to_owned();
    Arc::new(move || {
        if matches!(location.recorded_key_store(), Ok(None))
            && let Err(error) = location.record_key_store(&kind)
        {
            eprintln!("annal: {}", error.message);
        }
    })
}

/// An engine opened on `location`, with the name of the credential store holding its key.
pub fn open_engine(location: &Location) -> Result<(Arc<Engine>, String), CliError> {
    location.create_dir()?;
    let provider = location.key_provider()?;
    let kind = provider.kind().as_str().to_owned();
    let config = EngineConfig::new(location.layout(), location.namespace.clone());
    let engine = Engine::start(config, Arc::from(provider)).map_err(|e| match e {
        EngineError::StoreLocked => CliError::unavailable(
            "another writer holds the store (another annal process, or the reference): `annal \
             stop` ends a daemon",
        ),
        other => CliError::unavailable(format!("the engine could not start: {other}")),
    })?;
    Ok((Arc::new(engine), kind))
}

impl Link {
    /// A link to an engine this process already runs (`annal demo --report`); closing it
    /// leaves the engine running while the caller holds it.
    pub fn in_process(engine: Arc<Engine>, key_store: String) -> Self {
        let dispatcher = Dispatcher::new(Arc::clone(&engine), key_store);
        let connection = Box::new(dispatcher.connection());
        Self::InProcess {
            dispatcher,
            connection,
            engine,
        }
    }

    /// The store at `location` opened in this process with the namespace root key of
    /// `key_file` held in memory (never written to a credential store): a store another
    /// implementation wrote, read with its key file (`annal report --key-file`). The engine
    /// reads through the gate as with `--no-daemon`, and may append to the store as any owner
    /// read does.
    pub fn with_key_file(location: &Location, key_file: &Path) -> Result<Self, CliError> {
        use annal_engine::keys::{InMemoryProvider, KeyProvider};
        if !location.layout().history_root().is_dir() {
            return Err(CliError::usage(format!(
                "--store: no store at {}",
                location.dir.display()
            )));
        }
        let key = crate::keyfile::load_key_bytes(key_file)
            .map_err(|e| CliError::usage(format!("--key-file: {e}")))?;
        let provider = InMemoryProvider::new(Box::new(annal_engine::entropy::OsEntropy))
            .map_err(|e| CliError::unavailable(format!("an in-memory key store: {e}")))?;
        let namespace = location.namespace.clone();
        // The key, under the namespace's reference and every reference the store's chunks
        // name (another implementation may have named its key otherwise).
        let scope = annal_engine::store::key_scope(&location.layout())
            .map_err(|e| CliError::unavailable(format!("--store: cannot read the store: {e}")))?;
        for reference in std::iter::once(namespace.primary_reference()).chain(scope.named) {
            provider
                .put_raw(&namespace, &reference, key.as_slice())
                .map_err(|e| CliError::unavailable(format!("an in-memory key store: {e}")))?;
        }
        let kind = provider.kind().as_str().to_owned();
        let config = EngineConfig::new(location.layout(), namespace);
        let engine = Engine::start(config, Arc::new(provider)).map_err(|e| match e {
            EngineError::StoreLocked => {
                CliError::unavailable("another writer holds the store: `annal stop` ends a daemon")
            }
            other => CliError::unavailable(format!("the engine could not start: {other}")),
        })?;
        Ok(Self::in_process(Arc::new(engine), kind))
    }

    /// The daemon connection, when this link is one.
    pub fn daemon(&mut self) -> Option<&mut DaemonClient> {
        match self {
            Self::Daemon(client) => Some(client),
            Self::InProcess { .. } => None,
        }
    }

    /// The engine, when the store is open in this process.
    pub fn engine(&self) -> Option<Arc<Engine>> {
        match self {
            Self::InProcess { engine, .. } => Some(Arc::clone(engine)),
            Self::Daemon(_) => None,
        }
    }

    /// Reaches the store: in process with `no_daemon`, else through its daemon, starting one
    /// when none answers.
    pub async fn open(location: &Location, no_daemon: bool) -> Result<Self, CliError> {
        if no_daemon {
            if let Some(socket) = location.socket.as_deref()
                && DaemonClient::connect(socket).await.is_ok()
            {
                return Err(CliError::unavailable(
                    "a daemon serves this store: drop --no-daemon, or `annal stop` it first",
                ));
            }
            let (engine, kind) = open_engine(location)?;
            let hook = record_on_enable(location, &kind);
            let dispatcher = Dispatcher::new(Arc::clone(&engine), kind).on_enabled(hook);
            let connection = Box::new(dispatcher.connection());
            return Ok(Self::InProcess {
                dispatcher,
                connection,
                engine,
            });
        }
        let socket = location.socket()?;
        if let Some(client) = reach(socket).await? {
            return Ok(Self::Daemon(client));
        }
        // Refuse here, not in a daemon that would exit unseen, a key-store choice that cannot be.
        location.effective_key_store()?;
        let mut child = start_daemon(location, socket)?;
        let deadline = Instant::now() + Duration::from_millis(DAEMON_START_DEADLINE_MS);
        loop {
            if let Some(client) = reach(socket).await? {
                // Reap it when it exits, so a long-running client (`annal mcp`) leaves no zombie.
                std::thread::spawn(move || child.wait());
                return Ok(Self::Daemon(client));
            }
            if let Ok(Some(status)) = child.try_wait() {
                // It exited: another daemon won a race for this store (then connect again), or
                // it failed, and its log says why.
                if let Some(client) = reach(socket).await? {
                    return Ok(Self::Daemon(client));
                }
                // Another daemon holds the lock: one starting (its socket comes) or one still
                // exiting (it lets the lock go). Wait for either, and start again after the
                // second.
                if daemon_lock_held(socket) {
                    while daemon_lock_held(socket) && Instant::now() < deadline {
                        if let Some(client) = reach(socket).await? {
                            return Ok(Self::Daemon(client));
                        }
                        tokio::time::sleep(Duration::from_millis(DAEMON_START_POLL_MS)).await;
                    }
                    if Instant::now() < deadline {
                        child = start_daemon(location, socket)?;
                        continue;
                    }
                }
                return Err(CliError {
                    exit: status
                        .code()
                        .and_then(|c| u8::try_from(c).ok())
                        .filter(|c| *c != 0)
                        .unwrap_or(crate::EXIT_UNAVAILABLE),
                    message: format!(
                        "the daemon could not start: {}",
                        last_log_line(socket)
                            .unwrap_or_else(|| format!("see {}", log_path(socket).display()))
                    ),
                });
            }
            if Instant::now() >= deadline {
                return Err(CliError::unavailable(format!(
                    "the daemon did not start within {} s; its log is {}",
                    DAEMON_START_DEADLINE_MS / 1_000,
                    log_path(socket).display()
                )));
            }
            tokio::time::sleep(Duration::from_millis(DAEMON_START_POLL_MS)).await;
        }
    }

    /// Connects to a running daemon only (never starts one): `None` when none answers; an error
    /// when what answers is not this user's daemon.
    pub async fn running(location: &Location) -> Result<Option<DaemonClient>, CliError> {
        match location.socket.as_deref() {
            Some(socket) => reach(socket).await,
            None => Ok(None),
        }
    }

    /// Sends one request; a daemon error becomes a [`CliError`] with its message. A request
    /// over the frame bound is refused before it is sent (or dispatched in process).
    pub async fn request(&mut self, request: Request) -> Result<serde_json::Value, CliError> {
        self.request_or_lost(request)
            .await
            .map_err(|(_, error)| error)
    }

    /// [`Self::request`], saying also whether the connection was lost (the daemon closed it
    /// or answered garbage: it stopped or restarted), so a long-lived caller may reconnect
    /// once. A timeout is not a loss: the daemon is there and slow.
    pub async fn request_or_lost(
        &mut self,
        request: Request,
    ) -> Result<serde_json::Value, (Lost, CliError)> {
        check_request_size(&request).map_err(|e| (Lost::No, from_client(e)))?;
        match self {
            Self::Daemon(client) => client.request(&request).await.map_err(|e| {
                let lost = if matches!(e, ClientError::Frame(_) | ClientError::BadReply) {
                    Lost::Yes
                } else {
                    Lost::No
                };
                (lost, from_client(e))
            }),
            Self::InProcess {
                dispatcher,
                connection,
                ..
            } => match dispatcher.dispatch(connection, request).await {
                Reply::Ok(value) => Ok(value),
                Reply::Error(error) => Err((Lost::No, from_daemon(error.code, error.message))),
            },
        }
    }

    /// Ends the link: an in-process engine is shut down (bounded drain).
    pub async fn close(self) {
        if let Self::InProcess {
            dispatcher,
            connection,
            engine,
        } = self
        {
            drop(connection);
            drop(dispatcher);
            if let Ok(engine) = Arc::try_unwrap(engine) {
                let _ = engine.shutdown_async().await;
            }
        }
    }
}

fn from_daemon(code: DaemonErrorCode, message: String) -> CliError {
    match code {
        DaemonErrorCode::OperationFailed => CliError::unavailable(message),
        _ => CliError::usage(message),
    }
}

/// Connects to the daemon at `socket`: `None` when none answers there (start one), an error
/// when something answers that is not this user's daemon (nothing was sent).
async fn reach(socket: &Path) -> Result<Option<DaemonClient>, CliError> {
    match DaemonClient::connect(socket).await {
        Ok(client) => Ok(Some(client)),
        Err(ClientError::Unreachable(_)) => Ok(None),
        Err(other) => Err(from_client(other)),
    }
}

pub(crate) fn from_client(error: ClientError) -> CliError {
    match error {
        ClientError::Daemon(error) => from_daemon(error.code, error.message),
        ClientError::RequestTooLarge { .. } => CliError::usage(format!(
            "{} ({})",
            error,
            DaemonErrorCode::InvalidRequest.as_str()
        )),
        ClientError::Untrusted(error) => CliError::unavailable(error.to_string()),
        other => CliError::unavailable(format!(
            "{other} (the daemon may have stopped; run the command again)"
        )),
    }
}

/// The daemon's log, beside its socket.
pub fn log_path(socket: &Path) -> std::path::PathBuf {
    socket.with_extension("log")
}

/// The lock a daemon holds (`flock`) for its whole life, beside its socket: one daemon per
/// socket. It is let go last, after the engine has released the store.
pub fn daemon_lock_path(socket: &Path) -> std::path::PathBuf {
    socket.with_extension("lock")
}

/// Whether a daemon holds the lock of `socket` now: starting, serving, or still exiting (its
/// socket may be gone already). Probed by taking the lock for an instant, never held.
pub fn daemon_lock_held(socket: &Path) -> bool {
    let Ok(file) = std::fs::File::open(daemon_lock_path(socket)) else {
        return false;
    };
    rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err()
}

/// Starts `annal serve` for `location` in the background: its own process group (a terminal's
/// Ctrl-C does not reach it), stdio detached, stderr to its log (0600), exiting by itself after
/// `DAEMON_IDLE_EXIT_SECS` idle. Two commands racing here start two daemons; the second finds
/// the first's lock and exits.
fn start_daemon(location: &Location, socket: &Path) -> Result<std::process::Child, CliError> {
    use std::os::unix::fs::OpenOptionsExt;
    use std::os::unix::process::CommandExt;
    if let Some(dir) = socket.parent() {
        private_dir(dir)?;
    }
    let exe = std::env::current_exe()
        .map_err(|e| CliError::unavailable(format!("cannot find the annal executable: {e}")))?;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(log_path(socket))
        .map_err(|e| CliError::unavailable(format!("cannot open the daemon's log: {e}")))?;
    let mut command = Command::new(exe);
    command
        .arg("--store")
        .arg(&location.dir)
        .args(["--namespace", location.namespace.as_str()])
        .args(["--key-store", location.key_store.as_str()])
        .arg("--socket")
        .arg(socket)
        .args(["serve", "--idle-exit-secs"])
        .arg(DAEMON_IDLE_EXIT_SECS.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        .process_group(0);
    command
        .spawn()
        .map_err(|e| CliError::unavailable(format!("cannot start the daemon: {e}")))
}

/// Most bytes of the daemon's log read back to explain a failed start.
const LOG_TAIL_MAX_BYTES: u64 = 4 * 1024;

/// The last line of the daemon's log, without its `annal: ` prefix.
fn last_log_line(socket: &Path) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = std::fs::File::open(log_path(socket)).ok()?;
    let len = file.metadata().ok()?.len();
    file.seek(SeekFrom::Start(len.saturating_sub(LOG_TAIL_MAX_BYTES)))
        .ok()?;
    let mut tail = String::new();
    file.take(LOG_TAIL_MAX_BYTES)
        .read_to_string(&mut tail)
        .ok()?;
    let line = tail.lines().rev().find(|l| !l.trim().is_empty())?;
    Some(line.strip_prefix("annal: ").unwrap_or(line).to_owned())
}
