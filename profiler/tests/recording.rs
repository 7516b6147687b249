//! Recorder behaviour: modes, chunk hand-off, nesting, batch events, failures, sinks.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use common::spin_ns;
use ferroloader_profiler::{
    ops, Arrival, BatchEvent, CounterArray, Mode, OpId, Profiler, ProfilerConfig, RawSpan, Sink,
};

#[test]
fn off_mode_records_nothing() {
    let profiler = Profiler::new(ProfilerConfig::new(Mode::Off).label("off"));
    assert!(!profiler.is_enabled());
    assert!(profiler.counters().is_none());
    let rec = profiler.thread(0, "worker-0");
    assert!(!rec.is_enabled());
    for i in 0..10_000 {
        rec.set_sample(0, i);
        let _g = rec.span(ops::DECODE);
        rec.enter(ops::RESIZE);
        rec.exit(ops::RESIZE);
    }
    rec.exit(ops::FLIP); // unbalanced: ignored without a trace
    rec.sample_failed(Some(ops::DECODE), "corrupt");
    rec.flush();
    profiler.batch_planned(0, 4);
    profiler.batch_delivered(0, Arrival::default());
    drop(rec);
    let profile = profiler.finish();
    let p = &profile.pipelines[0];
    assert_eq!(p.mode, Mode::Off);
    assert!(p.spans.is_empty());
    assert!(p.batches.is_empty());
    assert!(p.failures.is_empty());
    assert!(p.threads.is_empty());
    assert_eq!(p.stats, Default::default());
}

#[test]
fn chunks_start_small_and_double_up_to_the_capacity() {
    /// Sizes of the chunks handed to the collector.
    #[derive(Default)]
    struct Sizes(std::sync::Mutex<Vec<usize>>);
    impl Sink for Sizes {
        fn on_spans(&self, _worker: u32, spans: &[RawSpan], _counters: &[CounterArray]) {
            self.0.lock().expect("sizes").push(spans.len());
        }
    }
    let first = ferroloader_profiler::recorder::FIRST_CHUNK;
    let profiler = Profiler::new(ProfilerConfig::new(Mode::Spans).chunk_capacity(3 * first));
    let sizes = Arc::new(Sizes::default());
    profiler.add_sink(sizes.clone());
    let rec = profiler.thread(0, "w");
    let total = first + 2 * first + 3 * first + 3 * first + 5;
    for i in 0..total {
        rec.set_sample(0, i as u64);
        rec.in_span(ops::FLIP, || ());
    }
    drop(rec);
    let seen = sizes.0.lock().expect("sizes").clone();
    assert_eq!(seen, [first, 2 * first, 3 * first, 3 * first, 5]);
    assert_eq!(profiler.finish().pipelines[0].spans.len(), total);
}

#[test]
fn small_chunks_hand_off_every_span_from_every_thread() {
    let profiler = Profiler::new(ProfilerConfig::new(Mode::Spans).chunk_capacity(7));
    let per_thread = 500u64;
    let handles: Vec<_> = (0..3u32)
        .map(|w| {
            let p = profiler.clone();
            std::thread::spawn(move || {
                let rec = p.thread(w, format!("w{w}"));
                for i in 0..per_thread {
                    rec.set_sample(i / 10, i);
                    rec.in_span(ops::FLIP, || std::hint::black_box(i));
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("thread");
    }
    let profile = profiler.finish();
    let p = &profile.pipelines[0];
    assert_eq!(p.spans.len() as u64, 3 * per_thread);
    assert_eq!(p.stats.unflushed_recorders, 0);
    assert_eq!(p.stats.dropped_spans, 0);
    for w in 0..3 {
        let mut samples: Vec<u64> = p
            .spans
            .iter()
            .filter(|s| s.worker == w)
            .map(|s| s.sample.expect("sample"))
            .collect();
        samples.sort_unstable();
        assert_eq!(samples, (0..per_thread).collect::<Vec<_>>());
    }
    for s in &p.spans {
        assert_eq!(s.op, "flip");
        assert_eq!(s.batch, s.sample.map(|x| x / 10));
        assert!(s.end_ns >= s.start_ns);
    }
    let mut starts: Vec<u64> = p.spans.iter().map(|s| s.start_ns).collect();
    let sorted = {
        let mut v = starts.clone();
        v.sort_unstable();
        v
    };
    assert_eq!(starts, sorted, "spans are ordered by start");
    starts.dedup();
    assert_eq!(p.threads.len(), 3);
}

#[test]
fn max_spans_bounds_memory_and_counts_the_rest() {
    let profiler = Profiler::new(
        ProfilerConfig::new(Mode::Spans)
            .chunk_capacity(10)
            .max_spans(100),
    );
    let rec = profiler.thread(0, "w");
    for _ in 0..255 {
        rec.in_span(ops::READ, || ());
    }
    drop(rec);
    let p = &profiler.finish().pipelines[0];
    assert_eq!(p.spans.len(), 100);
    assert_eq!(p.stats.dropped_spans, 155);
}

#[test]
fn nesting_depth_and_unbalanced_exits() {
    let profiler = Profiler::new(ProfilerConfig::new(Mode::Spans));
    let rec = profiler.thread(0, "w");
    {
        let _outer = rec.span(ops::PROCESS);
        let _inner = rec.span(ops::DECODE);
        spin_ns(10_000);
    }
    // An exit with nothing open is counted and ignored.
    rec.exit(ops::FLIP);
    // Exiting an outer span closes the forgotten inner one unrecorded.
    rec.enter(ops::PROCESS);
    rec.enter(ops::RESIZE);
    rec.exit(ops::PROCESS);
    // Deeper than the recorder's stack: counted, and the balance is kept.
    for _ in 0..20 {
        rec.enter(ops::CROP);
    }
    for _ in 0..20 {
        rec.exit(ops::CROP);
    }
    drop(rec);
    let p = &profiler.finish().pipelines[0];
    let by_op = |op: &str| p.spans.iter().filter(|s| s.op == op).collect::<Vec<_>>();
    let process = by_op("process");
    let decode = by_op("decode");
    assert_eq!(process.len(), 2);
    assert_eq!(decode.len(), 1);
    assert_eq!(decode[0].depth, 1);
    assert!(process.iter().all(|s| s.depth == 0));
    assert!(decode[0].start_ns >= process[0].start_ns && decode[0].end_ns <= process[0].end_ns);
    assert!(by_op("resize").is_empty());
    assert_eq!(
        by_op("crop").len(),
        ferroloader_profiler::recorder::MAX_DEPTH
    );
    assert_eq!(p.stats.unbalanced_exits, 2);
    assert_eq!(p.stats.dropped_spans, 4);
}

#[test]
fn batch_events_fold_into_records() {
    let profiler = Profiler::new(ProfilerConfig::new(Mode::Spans).batch_size(8));
    profiler.batch_event_at(3, 100, BatchEvent::Planned { size: 8 });
    profiler.batch_event_at(3, 250, BatchEvent::FirstSampleStarted { worker: 1 });
    profiler.batch_event_at(3, 200, BatchEvent::FirstSampleStarted { worker: 0 });
    profiler.batch_event_at(3, 900, BatchEvent::Completed { worker: Some(1) });
    profiler.batch_event_at(
        3,
        1500,
        BatchEvent::Delivered(Arrival {
            wait_ns: 40,
            out_of_order: true,
            queue_occupancy: 2,
        }),
    );
    profiler.batch_planned(4, 8);
    let p = &profiler.finish().pipelines[0];
    assert_eq!(p.batches.len(), 2);
    let b = &p.batches[0];
    assert_eq!(b.batch, 3);
    assert_eq!(b.size, Some(8));
    assert_eq!(b.planned_ns, Some(100));
    assert_eq!(b.first_started_ns, Some(200), "the earliest start is kept");
    assert_eq!((b.completed_ns, b.completed_by), (Some(900), Some(1)));
    assert_eq!(b.delivered_ns, Some(1500));
    assert_eq!(b.wait_ns, Some(40));
    assert!(b.out_of_order);
    assert_eq!(b.queue_occupancy, Some(2));
    assert_eq!(p.batches[1].batch, 4);
    assert!(p.batches[1].delivered_ns.is_none());
}

#[test]
fn failures_carry_the_sample_context() {
    let profiler = Profiler::new(ProfilerConfig::new(Mode::Spans));
    let rec = profiler.thread(5, "w5");
    rec.set_sample(2, 17);
    rec.sample_failed(Some(ops::DECODE), "truncated JPEG");
    rec.clear_sample();
    rec.sample_failed(None, "unreadable file");
    drop(rec);
    let p = &profiler.finish().pipelines[0];
    assert_eq!(p.failures.len(), 2);
    let f = &p.failures[0];
    assert_eq!(
        (f.worker, f.batch, f.sample, f.op.as_deref()),
        (Some(5), Some(2), Some(17), Some("decode"))
    );
    assert_eq!(f.cause, "truncated JPEG");
    assert!(f.t_ns > 0);
    assert_eq!(
        (p.failures[1].batch, p.failures[1].op.as_deref()),
        (None, None)
    );
}

#[derive(Default)]
struct CountingSink {
    spans: AtomicU64,
    chunks: AtomicU64,
    batch_events: AtomicU64,
    failures: AtomicU64,
}

impl Sink for CountingSink {
    fn on_spans(&self, _worker: u32, spans: &[RawSpan], counters: &[CounterArray]) {
        assert!(counters.is_empty() || counters.len() == spans.len());
        self.spans.fetch_add(spans.len() as u64, Ordering::Relaxed);
        self.chunks.fetch_add(1, Ordering::Relaxed);
    }
    fn on_batch_event(&self, _batch: u64, _t_ns: u64, _event: &BatchEvent) {
        self.batch_events.fetch_add(1, Ordering::Relaxed);
    }
    fn on_failure(&self, _failure: &ferroloader_profiler::SampleFailure) {
        self.failures.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn sinks_see_each_chunk_once() {
    let profiler = Profiler::new(ProfilerConfig::new(Mode::Spans).chunk_capacity(4));
    let sink = Arc::new(CountingSink::default());
    profiler.add_sink(sink.clone());
    let rec = profiler.thread(0, "w");
    for _ in 0..10 {
        rec.in_span(ops::NORMALIZE, || ());
    }
    rec.sample_failed(None, "x");
    profiler.batch_planned(0, 1);
    drop(rec);
    assert_eq!(sink.spans.load(Ordering::Relaxed), 10);
    assert_eq!(sink.chunks.load(Ordering::Relaxed), 3, "4 + 4 + 2 on drop");
    assert_eq!(sink.batch_events.load(Ordering::Relaxed), 1);
    assert_eq!(sink.failures.load(Ordering::Relaxed), 1);
    assert_eq!(profiler.finish().pipelines[0].spans.len(), 10);
}

#[test]
fn live_recorders_are_reported_and_flush_delivers_later() {
    let profiler = Profiler::new(ProfilerConfig::new(Mode::Spans));
    let rec = profiler.thread(0, "w");
    rec.in_span(ops::COLLATE, || ());
    let first = profiler.finish();
    assert!(first.pipelines[0].spans.is_empty());
    assert_eq!(first.pipelines[0].stats.unflushed_recorders, 1);
    rec.flush();
    let second = profiler.finish();
    assert_eq!(second.pipelines[0].spans.len(), 1);
    assert_eq!(second.pipelines[0].spans[0].op, "collate");
    // Recording still works after a flush.
    rec.in_span(ops::COLLATE, || ());
    drop(rec);
    let third = profiler.finish();
    assert_eq!(third.pipelines[0].spans.len(), 1);
    assert_eq!(third.pipelines[0].stats.unflushed_recorders, 0);
}

#[test]
fn custom_ops_keep_their_names_and_moved_recorders_are_flagged() {
    let profiler = Profiler::new(ProfilerConfig::new(Mode::Spans));
    let custom = profiler.register_op("random_erasing").expect("op");
    assert_eq!(profiler.register_op("random_erasing").expect("op"), custom);
    assert_eq!(profiler.register_op("decode").expect("op"), ops::DECODE);
    assert_eq!(profiler.op_name(custom).as_deref(), Some("random_erasing"));
    assert_eq!(profiler.op_name(OpId(60_000)), None);
    let rec = profiler.thread(0, "made-here");
    rec.in_span(custom, || ());
    // Dropped on another thread than the one that created it (and opened its counters).
    std::thread::spawn(move || drop(rec))
        .join()
        .expect("thread");
    let p = &profiler.finish().pipelines[0];
    assert_eq!(p.spans[0].op, "random_erasing");
    assert!(p.threads[0].stats.moved_across_threads);
    assert!(p.threads[0].tid.is_some());
}

#[test]
fn recorders_move_to_their_threads_and_the_profiler_is_shared() {
    // Compile-time: the loader's per-worker hooks must be `Send`; the profiler is shared.
    fn send<T: Send + 'static>(_: &T) {}
    fn shared<T: Send + Sync + Clone + 'static>(_: &T) {}
    let profiler = Profiler::new(ProfilerConfig::new(Mode::Spans));
    shared(&profiler);
    let rec = profiler.thread(0, "w");
    send(&rec);
    let rec = std::thread::spawn(move || {
        rec.in_span(ops::READ, || ());
        rec
    })
    .join()
    .expect("thread");
    drop(rec);
    assert_eq!(profiler.finish().pipelines[0].spans.len(), 1);
}

#[test]
fn consumer_spans_need_no_recorder_and_carry_no_sample() {
    let off = Profiler::new(ProfilerConfig::new(Mode::Off));
    off.consumer_span(ops::COLLATE, 3, 10, 20);
    assert!(off.finish().pipelines[0].spans.is_empty());

    let profiler = Profiler::new(ProfilerConfig::new(Mode::Spans));
    profiler.consumer_span(ops::COLLATE, 3, 100, 150);
    profiler.consumer_span(ops::COLLATE, 4, 300, 250); // clock oddity: clamped, never negative
    let p = profiler.finish().pipelines.remove(0);
    assert!(p.threads.is_empty());
    assert_eq!(p.spans.len(), 2);
    let s = &p.spans[0];
    assert_eq!(
        (s.op.as_str(), s.worker, s.batch, s.sample, s.dur_ns()),
        ("collate", ferroloader_profiler::CONSUMER, Some(3), None, 50)
    );
    assert_eq!(p.spans[1].dur_ns(), 0);
}
