//! Thread lifecycle: workers exist only while an epoch runs, are joined when its iterator ends or
//! is dropped mid-epoch, and block (not spin) while the consumer is slow.
//!
//! One test only: it counts the threads of the whole process (`/proc/self/task`), which other
//! tests running beside it in the same binary would disturb.

mod common;

use std::fs;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use ferroloader_loader::{Instrument, Loader, LoaderOptions, OpHooks};

fn threads() -> usize {
    fs::read_dir("/proc/self/task").expect("procfs").count()
}

/// Waits (up to 2 s) for the thread count to reach `want`: a joined thread can stay listed for a
/// moment while the kernel finishes tearing it down; a leaked one never leaves.
fn settle_to(want: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let now = threads();
        if now == want || Instant::now() > deadline {
            return now;
        }
        thread::sleep(Duration::from_millis(5));
    }
}

/// User + system CPU time of the process, in clock ticks.
fn cpu_ticks() -> u64 {
    let stat = fs::read_to_string("/proc/self/stat").expect("procfs");
    // The command name is in parentheses and may contain spaces: count fields after it.
    let after = &stat[stat.rfind(')').expect("comm") + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 of stat (utime, stime) are the 12th and 13th after the name.
    fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime")
}

/// Counts live worker hooks: a worker drops its hooks when it returns, so once `drop(iter)` has
/// joined the workers, none is alive, whatever the scheduler does next.
#[derive(Default)]
struct Live(Arc<AtomicUsize>);

struct Hooks(Arc<AtomicUsize>);

impl OpHooks for Hooks {}

impl Drop for Hooks {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Instrument for Live {
    type Hooks = Hooks;
    fn worker_hooks(&self, _worker: usize) -> Hooks {
        self.0.fetch_add(1, Ordering::SeqCst);
        Hooks(Arc::clone(&self.0))
    }
}

#[test]
fn workers_are_joined_when_an_epoch_ends_or_is_dropped_and_never_spin() {
    let base = threads();
    let options = LoaderOptions::default()
        .batch_size(8)
        .num_workers(4)
        .prefetch_batches(2);
    let slow = || TestProc::f32().with_sleep(Duration::from_millis(5));
    let loader = Loader::new(dataset(400, &[]), slow(), options.clone()).expect("valid");

    // Dropped mid-epoch: each worker finishes at most the 60 ms sample it is on, and is joined
    // before `drop` returns.
    let live = Live::default();
    let alive = Arc::clone(&live.0);
    let slower = TestProc::f32().with_sleep(Duration::from_millis(60));
    let very_slow =
        Loader::with_instrument(dataset(400, &[]), slower, live, options.clone()).expect("valid");
    let mut iter = very_slow.epoch(0);
    iter.next().expect("a batch").expect("ok");
    assert_eq!(threads(), base + 4);
    assert_eq!(alive.load(Ordering::SeqCst), 4);
    let t = Instant::now();
    drop(iter);
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(
        alive.load(Ordering::SeqCst),
        0,
        "drop returned before the workers ended"
    );
    assert_eq!(settle_to(base), base, "workers left behind after a drop");

    // Dropped before the first batch was asked for.
    drop(loader.epoch(1));
    assert_eq!(settle_to(base), base);

    // While the consumer holds off, the window fills up and the workers block: no CPU is used.
    let mut iter = loader.epoch(2);
    let first = iter.next().expect("a batch").expect("ok");
    thread::sleep(Duration::from_millis(100));
    let before = cpu_ticks();
    thread::sleep(Duration::from_millis(400));
    let spent = cpu_ticks() - before;
    assert!(spent <= 5, "{spent} ticks of CPU while idle: a busy loop");
    drop(first);
    drop(iter);
    assert_eq!(settle_to(base), base);

    // A new epoch starts at once and its threads are gone when it ends.
    let small = Loader::new(dataset(48, &[]), slow(), options.clone()).expect("valid");
    assert_eq!(all_indices(&drain_ok(small.epoch(0))).len(), 48);
    assert_eq!(settle_to(base), base, "workers left behind after the end");

    // After an error ends the epoch.
    let failing = Loader::new(dataset(48, &[(20, FAIL)]), slow(), options.clone()).expect("valid");
    let mut iter = failing.epoch(0);
    assert!(drain(&mut iter).1.is_some());
    assert_eq!(settle_to(base), base, "workers left behind after an error");
    drop(iter);

    // After a panic in the processor.
    let panicking = Loader::new(dataset(48, &[(3, PANIC)]), slow(), options).expect("valid");
    assert!(drain(panicking.epoch(0)).1.is_some());
    assert_eq!(settle_to(base), base, "workers left behind after a panic");

    // Two loaders at once.
    let (a, b) = (loader.epoch(3), small.epoch(1));
    assert_eq!(threads(), base + 8);
    drop((a, b));
    assert_eq!(settle_to(base), base);
}
