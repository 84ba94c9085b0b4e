//! A neighbour that takes part of the machine, for running a bench in an emulated slow minute
//! of the host (docs/benchmarks.md, "Twelfth session").
//!
//! `contention SECS [--cpu BUSY_MS/IDLE_MS] [--dsync DIR]`: for SECS seconds, one thread spins
//! for BUSY_MS then sleeps IDLE_MS (a share of one core: `--cpu 4/6` takes 40 % of it), and/or
//! one thread writes 64 KiB blocks with `O_DSYNC` to a file in DIR, back to back (a neighbour
//! that keeps the disk's write queue and journal busy). Its file is unlinked as soon as it is
//! created, so a killed run leaves nothing behind.
//!
//! ```text
//! contention 120 --cpu 4/6 &
//! cargo bench -p annal-bench --bench append -- --quick
//! ```
#![allow(missing_docs)]

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// One `O_DSYNC` write of the disk neighbour, in bytes.
const DSYNC_BLOCK_BYTES: usize = 64 * 1024;

/// The neighbour's file is rewritten from its start after this many bytes.
const DSYNC_FILE_MAX_BYTES: u64 = 64 * 1024 * 1024;

/// What to run, from the arguments.
struct Load {
    /// How long.
    secs: u64,
    /// Spin this long, then sleep `idle`.
    cpu: Option<(Duration, Duration)>,
    /// Write with `O_DSYNC` into this directory.
    dsync: Option<PathBuf>,
}

fn parse(args: &[String]) -> Option<Load> {
    let secs = args.first()?.parse().ok()?;
    let mut load = Load {
        secs,
        cpu: None,
        dsync: None,
    };
    let mut rest = args.get(1..)?.iter();
    while let Some(flag) = rest.next() {
        match flag.as_str() {
            "--cpu" => {
                let (busy, idle) = rest.next()?.split_once('/')?;
                load.cpu = Some((
                    Duration::from_millis(busy.parse().ok()?),
                    Duration::from_millis(idle.parse().ok()?),
                ));
            }
            "--dsync" => load.dsync = Some(PathBuf::from(rest.next()?)),
            _ => return None,
        }
    }
    Some(load)
}

/// Spins `busy`, sleeps `idle`, until `end`.
fn cpu(busy: Duration, idle: Duration, end: Instant) {
    while Instant::now() < end {
        let started = Instant::now();
        while started.elapsed() < busy {
            std::hint::spin_loop();
        }
        std::thread::sleep(idle);
    }
}

/// Writes 64 KiB `O_DSYNC` blocks into a file in `dir` until `end`.
fn dsync(dir: PathBuf, end: Instant) -> std::io::Result<()> {
    let path = dir.join(format!("annal-contention-{}.bin", std::process::id()));
    let block = vec![0x5a_u8; DSYNC_BLOCK_BYTES];
    let mut written = 0u64;
    let mut file = open_unlinked(&path)?;
    while Instant::now() < end {
        if written >= DSYNC_FILE_MAX_BYTES {
            file = open_unlinked(&path)?;
            written = 0;
        }
        file.write_all(&block)?;
        written += DSYNC_BLOCK_BYTES as u64;
    }
    Ok(())
}

/// A new file at `path` opened for `O_DSYNC` writes, its name removed at once (so a killed
/// run leaves nothing behind; the open descriptor keeps the file).
fn open_unlinked(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    let dsync = i32::try_from(rustix::fs::OFlags::DSYNC.bits())
        .map_err(|_| std::io::Error::other("O_DSYNC does not fit an open flag"))?;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(dsync)
        .open(path)?;
    std::fs::remove_file(path)?;
    Ok(file)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(load) = parse(&args) else {
        eprintln!("usage: contention SECS [--cpu BUSY_MS/IDLE_MS] [--dsync DIR]");
        return ExitCode::FAILURE;
    };
    let end = Instant::now() + Duration::from_secs(load.secs);
    let mut threads = Vec::new();
    if let Some((busy, idle)) = load.cpu {
        threads.push(std::thread::spawn(move || {
            cpu(busy, idle, end);
            Ok(())
        }));
    }
    if let Some(dir) = load.dsync {
        threads.push(std::thread::spawn(move || dsync(dir, end)));
    }
    let mut code = ExitCode::SUCCESS;
    for thread in threads {
        if !matches!(thread.join(), Ok(Ok(()))) {
            eprintln!("contention: a load thread failed");
            code = ExitCode::FAILURE;
        }
    }
    code
}
