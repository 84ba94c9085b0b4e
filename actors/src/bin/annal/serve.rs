//! `annal serve`: the store's daemon. Owns the engine (and so the writer lock) and serves the
//! socket until `annal stop`, SIGTERM or SIGINT, or (with `--idle-exit-secs`) an idle spell;
//! then drains within the engine's bounded shutdown. With `--metrics-listen ADDR` it also
//! serves annal's metrics for Prometheus (`metrics.rs`).

use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use annal_actors::daemon::{ServeEnd, ServeOptions, serve};

use crate::location::{Location, private_dir};
use crate::{CliError, report_error};

/// Mode of the daemon's socket: its owner only.
const SOCKET_MODE: u32 = 0o600;

/// Arguments of `annal serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Exit after this many seconds with no client connected and nothing left to flush
    /// (default: serve until stopped; a daemon started on demand uses 60).
    #[arg(long, value_name = "SECS")]
    pub idle_exit_secs: Option<u64>,
    /// Serve annal's metrics in Prometheus' text format at http://ADDR/metrics (off by
    /// default; give a loopback address such as 127.0.0.1:9464 unless others must scrape it).
    /// The metrics say how annal is doing, never what an agent did (docs/observability.md).
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<std::net::SocketAddr>,
}

/// Runs `annal serve`.
pub fn run(location: &Location, args: &ServeArgs) -> ExitCode {
    match serve_store(location, args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => report_error(&error),
    }
}

fn serve_store(location: &Location, args: &ServeArgs) -> Result<(), CliError> {
    let socket = location.socket()?.to_path_buf();
    if let Some(dir) = socket.parent() {
        private_dir(dir)?;
    }
    // One daemon per socket: the lock beside it is held for the daemon's life.
    let lock_path = crate::link::daemon_lock_path(&socket);
    let lock = std::fs::OpenOptions::new()
        .mode(SOCKET_MODE)
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| CliError::unavailable(format!("{}: {e}", lock_path.display())))?;
    if rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
        return Err(CliError::unavailable(format!(
            "a daemon already serves {} (socket {})",
            location.dir.display(),
            socket.display()
        )));
    }
    // Installed before the engine's configuration is made, so its instruments record here.
    let metrics = match args.metrics_listen {
        Some(address) => Some((
            address,
            Arc::new(crate::metrics::MetricsPipeline::install()?),
        )),
        None => None,
    };
    let (engine, key_store) = crate::link::open_engine(location)?;
    let runtime = crate::runtime()?;
    let options = ServeOptions {
        idle_exit: args.idle_exit_secs.map(Duration::from_secs),
        on_enabled: Some(crate::link::record_on_enable(location, &key_store)),
        key_store,
    };
    let served = runtime.block_on(async {
        // Bound under a name of this process's, made its owner's only, then renamed into
        // place: the socket never shows at its path with the umask's mode, even for an instant
        // (its directory is 0700 and every peer's uid is checked as well). We hold the lock, so
        // a socket file already at the path is a dead daemon's, which the rename replaces.
        let unavailable = |path: &std::path::Path, e: std::io::Error| {
            CliError::unavailable(format!("{}: {e}", path.display()))
        };
        let signals = signalled();
        let scrapes = match &metrics {
            Some((address, pipeline)) => {
                let listener = crate::metrics::bind(*address).await?;
                let bound = listener.local_addr().map_or(*address, |a| a);
                eprintln!("annal: metrics on http://{bound}/metrics");
                Some(tokio::spawn(crate::metrics::serve(
                    listener,
                    Arc::clone(pipeline),
                    Arc::clone(&engine),
                )))
            }
            None => None,
        };
        let binding = socket.with_extension(format!("{}.binding", std::process::id()));
        let _ = std::fs::remove_file(&binding);
        let listener =
            tokio::net::UnixListener::bind(&binding).map_err(|e| unavailable(&binding, e))?;
        std::fs::set_permissions(&binding, std::fs::Permissions::from_mode(SOCKET_MODE))
            .and_then(|()| std::fs::rename(&binding, &socket))
            .map_err(|e| {
                let _ = std::fs::remove_file(&binding);
                unavailable(&socket, e)
            })?;
        eprintln!(
            "annal: serving {} on {}",
            location.dir.display(),
            socket.display()
        );
        let end = serve(listener, Arc::clone(&engine), options, signals).await;
        let _ = std::fs::remove_file(&socket);
        if let Some(scrapes) = scrapes {
            scrapes.abort();
            // Its connections hold the engine; they end with the runtime below.
        }
        Ok::<ServeEnd, CliError>(end)
    });
    drop(runtime);
    let report = match Arc::try_unwrap(engine) {
        Ok(engine) => Some(engine.shutdown()),
        Err(_) => None,
    };
    drop(lock);
    let end = served?;
    let how = match end {
        ServeEnd::Stopped => "stopped on request",
        ServeEnd::Signalled => "stopped by a signal",
        ServeEnd::Idle => "idle, exiting",
    };
    match report {
        Some(report) if report.drained => {
            eprintln!("annal: {how}; everything captured is durable");
            Ok(())
        }
        _ => Err(CliError::unavailable(format!(
            "{how}; the drain did not finish within the shutdown deadline"
        ))),
    }
}

/// The daemon's end on SIGTERM or SIGINT. The handlers are installed when this is called,
/// before the socket is bound: a signal that comes as soon as a client can see the socket
/// already ends the daemon with its drain (installed only once the serve loop first polled
/// them, the default action killed it, with no drain, in that window).
fn signalled() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    let terminate = signal(SignalKind::terminate());
    let interrupt = signal(SignalKind::interrupt());
    async move {
        match (terminate, interrupt) {
            (Ok(mut terminate), Ok(mut interrupt)) => {
                tokio::select! {
                    _ = terminate.recv() => {}
                    _ = interrupt.recv() => {}
                }
            }
            (Ok(mut only), Err(_)) | (Err(_), Ok(mut only)) => {
                let _ = only.recv().await;
            }
            // No handler could be installed: only `annal stop` (or idleness) ends the daemon.
            (Err(_), Err(_)) => std::future::pending::<()>().await,
        }
    }
}
