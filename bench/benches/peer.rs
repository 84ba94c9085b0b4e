//! Bench `peer` (feature `sqlcipher`): annal beside SQLCipher, the encrypted store people reach
//! for, on the same workloads in the same run (issue 30, item 5).
//!
//! ```text
//! cargo bench -p annal-bench --features sqlcipher --bench peer
//! ```
//!
//! SQLCipher comes from rusqlite's bundled SQLCipher (built against the system's OpenSSL), with
//! a raw 256-bit key, WAL, `synchronous = FULL` (every commit durable, as annal's flush), 1,000
//! events per transaction, the same ~650-byte contract events as text, and an index on
//! `(session, sequence)`. annal runs through its own paths: the real `Engine` for the durable
//! append, the engine's `QueryService` (what the Query actor answers with) for the reads, a
//! fresh process for the open. Per workload it prints both figures and their ratio, annal's
//! advantage (above 1 annal is faster):
//! - `peer.append.{annal,sqlcipher}_events_per_s`, `peer.append.ratio` (annal / SQLCipher):
//!   [`APPEND_EVENTS`] events made durable;
//! - `peer.newest50.{annal,sqlcipher}_p99_us`, `peer.newest50.ratio` (SQLCipher / annal): the
//!   newest 50 of a 100 MiB store, caches warm, each answering the contract's typed events
//!   (SQLCipher's rows parsed under the read rules, as annal's reader returns them;
//!   `peer.newest50.sqlcipher_text_p99_us` is the same read returning the stored text);
//! - `peer.session10.*`: the newest 10 of one session of 20;
//! - `peer.under_writer.*`: newest 50 while a writer commits beside the reader;
//! - `peer.open.{annal,sqlcipher}_ms`, `peer.open.ratio`: a fresh process opens the 100 MiB
//!   store and answers newest 50 (median of [`OPEN_RUNS`], from the child's `main`).
#![allow(missing_docs)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use annal_bench::engine::{RigError, run_stream};
use annal_bench::query::{
    BenchQuery, FULL_STORE_BYTES, FULL_STORE_HEADROOM_BYTES, Producer, QUERY_SESSIONS, fill_store,
    middle_slice, newest_sequence, open_reader, session_label, start_engine, time_pages,
};
use annal_bench::{EVENT_JSON, print_figure, quantile};
use annal_engine::journal::OnQuota;
use rusqlite::{Connection, params};

/// Events of the append workload (both stores).
const APPEND_EVENTS: usize = 100_000;

/// Events per SQLCipher transaction.
const SQLCIPHER_TXN_EVENTS: usize = 1_000;

/// Pages timed per read figure.
const ROUNDS: usize = 2_000;

/// Fresh processes per open figure.
const OPEN_RUNS: usize = 11;

/// The SQLCipher writer beside the reader: one transaction of this many events, then a pause
/// of [`UNDER_WRITER_PAUSE`] (about the rate annal's under-writer engine captures).
const UNDER_WRITER_TXN_EVENTS: usize = 10;

/// See [`UNDER_WRITER_TXN_EVENTS`].
const UNDER_WRITER_PAUSE: Duration = Duration::from_millis(1);

/// annal's under-writer engine's capture rate, in actions (two events each) per millisecond.
const UNDER_WRITER_ACTIONS_PER_MS: usize = 5;

/// The quota annal's under-writer engine gets, so it keeps writing past the full store.
const UNDER_WRITER_QUOTA_BYTES: u64 = 1024 * 1024 * 1024;

/// SQLCipher's raw key (64 hex digits: no passphrase derivation, as annal's raw root key).
const SQLCIPHER_KEY_HEX: &str = "4242424242424242424242424242424242424242424242424242424242424242";

/// Environment variable that makes this binary a child of the open figures (`annal` or
/// `sqlcipher`), with the store in [`CHILD_DIR_ENV`].
const CHILD_MODE_ENV: &str = "ANNAL_PEER_BENCH_CHILD";

/// See [`CHILD_MODE_ENV`].
const CHILD_DIR_ENV: &str = "ANNAL_PEER_BENCH_DIR";

/// The line a child prints its figure on.
const CHILD_LINE: &str = "OPEN_MS";

/// The SQLCipher database's file name.
const SQLCIPHER_FILE: &str = "history.db";

fn must<T>(what: &str, result: Result<T, RigError>) -> T {
    match result {
        Ok(value) => value,
        Err(error) => {
            eprintln!("peer bench: {what}: {error}");
            std::process::exit(1);
        }
    }
}

fn sql<T>(what: &str, result: rusqlite::Result<T>) -> T {
    must(what, result.map_err(|e| e.to_string().into()))
}

/// A keyed SQLCipher connection in WAL with durable commits.
fn sqlcipher_open(path: &Path) -> Connection {
    let connection = sql("open", Connection::open(path));
    sql(
        "key",
        connection.execute_batch(&format!(
            "PRAGMA key = \"x'{SQLCIPHER_KEY_HEX}'\"; PRAGMA journal_mode = WAL; \
             PRAGMA synchronous = FULL;"
        )),
    );
    sql(
        "schema",
        connection.execute_batch(
            "CREATE TABLE IF NOT EXISTS events (sequence INTEGER PRIMARY KEY, session TEXT NOT NULL, \
             time_ms INTEGER NOT NULL, body TEXT NOT NULL); \
             CREATE INDEX IF NOT EXISTS by_session ON events (session, sequence);",
        ),
    );
    connection
}

/// Inserts events `first..first + count` in transactions of [`SQLCIPHER_TXN_EVENTS`] (each
/// durable at its commit).
fn sqlcipher_insert(connection: &mut Connection, first: u64, count: usize, txn_events: usize) {
    let mut next = first;
    let end = first + count as u64;
    while next < end {
        let transaction = sql("begin", connection.transaction());
        {
            let mut insert = sql(
                "prepare",
                transaction.prepare(
                    "INSERT INTO events (sequence, session, time_ms, body) VALUES (?1, ?2, ?3, ?4)",
                ),
            );
            let batch_end = (next + txn_events as u64).min(end);
            for sequence in next..batch_end {
                let session = session_label(sequence as usize % QUERY_SESSIONS);
                let sequence = i64::try_from(sequence).unwrap_or(i64::MAX);
                sql(
                    "insert",
                    insert.execute(params![sequence, session, sequence, EVENT_JSON]),
                );
            }
            next = batch_end;
        }
        sql("commit", transaction.commit());
    }
}

/// Fills the SQLCipher store at `path` to `target_bytes` (the database and its WAL).
fn sqlcipher_fill(path: &Path, target_bytes: u64) -> u64 {
    let mut connection = sqlcipher_open(path);
    let mut next = 1;
    loop {
        sqlcipher_insert(
            &mut connection,
            next,
            10 * SQLCIPHER_TXN_EVENTS,
            SQLCIPHER_TXN_EVENTS,
        );
        next += 10 * SQLCIPHER_TXN_EVENTS as u64;
        let bytes = std::fs::metadata(path).map_or(0, |m| m.len());
        if bytes >= target_bytes {
            break;
        }
    }
    sql(
        "checkpoint",
        connection.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);"),
    );
    next - 1
}

/// What a SQLCipher read hands back.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Rows {
    /// The rows' text as stored.
    Text,
    /// Each row parsed into the contract's `Event` under the read rules: what annal's reader
    /// answers with, and what a `history_query` needs before it can answer.
    Events,
}

/// Round trips of `rounds` reads of `query` (with `session` as its parameter when given), in
/// nanoseconds, sorted; fails unless each returns `expect` rows.
fn sqlcipher_time(
    connection: &Connection,
    query: &str,
    session: Option<&str>,
    rounds: usize,
    expect: usize,
    rows_as: Rows,
) -> Vec<u64> {
    let mut statement = sql("prepare", connection.prepare(query));
    let mut took = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let start = Instant::now();
        let rows: Vec<String> = match session {
            Some(session) => sql(
                "query",
                statement
                    .query_map([session], |row| row.get(0))
                    .and_then(Iterator::collect),
            ),
            None => sql(
                "query",
                statement
                    .query_map([], |row| row.get(0))
                    .and_then(Iterator::collect),
            ),
        };
        let parsed = match rows_as {
            Rows::Text => rows.len(),
            Rows::Events => rows
                .iter()
                .filter(|body| annal_schema::Event::from_json_slice(body.as_bytes()).is_ok())
                .count(),
        };
        took.push(u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX));
        if parsed != expect {
            must::<()>(
                "rows",
                Err(format!("{} rows, want {expect}", rows.len()).into()),
            );
        }
    }
    took.sort_unstable();
    took
}

const NEWEST50_SQL: &str = "SELECT body FROM events ORDER BY sequence DESC LIMIT 50";
const SESSION10_SQL: &str =
    "SELECT body FROM events WHERE session = ?1 ORDER BY sequence DESC LIMIT 10";

fn p99_us(sorted_ns: &[u64]) -> f64 {
    quantile(sorted_ns, 0.99) as f64 / 1_000.0
}

/// Prints one read workload's pair and ratio (SQLCipher's p99 over annal's).
fn print_read_pair(name: &str, annal_ns: &[u64], sqlcipher_ns: &[u64]) {
    let (annal, peer) = (p99_us(annal_ns), p99_us(sqlcipher_ns));
    print_figure(
        &format!("peer.{name}.annal_p99_us"),
        format!("{annal:.1}"),
        "us",
    );
    print_figure(
        &format!("peer.{name}.sqlcipher_p99_us"),
        format!("{peer:.1}"),
        "us",
    );
    print_figure(
        &format!("peer.{name}.ratio"),
        format!("{:.2}", peer / annal.max(0.001)),
        "x",
    );
}

fn main() {
    if let Ok(mode) = std::env::var(CHILD_MODE_ENV) {
        child(&mode);
        return;
    }
    if !annal_bench::under_cargo_bench() {
        return;
    }
    // Durable append.
    let annal = must("annal append", run_stream(APPEND_EVENTS, false)).events_per_s();
    let dir = must("tempdir", tempfile::tempdir().map_err(Into::into));
    let path = dir.path().join(SQLCIPHER_FILE);
    let mut connection = sqlcipher_open(&path);
    let start = Instant::now();
    sqlcipher_insert(&mut connection, 1, APPEND_EVENTS, SQLCIPHER_TXN_EVENTS);
    let peer = APPEND_EVENTS as f64 / start.elapsed().as_secs_f64();
    drop(connection);
    print_figure(
        "peer.append.annal_events_per_s",
        format!("{annal:.0}"),
        "events/s",
    );
    print_figure(
        "peer.append.sqlcipher_events_per_s",
        format!("{peer:.0}"),
        "events/s",
    );
    print_figure("peer.append.ratio", format!("{:.2}", annal / peer), "x");
    drop(dir);

    // The 100 MiB stores.
    let target = FULL_STORE_BYTES - FULL_STORE_HEADROOM_BYTES;
    let annal_dir = must("tempdir", tempfile::tempdir().map_err(Into::into));
    let events = must(
        "annal fill",
        fill_store(annal_dir.path(), target, usize::MAX),
    );
    let peer_dir = must("tempdir", tempfile::tempdir().map_err(Into::into));
    let peer_path = peer_dir.path().join(SQLCIPHER_FILE);
    let peer_events = sqlcipher_fill(&peer_path, target);
    println!("stores: annal {events} events, SQLCipher {peer_events} events");

    let mut reader = must("open", open_reader(annal_dir.path()));
    let slice = middle_slice(must("newest", newest_sequence(&mut reader)));
    let connection = sqlcipher_open(&peer_path);
    let session = session_label(3);
    for (name, query, sql_text, sql_session, expect) in [
        ("newest50", BenchQuery::Newest50, NEWEST50_SQL, None, 50),
        (
            "session10",
            BenchQuery::Session10,
            SESSION10_SQL,
            Some(session.as_str()),
            10,
        ),
    ] {
        let request = must("request", query.request(slice));
        must("warm", time_pages(&mut reader, &request, 1, expect));
        let annal_ns = must(
            "annal read",
            time_pages(&mut reader, &request, ROUNDS, expect),
        );
        let _ = sqlcipher_time(&connection, sql_text, sql_session, 1, expect, Rows::Text);
        let text_ns = sqlcipher_time(
            &connection,
            sql_text,
            sql_session,
            ROUNDS,
            expect,
            Rows::Text,
        );
        let peer_ns = sqlcipher_time(
            &connection,
            sql_text,
            sql_session,
            ROUNDS,
            expect,
            Rows::Events,
        );
        print_figure(
            &format!("peer.{name}.sqlcipher_text_p99_us"),
            format!("{:.1}", p99_us(&text_ns)),
            "us",
        );
        print_read_pair(name, &annal_ns, &peer_ns);
    }
    drop(connection);

    let annal_ns = annal_under_writer(annal_dir.path(), &mut reader, slice);
    let peer_ns = sqlcipher_under_writer(&peer_path, peer_events);
    print_read_pair("under_writer", &annal_ns, &peer_ns);

    let annal_open = median(&open_runs(annal_dir.path(), "annal"));
    let peer_open = median(&open_runs(&peer_path, "sqlcipher"));
    print_figure("peer.open.annal_ms", format!("{annal_open:.2}"), "ms");
    print_figure("peer.open.sqlcipher_ms", format!("{peer_open:.2}"), "ms");
    print_figure(
        "peer.open.ratio",
        format!("{:.2}", peer_open / annal_open.max(0.001)),
        "x",
    );
}

/// annal's newest 50 on `reader` while an engine on the same store captures and commits.
fn annal_under_writer(
    dir: &Path,
    reader: &mut annal_engine::query::QueryService,
    slice: (u64, u64),
) -> Vec<u64> {
    let engine = must("start", start_engine(dir));
    engine
        .set_quota(UNDER_WRITER_QUOTA_BYTES, OnQuota::StopCapture)
        .unwrap_or_else(|e| panic!("quota: {e:?}"));
    let stop = AtomicBool::new(false);
    let took = thread::scope(|scope| {
        let writer = scope.spawn(|| -> Result<(), RigError> {
            let mut producer = Producer::new(&engine)?;
            while !stop.load(Ordering::Acquire) {
                for _ in 0..UNDER_WRITER_ACTIONS_PER_MS {
                    if !producer.action() {
                        return Err("an action start was not accepted".into());
                    }
                }
                thread::sleep(Duration::from_millis(1));
            }
            producer.finish();
            Ok(())
        });
        thread::sleep(Duration::from_millis(200));
        let request = must("request", BenchQuery::Newest50.request(slice));
        must("warm", time_pages(reader, &request, 1, 50));
        let took = must("hot", time_pages(reader, &request, ROUNDS, 50));
        stop.store(true, Ordering::Release);
        must(
            "writer",
            writer
                .join()
                .unwrap_or_else(|_| Err("the writer thread panicked".into())),
        );
        took
    });
    engine.shutdown();
    took
}

/// SQLCipher's newest 50 while a second connection commits small transactions beside it.
fn sqlcipher_under_writer(path: &Path, events: u64) -> Vec<u64> {
    let stop = AtomicBool::new(false);
    thread::scope(|scope| {
        let writer = scope.spawn(|| {
            let mut connection = sqlcipher_open(path);
            let mut next = events + 1;
            while !stop.load(Ordering::Acquire) {
                sqlcipher_insert(
                    &mut connection,
                    next,
                    UNDER_WRITER_TXN_EVENTS,
                    UNDER_WRITER_TXN_EVENTS,
                );
                next += UNDER_WRITER_TXN_EVENTS as u64;
                thread::sleep(UNDER_WRITER_PAUSE);
            }
        });
        thread::sleep(Duration::from_millis(200));
        let connection = sqlcipher_open(path);
        let _ = sqlcipher_time(&connection, NEWEST50_SQL, None, 1, 50, Rows::Events);
        let took = sqlcipher_time(&connection, NEWEST50_SQL, None, ROUNDS, 50, Rows::Events);
        stop.store(true, Ordering::Release);
        if writer.join().is_err() {
            must::<()>("writer", Err("the SQLCipher writer panicked".into()));
        }
        took
    })
}

/// A child of the open figures: opens the store and answers newest 50, printing the time from
/// its `main` to the answer.
fn child(mode: &str) {
    let start = Instant::now();
    let path = PathBuf::from(std::env::var(CHILD_DIR_ENV).unwrap_or_default());
    match mode {
        "annal" => {
            let request = must("request", BenchQuery::Newest50.request((0, 0)));
            let mut reader = must("open", open_reader(&path));
            must("page", time_pages(&mut reader, &request, 1, 50));
        }
        "sqlcipher" => {
            let connection = sqlcipher_open(&path);
            let _ = sqlcipher_time(&connection, NEWEST50_SQL, None, 1, 50, Rows::Events);
        }
        other => must::<()>("child", Err(format!("unknown child mode {other}").into())),
    }
    println!("{CHILD_LINE} {:.3}", start.elapsed().as_secs_f64() * 1e3);
}

/// The figures of [`OPEN_RUNS`] children in `mode`, sorted.
fn open_runs(store: &Path, mode: &str) -> Vec<f64> {
    let exe = must("current_exe", std::env::current_exe().map_err(Into::into));
    let mut runs = Vec::with_capacity(OPEN_RUNS);
    for _ in 0..OPEN_RUNS {
        let output = must(
            "child",
            Command::new(&exe)
                .env(CHILD_MODE_ENV, mode)
                .env(CHILD_DIR_ENV, store)
                .output()
                .map_err(Into::into),
        );
        let stdout = String::from_utf8_lossy(&output.stdout);
        let ms = stdout
            .lines()
            .find_map(|l| l.strip_prefix(CHILD_LINE))
            .and_then(|v| v.trim().parse::<f64>().ok());
        match ms {
            Some(ms) => runs.push(ms),
            None => must::<()>(
                "child",
                Err(format!(
                    "{mode} child printed no figure: {stdout} {}",
                    String::from_utf8_lossy(&output.stderr)
                )
                .into()),
            ),
        }
    }
    runs.sort_by(f64::total_cmp);
    runs
}

fn median(sorted: &[f64]) -> f64 {
    sorted.get(sorted.len() / 2).copied().unwrap_or(0.0)
}
