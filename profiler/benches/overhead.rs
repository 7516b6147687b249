//! Per-span cost of the profiler in each mode, against an empty baseline.
//!
//! One iteration is one span: `enter` + `exit` through a guard, with the sample context set as
//! the loader does. In `span/*`, `max_spans` keeps memory bounded over millions of iterations:
//! past it, full chunks are counted and reused instead of sent. `span/spans_collected` measures
//! the path where every chunk is kept (sent to the collector, a fresh chunk allocated), draining
//! the collector outside the timed region every million spans.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use ferroloader_profiler::{now_ns, ops, Mode, Profiler, ProfilerConfig};

fn profiler(mode: Mode) -> Profiler {
    Profiler::new(ProfilerConfig::new(mode).max_spans(1 << 20))
}

fn span_overhead(c: &mut Criterion) {
    let mut g = c.benchmark_group("span");
    g.bench_function("baseline", |b| {
        let mut i = 0u64;
        b.iter(|| {
            i += 1;
            black_box(i)
        })
    });
    for (name, mode) in [
        ("off", Mode::Off),
        ("spans", Mode::Spans),
        ("counters", Mode::Counters),
    ] {
        let p = profiler(mode);
        if let Some(c) = p.counters() {
            eprintln!(
                "counters: hardware {} ({:?}), software {} ({:?})",
                c.hardware.available, c.hardware.reason, c.software.available, c.software.reason
            );
        }
        let rec = p.thread(0, "bench");
        g.bench_function(name, |b| {
            let mut i = 0u64;
            b.iter(|| {
                i += 1;
                rec.set_sample(i / 64, i);
                let _s = rec.span(ops::DECODE);
                black_box(i)
            })
        });
    }
    g.bench_function("spans_collected", |b| {
        b.iter_custom(|iters| {
            let p = Profiler::new(ProfilerConfig::new(Mode::Spans));
            let rec = p.thread(0, "bench");
            let mut timed = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                let n = left.min(1 << 20);
                let t0 = Instant::now();
                for i in 0..n {
                    rec.set_sample(i / 64, i);
                    let _s = rec.span(ops::DECODE);
                    black_box(i);
                }
                timed += t0.elapsed();
                black_box(p.finish());
                left -= n;
            }
            timed
        })
    });
    g.finish();
}

fn clock(c: &mut Criterion) {
    c.bench_function("now_ns", |b| b.iter(|| black_box(now_ns())));
}

criterion_group!(benches, span_overhead, clock);
criterion_main!(benches);
