//! An embedder that starts and shuts down engines in a long-running process keeps no thread of
//! theirs: the runtime's workers, the key custody thread and the ingress's ticker thread all end
//! with `shutdown`. Its own binary, so no other test's engine runs in the process meanwhile.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use annal_actors::{Engine, EngineConfig};
use annal_engine::entropy::SeededEntropy;
use annal_engine::keys::{InMemoryProvider, KeyProvider, Namespace};
use annal_engine::storage::StoreLayout;
use annal_schema::{ActionOutcome, Capability, Effect, Route};

/// Engines started and shut down one after another.
const ENGINE_LIVES: usize = 5;

/// How long the threads of a shut-down engine may take to be gone.
const THREADS_GONE_DEADLINE_MS: u64 = 5_000;

/// The names (as the kernel keeps them: at most 15 bytes) of this process's threads.
fn thread_names() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .map(|name| name.trim_end().to_owned())
        .collect()
}

/// One engine's life: start, enable, a hundred actions, a flush, shutdown.
fn live_once(dir: &std::path::Path, provider: &Arc<InMemoryProvider>) {
    let namespace = Namespace::new("work").unwrap();
    let config = EngineConfig::new(StoreLayout::in_namespace_dir(&dir.join("work")), namespace);
    let engine = Engine::start(config, Arc::clone(provider) as Arc<dyn KeyProvider>).unwrap();
    engine.enable().unwrap();
    let capture = engine.capture();
    for _ in 0..100 {
        let token =
            capture.action_started(Capability::new("input.pointer.click").unwrap(), None, None);
        capture.action_completed(
            token,
            ActionOutcome::new(Effect::Confirmed, Route::Accessibility),
        );
    }
    engine.flush().unwrap();
    assert!(engine.shutdown().drained);
}

#[test]
fn shut_down_engines_leave_no_threads_behind() {
    let dir = tempfile::tempdir().unwrap();
    let namespace = Namespace::new("work").unwrap();
    let provider = Arc::new(InMemoryProvider::new(Box::new(SeededEntropy::new(1))).unwrap());
    provider
        .put_raw(&namespace, &namespace.primary_reference(), &[0x5c; 32])
        .unwrap();
    let before = thread_names();
    for _ in 0..ENGINE_LIVES {
        live_once(dir.path(), &provider);
    }
    let deadline = Instant::now() + Duration::from_millis(THREADS_GONE_DEADLINE_MS);
    loop {
        let now = thread_names();
        let annal: Vec<&String> = now.iter().filter(|n| n.starts_with("annal")).collect();
        if now.len() <= before.len() && annal.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "threads left after {ENGINE_LIVES} engines were shut down: {} before, now {now:?}",
            before.len()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
