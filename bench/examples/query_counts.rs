//! Cold newest-50 pages for instruction counting under callgrind: `query_counts DIR N` opens a
//! reader on the store `annal_bench::query::fill_store` left in DIR (filling it first when DIR
//! holds none), turns its cache off and answers N newest-50 pages. Per-page cost is the
//! difference of two runs over the difference of their N (docs/benchmarks.md).
#![allow(missing_docs)]

use std::process::ExitCode;

use annal_bench::query::{
    BenchQuery, FULL_STORE_BYTES, FULL_STORE_HEADROOM_BYTES, chunk_bytes, fill_store, open_reader,
    time_pages,
};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let (Some(dir), Some(pages)) = (args.get(1), args.get(2).and_then(|n| n.parse().ok())) else {
        eprintln!("usage: query_counts DIR N");
        return ExitCode::FAILURE;
    };
    let dir = std::path::Path::new(dir);
    let run = || -> Result<(), annal_bench::engine::RigError> {
        if chunk_bytes(dir) == 0 {
            fill_store(
                dir,
                FULL_STORE_BYTES - FULL_STORE_HEADROOM_BYTES,
                usize::MAX,
            )?;
        }
        let mut reader = open_reader(dir)?;
        reader.set_hot_cache_max_bytes(0);
        let request = BenchQuery::Newest50.request((0, 0))?;
        time_pages(&mut reader, &request, pages, 50)?;
        Ok(())
    };
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("query_counts: {e}");
            ExitCode::FAILURE
        }
    }
}
