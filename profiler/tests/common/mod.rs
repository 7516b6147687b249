//! A synthetic two-worker loading workload shared by the integration tests: known op times
//! (spin loops against the profiler's own clock), batches completed by workers and delivered in
//! order to a consumer that measures its own waits.
#![allow(dead_code)] // Each test file uses a different part.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use ferroloader_profiler::{now_ns, ops, Arrival, Mode, Profile, Profiler, ProfilerConfig};

/// Busy-waits until `ns` have passed; returns the time actually spent.
pub fn spin_ns(ns: u64) -> u64 {
    let t0 = now_ns();
    let mut x = 0u64;
    while now_ns() - t0 < ns {
        x = std::hint::black_box(x.wrapping_add(1));
    }
    now_ns() - t0
}

/// Busy-waits until this thread has run on a CPU for `ns` (its own CPU clock, not the wall
/// clock): what the task-clock counter then reads is `ns` and the reads' own cost, however
/// often a loaded machine preempts the thread.
pub fn spin_cpu_ns(ns: u64) {
    let cpu = || {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
        t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
    };
    let t0 = cpu();
    let mut x = 0u64;
    while cpu() - t0 < ns {
        x = std::hint::black_box(x.wrapping_add(1));
    }
}

/// What a run of [`run_workload`] measured by itself, to check the profile against.
#[derive(Debug)]
pub struct Workload {
    pub profile: Profile,
    /// Per worker: sum of the times measured around each op call (outside the span).
    pub measured_op_ns: Vec<u64>,
    /// Per worker: wall time of the worker's whole loop.
    pub loop_ns: Vec<u64>,
    /// Per worker: time measured inside the slow op's closure.
    pub slow_inner_ns: Vec<u64>,
    /// Samples processed in all.
    pub samples: u64,
    pub batches: u64,
}

pub const WORKERS: u32 = 2;
pub const BATCH: u64 = 4;

/// Two workers; sample `i` goes to worker `i % 2`; batch `b` holds samples `4b..4b+4`. Each
/// sample runs read, decode (the slow op, `slow_ns`), resize and normalize (`fast_ns` each).
pub fn run_workload(mode: Mode, batches: u64, fast_ns: u64, slow_ns: u64) -> Workload {
    let profiler = Profiler::new(
        ProfilerConfig::new(mode)
            .label("synthetic")
            .num_workers(WORKERS)
            .batch_size(BATCH as u32)
            .chunk_capacity(64),
    );
    profiler.start();
    let samples = batches * BATCH;
    let done: Arc<Vec<AtomicUsize>> = Arc::new((0..batches).map(|_| AtomicUsize::new(0)).collect());
    let started: Arc<Vec<AtomicUsize>> =
        Arc::new((0..batches).map(|_| AtomicUsize::new(0)).collect());
    let completion_seq = Arc::new(AtomicU64::new(0));
    let completed_as: Arc<Vec<AtomicU64>> =
        Arc::new((0..batches).map(|_| AtomicU64::new(u64::MAX)).collect());
    for b in 0..batches {
        profiler.batch_planned(b, BATCH as u32);
    }

    let handles: Vec<_> = (0..WORKERS)
        .map(|w| {
            let p = profiler.clone();
            let (done, started, seq, completed_as) = (
                Arc::clone(&done),
                Arc::clone(&started),
                Arc::clone(&completion_seq),
                Arc::clone(&completed_as),
            );
            std::thread::spawn(move || {
                let rec = p.thread(w, format!("worker-{w}"));
                let mut measured = 0u64;
                let mut slow_inner = 0u64;
                let t_loop = now_ns();
                for i in (u64::from(w)..samples).step_by(WORKERS as usize) {
                    let b = i / BATCH;
                    if started[b as usize].fetch_add(1, Ordering::AcqRel) == 0 {
                        p.batch_started(b, w);
                    }
                    rec.set_sample(b, i);
                    for (op, ns) in [
                        (ops::READ, fast_ns),
                        (ops::DECODE, slow_ns),
                        (ops::RESIZE, fast_ns),
                        (ops::NORMALIZE, fast_ns),
                    ] {
                        let t0 = now_ns();
                        let inner = rec.in_span(op, || spin_ns(ns));
                        measured += now_ns() - t0;
                        if op == ops::DECODE {
                            slow_inner += inner;
                        }
                    }
                    if done[b as usize].fetch_add(1, Ordering::AcqRel) + 1 == BATCH as usize {
                        completed_as[b as usize]
                            .store(seq.fetch_add(1, Ordering::AcqRel), Ordering::Release);
                        p.batch_completed(b, Some(w));
                    }
                }
                let loop_ns = now_ns() - t_loop;
                drop(rec);
                (measured, loop_ns, slow_inner)
            })
        })
        .collect();

    // The consumer: takes batches in order, measuring how long it waits for each.
    for b in 0..batches {
        let t0 = now_ns();
        while done[b as usize].load(Ordering::Acquire) < BATCH as usize {
            std::thread::yield_now();
        }
        let wait_ns = now_ns() - t0;
        let ready = (b..batches)
            .filter(|&x| done[x as usize].load(Ordering::Acquire) == BATCH as usize)
            .count() as u32;
        profiler.batch_delivered(
            b,
            Arrival {
                wait_ns,
                // Delivered in order, so batch b is the b-th delivery.
                out_of_order: completed_as[b as usize].load(Ordering::Acquire) != b,
                queue_occupancy: ready,
            },
        );
        // A short "training step".
        spin_ns(50_000);
    }

    let mut measured_op_ns = Vec::new();
    let mut loop_ns = Vec::new();
    let mut slow_inner_ns = Vec::new();
    for h in handles {
        let (m, l, s) = h.join().expect("worker panicked");
        measured_op_ns.push(m);
        loop_ns.push(l);
        slow_inner_ns.push(s);
    }
    profiler.end();
    Workload {
        profile: profiler.finish(),
        measured_op_ns,
        loop_ns,
        slow_inner_ns,
        samples,
        batches,
    }
}
