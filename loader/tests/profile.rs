//! The profiler wired into the loader, on real JPEGs (the decode corpus) through the real image
//! pipeline: the profile's spans and batch events agree with what the loader and the processor
//! measured themselves, the Chrome trace has every track, span, wait and flow, an injected slow
//! op is found, counters fall back to the software group, mode off records nothing, and profiles
//! survive a save and load.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use ferroloader_loader::profiler::trace::CONSUMER_TID;
use ferroloader_loader::profiler::{
    chrome_trace, now_ns, CounterKind, Mode, PipelineRecord, Profile, ProfilerConfig, SpanRecord,
    Summary, TraceOptions, CONSUMER,
};
use ferroloader_loader::transforms::spec::PipelineSpec;
use ferroloader_loader::transforms::Error as TransformError;
use ferroloader_loader::{
    BatchTiming, Delivery, ErrorPolicy, ImagePipeline, InMemory, Loader, LoaderOptions, Op,
    OpHooks, SampleKey, SampleLayout, SampleProcessor, SlotMut, Source,
};
use serde_json::Value;

const WORKERS: usize = 2;
const BATCH: usize = 4;
/// The ops a sample of the fused train pipeline reports, besides the `process` span around them
/// (`first_touch` only where its slot is in a batch buffer never used before).
const SAMPLE_OPS: [&str; 5] = ["first_touch", "read", "decode", "crop_params", "fused"];

use crate::fixtures;

fn corpus_dir() -> PathBuf {
    fixtures::fixture_dir("decode", "make fixtures")
}

/// The corpus' JPEGs (all but the huge one), sorted by name.
fn jpegs() -> Vec<Vec<u8>> {
    fixtures::small_corpus_jpegs()
        .iter()
        .map(|p| fs::read(p).expect("readable"))
        .collect()
}

fn dataset(files: &[Vec<u8>]) -> InMemory {
    InMemory::from_samples(files.iter().enumerate().map(|(i, f)| (f, (i % 3) as i64)))
}

fn train() -> ImagePipeline {
    ImagePipeline::new(PipelineSpec::imagenet_train(64)).expect("plans")
}

fn options(mode: Mode) -> LoaderOptions {
    LoaderOptions::default()
        .batch_size(BATCH)
        .num_workers(WORKERS)
        .prefetch_batches(2)
        .shuffle(true)
        .seed(11)
        .profile_mode(mode)
}

/// What the consumer saw of one delivered batch.
#[derive(Debug)]
struct Seen {
    id: u64,
    len: usize,
    wait: Duration,
    timing: BatchTiming,
    out_of_order: bool,
}

/// Runs `epochs` whole epochs and returns what the consumer saw.
fn run_epochs<P: SampleProcessor>(loader: &Loader<InMemory, P>, epochs: usize) -> Vec<Seen> {
    let mut seen = Vec::new();
    for _ in 0..epochs {
        for batch in loader.iter() {
            let batch = batch.expect("batch");
            seen.push(Seen {
                id: batch.batch_id(),
                len: batch.len(),
                wait: batch.wait(),
                timing: batch.timing(),
                out_of_order: batch.out_of_order(),
            });
        }
    }
    seen
}

fn spin_ns(ns: u64) -> u64 {
    let t0 = now_ns();
    let mut x = 0u64;
    while now_ns() - t0 < ns {
        x = std::hint::black_box(x.wrapping_add(1));
    }
    now_ns() - t0
}

/// The train pipeline plus a 2 ms busy op in a custom span after it, timing itself.
struct WithSlowOp {
    inner: ImagePipeline,
    spin_ns: u64,
    /// Per dataset index: the time spent spinning, measured inside the slow op's span, and the
    /// time of the whole `process` call, measured around it (outside every span).
    measured: Mutex<HashMap<u64, SelfTimed>>,
}

#[derive(Debug)]
struct SelfTimed {
    spun_ns: u64,
    process_ns: u64,
}

const SLOW_OP: &str = "slow_op";

impl SampleProcessor for WithSlowOp {
    type Scratch = <ImagePipeline as SampleProcessor>::Scratch;

    fn new_scratch(&self) -> Self::Scratch {
        self.inner.new_scratch()
    }

    fn sample_layout(&self) -> SampleLayout {
        self.inner.sample_layout()
    }

    fn process(
        &self,
        bytes: &[u8],
        key: SampleKey,
        scratch: &mut Self::Scratch,
        out: SlotMut<'_>,
        hooks: &mut dyn OpHooks,
    ) -> Result<(), TransformError> {
        let t0 = now_ns();
        let result = self.inner.process(bytes, key, scratch, out, hooks);
        hooks.enter(Op::Custom(SLOW_OP));
        let spun = spin_ns(self.spin_ns);
        hooks.exit(Op::Custom(SLOW_OP));
        let timed = SelfTimed {
            spun_ns: spun,
            process_ns: now_ns() - t0,
        };
        let mut measured = self.measured.lock().expect("not poisoned");
        assert!(measured.insert(key.index, timed).is_none(), "{key:?} twice");
        result
    }
}

/// Direct children of each top-level span, per worker (spans nest by time within a worker).
fn children<'a>(p: &'a PipelineRecord, parent: &SpanRecord) -> Vec<&'a SpanRecord> {
    p.spans
        .iter()
        .filter(|s| {
            s.worker == parent.worker
                && s.depth == parent.depth + 1
                && s.start_ns >= parent.start_ns
                && s.end_ns <= parent.end_ns
        })
        .collect()
}

fn sum_ns<'a>(spans: impl IntoIterator<Item = &'a SpanRecord>) -> u64 {
    spans.into_iter().map(SpanRecord::dur_ns).sum()
}

/// The spans of `spans` that `worker` recorded.
fn of_worker<'a>(spans: &[&'a SpanRecord], worker: u32) -> Vec<&'a SpanRecord> {
    spans
        .iter()
        .copied()
        .filter(|s| s.worker == worker)
        .collect()
}

/// The median over `samples` of the share of a sample's time its ops cover. A median, not a
/// total: a worker preempted between two ops (2 cores, tests side by side) leaves a gap in a
/// few samples, while an op the spans missed would leave one in every sample.
fn median_coverage(p: &PipelineRecord, samples: &[&SpanRecord]) -> f64 {
    median(
        samples
            .iter()
            .map(|s| sum_ns(children(p, s)) as f64 / s.dur_ns().max(1) as f64)
            .collect(),
    )
}

fn median(mut xs: Vec<f64>) -> f64 {
    assert!(!xs.is_empty());
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// Every sample is a `process` span on a worker holding its ops in order, with its batch and
/// dataset index; returns the process spans.
fn check_sample_spans<'a>(
    p: &'a PipelineRecord,
    samples: usize,
    extra_op: Option<&str>,
) -> Vec<&'a SpanRecord> {
    let process: Vec<&SpanRecord> = p.spans.iter().filter(|s| s.op == "process").collect();
    assert_eq!(process.len(), samples, "one process span per sample");
    for s in &process {
        assert_eq!(s.depth, 0);
        assert!((s.worker as usize) < WORKERS, "{s:?}");
        assert!(s.batch.is_some() && s.sample.is_some(), "{s:?}");
        let kids = children(p, s);
        let names: Vec<&str> = kids.iter().map(|k| k.op.as_str()).collect();
        // A slot of a new batch buffer has its pages touched before anything else.
        let names = names.strip_prefix(&["first_touch"][..]).unwrap_or(&names);
        assert_eq!(names.first(), Some(&"read"), "{names:?}");
        let last_transform = if extra_op.is_some() {
            names.len().checked_sub(2)
        } else {
            names.len().checked_sub(1)
        };
        assert_eq!(last_transform.map(|i| names[i]), Some("fused"), "{names:?}");
        if let Some(extra) = extra_op {
            assert_eq!(names.last(), Some(&extra), "{names:?}");
        }
        for k in &kids {
            assert_eq!((k.batch, k.sample), (s.batch, s.sample), "{k:?} in {s:?}");
            assert!(
                SAMPLE_OPS.contains(&k.op.as_str()) || Some(k.op.as_str()) == extra_op,
                "{k:?}"
            );
        }
    }
    process
}

#[test]
fn spans_mode_records_every_op_batch_event_wait_and_flow() {
    let files = jpegs();
    let n = files.len();
    let loader = Loader::new(dataset(&files), train(), options(Mode::Spans)).expect("loader");
    let seen = run_epochs(&loader, 2);
    let profile = loader.profile();
    assert_eq!(profile.pipelines.len(), 1);
    let p = &profile.pipelines[0];
    assert_eq!((p.label.as_str(), p.mode), ("native", Mode::Spans));
    assert_eq!(
        (p.num_workers, p.batch_size),
        (WORKERS as u32, BATCH as u32)
    );
    assert_eq!(
        p.stats.unflushed_recorders, 0,
        "every recorder was handed in"
    );
    assert_eq!(p.stats.dropped_spans + p.stats.unbalanced_exits, 0);
    assert_eq!(
        p.meta.get("loader.delivery").map(String::as_str),
        Some("in_order")
    );
    assert!(p.failures.is_empty());

    // Spans: a process span per sample around its ops; a collate span per batch.
    let process = check_sample_spans(p, 2 * n, None);
    let per_epoch = n.div_ceil(BATCH);
    // Pages are touched once per buffer: the first batch's slots, and at most the slots of the
    // ring's buffers (2 batches in flight, 2 the consumer may hold), whatever the epochs.
    let touched = p.spans.iter().filter(|s| s.op == "first_touch").count();
    assert!(
        (BATCH..=4 * BATCH).contains(&touched),
        "{touched} first touches"
    );
    let collate: Vec<&SpanRecord> = p.spans.iter().filter(|s| s.op == "collate").collect();
    assert_eq!(collate.len(), 2 * per_epoch);
    assert!(collate
        .iter()
        .all(|s| s.worker == CONSUMER && s.sample.is_none()));
    // Samples are dataset indices, each once per epoch; batch numbers run on across epochs.
    let mut per_sample: BTreeMap<u64, usize> = BTreeMap::new();
    for s in &process {
        *per_sample.entry(s.sample.expect("sample")).or_default() += 1;
    }
    assert_eq!(per_sample.len(), n);
    assert!(per_sample.values().all(|&c| c == 2));
    let span_batches: BTreeSet<u64> = process.iter().filter_map(|s| s.batch).collect();
    assert_eq!(span_batches, (0..2 * per_epoch as u64).collect());

    // Batch events agree with what the consumer saw, on the same clock.
    assert_eq!(seen.len(), 2 * per_epoch);
    assert_eq!(p.batches.len(), seen.len());
    let records: HashMap<u64, _> = p.batches.iter().map(|b| (b.batch, b)).collect();
    for s in &seen {
        let r = records.get(&s.id).expect("a record per delivered batch");
        assert_eq!(r.size, Some(s.len as u32));
        assert_eq!(r.planned_ns, Some(s.timing.planned_ns));
        assert_eq!(r.first_started_ns, s.timing.started_ns);
        assert_eq!(r.completed_ns, s.timing.completed_ns);
        assert_eq!(r.delivered_ns, s.timing.delivered_ns);
        assert_eq!(r.wait_ns, Some(s.wait.as_nanos() as u64));
        assert!(r.completed_by.is_some_and(|w| (w as usize) < WORKERS));
        let q = r.queue_occupancy.expect("queue occupancy");
        assert!((1..=3).contains(&q), "{q} ready with a window of 2");
        let (planned, started) = (r.planned_ns.unwrap_or(0), r.first_started_ns.unwrap_or(0));
        let (completed, delivered) = (r.completed_ns.unwrap_or(0), r.delivered_ns.unwrap_or(0));
        assert!(
            planned <= started && started <= completed && completed <= delivered,
            "{r:?}"
        );
        assert!(!s.out_of_order);
        // The batch's samples ran between its first start and its completion.
        for sp in process.iter().filter(|sp| sp.batch == Some(s.id)) {
            assert!(
                sp.start_ns >= started && sp.end_ns <= completed,
                "{sp:?} in {r:?}"
            );
        }
    }
    assert!(p.start_ns <= seen[0].timing.planned_ns);
    assert!(p.end_ns >= seen[seen.len() - 1].timing.delivered_ns.unwrap_or(u64::MAX));

    // The summary agrees with the events.
    let summary = Summary::from_profile(&profile);
    println!("{}", summary.render_table());
    let ps = &summary.pipelines[0];
    assert_eq!(ps.images, 2 * n as u64);
    assert_eq!(ps.batches, seen.len() as u64);
    let waits: u64 = p.batches.iter().filter_map(|b| b.wait_ns).sum();
    assert_eq!(ps.consumer_wait_ns, waits);
    assert_eq!(ps.workers.len(), WORKERS, "the consumer is not a worker");
    for w in &ps.workers {
        let own = of_worker(&process, w.worker);
        assert_eq!(
            w.busy_ns,
            sum_ns(own.iter().copied()),
            "busy time is the process spans"
        );
        // The ops cover the sample time: what is left is the loader's own glue. Asserted on
        // the median sample; the worker's total is printed (99.8% on a quiet machine), not
        // asserted: one preemption between two ops, with the other tests of this file running
        // on the same 2 cores, took it to 93%.
        let covered = median_coverage(p, &own);
        assert!(
            covered > 0.98,
            "worker {}: ops cover {covered} of the median sample",
            w.worker
        );
        let ops: u64 = own.iter().map(|s| sum_ns(children(p, s))).sum();
        let total = ops as f64 / w.busy_ns.max(1) as f64;
        eprintln!("worker {}: ops cover {total:.4} of the busy time", w.worker);
    }
    for op in ["process", "read", "crop_params", "fused"] {
        assert_eq!(ps.op(op).map(|o| o.count), Some(2 * n as u64), "{op}");
    }
    let shares: f64 = ps.ops.iter().map(|o| o.share).sum();
    assert!(
        (shares - 1.0).abs() < 1e-9,
        "worker self shares add up to 1"
    );
    let collate_summary = ps
        .consumer_ops
        .iter()
        .find(|o| o.op == "collate")
        .expect("collate");
    assert_eq!(collate_summary.count, collate.len() as u64);

    // The Chrome trace: a track per worker and the consumer's, every span, wait and flow.
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("trace.json");
    chrome_trace(&profile, &TraceOptions::default())
        .save(&path)
        .expect("save trace");
    let v: Value = serde_json::from_str(&fs::read_to_string(&path).expect("read")).expect("JSON");
    let evs = v["traceEvents"].as_array().expect("traceEvents");
    let tid = |e: &Value| e["tid"].as_u64().expect("tid");
    let threads: BTreeMap<u64, &str> = evs
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
        .map(|e| (tid(e), e["args"]["name"].as_str().expect("name")))
        .collect();
    let expected: BTreeMap<u64, &str> =
        [(0, "worker-0"), (1, "worker-1"), (CONSUMER_TID, "consumer")].into();
    assert_eq!(threads, expected);
    let op_events: Vec<&Value> = evs
        .iter()
        .filter(|e| e["ph"] == "X" && e["cat"] == "op")
        .collect();
    assert_eq!(op_events.len(), p.spans.len());
    for e in &op_events {
        let name = e["name"].as_str().expect("name");
        if tid(e) == CONSUMER_TID {
            assert_eq!(name, "collate");
        } else {
            assert!(tid(e) < WORKERS as u64);
            assert!(name == "process" || SAMPLE_OPS.contains(&name), "{name}");
            assert!(e["args"]["sample"].is_u64() && e["args"]["batch"].is_u64());
        }
        assert!(e["dur"].as_f64().is_some_and(|d| d >= 0.0));
    }
    let waits: Vec<&Value> = evs.iter().filter(|e| e["cat"] == "wait").collect();
    assert_eq!(waits.len(), seen.len());
    for w in &waits {
        assert_eq!(tid(w), CONSUMER_TID);
        let b = w["args"]["batch"].as_u64().expect("batch");
        assert_eq!(w["args"]["wait_ns"].as_u64(), records[&b].wait_ns);
    }
    let flows = |ph: &str| -> BTreeMap<u64, &Value> {
        evs.iter()
            .filter(|e| e["ph"] == ph)
            .map(|e| (e["id"].as_u64().expect("flow id"), e))
            .collect()
    };
    let (starts, ends) = (flows("s"), flows("f"));
    assert_eq!(starts.len(), seen.len(), "a flow arrow per batch");
    assert_eq!(
        starts.keys().collect::<Vec<_>>(),
        ends.keys().collect::<Vec<_>>()
    );
    for (id, s) in &starts {
        assert!(
            tid(s) < WORKERS as u64,
            "arrows start on the worker that completed the batch"
        );
        assert_eq!(tid(ends[id]), CONSUMER_TID);
        assert_eq!(s["args"]["batch"], ends[id]["args"]["batch"]);
    }
    let occupancy = evs.iter().filter(|e| e["ph"] == "C").count();
    assert_eq!(occupancy, seen.len());
}

#[test]
fn an_injected_2ms_op_is_found_and_its_time_attributed() {
    let files = jpegs();
    let n = files.len() as u64;
    let proc_ = WithSlowOp {
        inner: train(),
        spin_ns: 2_000_000,
        measured: Mutex::new(HashMap::new()),
    };
    let loader = Loader::new(dataset(&files), proc_, options(Mode::Spans)).expect("loader");
    run_epochs(&loader, 1);
    let profile = loader.profile();
    let p = &profile.pipelines[0];
    let process = check_sample_spans(p, n as usize, Some(SLOW_OP));
    let summary = Summary::from_profile(&profile);
    println!("{}", summary.render_table());
    let ps = &summary.pipelines[0];

    // Ranked first, counted once per sample.
    assert_eq!(ps.ops[0].op, SLOW_OP);
    assert_eq!(ps.bottleneck.as_deref(), Some(SLOW_OP));
    let slow = ps.op(SLOW_OP).expect("slow op");
    assert_eq!(slow.count, n);
    assert!(slow.p50_ns >= 2_000_000 && slow.total_ns >= 2_000_000 * n);

    // Sample by sample, against what the processor timed itself. Each slow-op span holds its
    // spin, and `process` holds its ops. The excess is compared as a median, not summed: a
    // worker preempted between a span's edge and the processor's own clock read (2 cores, tests
    // side by side) adds milliseconds to a few samples, while an op the spans misplaced or
    // missed would be off in every sample.
    // The epoch is over: no worker holds the lock any more, so the guard is read in place.
    let measured = loader.processor().measured.lock().expect("not poisoned");
    assert_eq!(measured.len() as u64, n, "every sample timed itself once");
    let mut slow_excess = Vec::new();
    let mut ops_gap = Vec::new();
    for s in &process {
        let index = s.sample.expect("a sample's dataset index");
        let own = &measured[&index];
        let kids = children(p, s);
        let [spun_span] = kids.iter().filter(|k| k.op == SLOW_OP).collect::<Vec<_>>()[..] else {
            panic!("one slow op in {s:?}");
        };
        assert!(
            spun_span.dur_ns() >= own.spun_ns,
            "sample {index}: span {spun_span:?} shorter than its {} ns spin",
            own.spun_ns
        );
        slow_excess.push((spun_span.dur_ns() - own.spun_ns) as f64 / own.spun_ns as f64);
        // `first_touch` and `read` run before `process` is called, so the processor's clock
        // cannot see them.
        let inside = sum_ns(
            kids.into_iter()
                .filter(|k| k.op != "read" && k.op != "first_touch"),
        );
        assert!(
            inside <= own.process_ns,
            "sample {index}: ops {inside} ns outlast the {} ns process call",
            own.process_ns
        );
        ops_gap.push((own.process_ns - inside) as f64 / own.process_ns as f64);
    }
    let (slow_excess, ops_gap) = (median(slow_excess), median(ops_gap));
    assert!(
        slow_excess < 0.01,
        "median slow-op span over its spin: {slow_excess}"
    );
    assert!(
        ops_gap < 0.02,
        "median process time outside the ops: {ops_gap}"
    );

    // All the ops of a sample cover its `process` span, per worker and for the median sample.
    let covered = median_coverage(p, &process);
    assert!(covered > 0.98, "median sample coverage {covered}");
    for w in &ps.workers {
        let own = of_worker(&process, w.worker);
        let covered = median_coverage(p, &own);
        assert!(
            (0.98..=1.0).contains(&covered),
            "worker {}: ops cover {covered} of the median sample",
            w.worker
        );
    }
}

#[test]
fn counters_mode_counts_software_events_and_says_why_hardware_is_missing() {
    let files = jpegs();
    let n = files.len();
    let loader = Loader::new(dataset(&files), train(), options(Mode::Counters)).expect("loader");
    run_epochs(&loader, 1);
    let probe = loader
        .profiler()
        .counters()
        .expect("probed in counters mode")
        .clone();
    let profile = loader.profile();
    let p = &profile.pipelines[0];
    assert_eq!(p.mode, Mode::Counters);
    eprintln!(
        "hardware: {} {:?}\nsoftware: {} {:?}\nperf_event_paranoid {:?}",
        p.counters.hardware.available,
        p.counters.hardware.reason,
        p.counters.software.available,
        p.counters.software.reason,
        p.counters.perf_event_paranoid
    );
    assert_eq!(p.counters, probe, "the profile reports the probe");
    for g in [&p.counters.hardware, &p.counters.software] {
        if !g.available {
            assert!(g.reason.as_deref().is_some_and(|r| !r.is_empty()), "{g:?}");
        }
    }
    // Nothing failed for want of counters: every span is there.
    let process = check_sample_spans(p, n, None);
    assert_eq!(p.stats.counter_read_errors, 0);
    let workers: Vec<_> = p.threads.iter().filter(|t| t.worker != CONSUMER).collect();
    assert_eq!(workers.len(), WORKERS);

    let software = workers
        .iter()
        .all(|t| t.counters.as_ref().is_some_and(|c| c.software.available));
    let summary = Summary::from_profile(&profile);
    println!("{}", summary.render_table());
    let ps = &summary.pipelines[0];
    if !software {
        eprintln!("software counters unavailable here: only their absence is checked");
        assert!(process
            .iter()
            .all(|s| s.counters.as_ref().and_then(|c| c.task_clock).is_none()));
        return;
    }
    assert!(ps.counters_available.contains(&CounterKind::TaskClock));
    assert_eq!(ps.cpu_time_source, "task_clock");
    // CPU time of the thread within a span is at most the span, summed over every worker span
    // (10% slack for the clock and counter reads being a few instructions apart), and span by
    // span for all but a few: the kernel's task clock was seen to credit up to 137 us to one
    // 0.5 us span once in ~25 runs, while a span counting another thread's time, or a parent's,
    // would be off in every sample.
    let (mut tc_sum, mut dur_sum, mut over) = (0u64, 0u64, Vec::new());
    for s in p.spans.iter().filter(|s| s.worker != CONSUMER) {
        let c = s.counters.as_ref().expect("worker spans carry counters");
        let tc = c.task_clock.expect("task clock");
        tc_sum += tc;
        dur_sum += s.dur_ns();
        if tc > s.dur_ns() + s.dur_ns() / 10 + 20_000 {
            over.push(s);
        }
        assert!(c.page_faults.is_some() && c.context_switches.is_some());
        if !p.counters.hardware.available {
            assert!(c.cycles.is_none() && c.instructions.is_none());
        }
    }
    assert!(
        tc_sum <= dur_sum + dur_sum / 10,
        "{tc_sum} ns of CPU in {dur_sum} ns of spans"
    );
    assert!(over.len() <= p.spans.len() / 100 + 1, "{over:#?}");
    // Counts nest: a sample's process span counted at least what its ops counted.
    for s in &process {
        let tc = |s: &SpanRecord| s.counters.as_ref().and_then(|c| c.task_clock).unwrap_or(0);
        let ops: u64 = children(p, s).into_iter().map(tc).sum();
        assert!(
            tc(s) >= ops,
            "{} ns in the sample, {ops} ns in its ops",
            tc(s)
        );
    }
    let fused = ps.op("fused").expect("fused");
    assert!(fused.derived.task_clock_ns_per_op.is_some_and(|t| t > 0.0));
    assert!(fused.derived.page_faults_per_op.is_some());
}

#[test]
fn mode_off_records_nothing() {
    let files = jpegs();
    let loader = Loader::new(dataset(&files), train(), options(Mode::Off)).expect("loader");
    assert!(!loader.profiler().is_enabled());
    let seen = run_epochs(&loader, 2);
    let profile = loader.profile();
    let p = &profile.pipelines[0];
    assert_eq!(p.mode, Mode::Off);
    assert!(p.spans.is_empty() && p.batches.is_empty() && p.failures.is_empty());
    assert!(p.threads.is_empty(), "no recorder was made");
    // Batch numbers and timings are kept all the same.
    let ids: Vec<u64> = seen.iter().map(|s| s.id).collect();
    assert_eq!(ids, (0..seen.len() as u64).collect::<Vec<_>>());
    assert!(seen.iter().all(|s| s.timing.delivered_ns.is_some()));
}

#[test]
fn profiles_round_trip_and_accumulate_until_taken() {
    let files = jpegs();
    let n = files.len();
    let loader = Loader::new(dataset(&files), train(), options(Mode::Spans))
        .expect("loader")
        .with_profiler(
            ProfilerConfig::new(Mode::Spans)
                .label("roundtrip")
                .meta("dataset", "decode corpus"),
        );
    run_epochs(&loader, 1);
    let first = loader.profile();
    run_epochs(&loader, 1);
    let both = loader.profile();
    let (a, b) = (&first.pipelines[0], &both.pipelines[0]);
    assert_eq!(b.label, "roundtrip");
    assert_eq!(
        b.meta.get("dataset").map(String::as_str),
        Some("decode corpus")
    );
    assert_eq!(b.meta.get("loader.samples"), Some(&n.to_string()));
    assert_eq!(b.num_workers, WORKERS as u32);
    // Every span twice, but the first touches of new buffers: mostly in the first epoch.
    let untouched = |p: &PipelineRecord| p.spans.iter().filter(|s| s.op != "first_touch").count();
    assert_eq!(
        untouched(b),
        2 * untouched(a),
        "the second call adds to the first"
    );
    assert_eq!(b.batches.len(), 2 * a.batches.len());
    assert_eq!(&b.spans[..a.spans.len()], &a.spans[..]);
    assert_eq!(b.start_ns, a.start_ns);
    assert!(b.end_ns > a.end_ns);

    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("profile.json");
    both.save(&path).expect("save");
    let loaded = Profile::load(&path).expect("load");
    assert_eq!(loaded, both);
    assert_eq!(Summary::from_profile(&loaded), Summary::from_profile(&both));

    let taken = loader.take_profile();
    assert_eq!(taken, both, "nothing ran since");
    let empty = loader.profile();
    assert!(empty.pipelines[0].spans.is_empty() && empty.pipelines[0].batches.is_empty());
    run_epochs(&loader, 1);
    let after = loader.profile();
    assert_eq!(untouched(&after.pipelines[0]), untouched(a));
    let first_id = after.pipelines[0].batches.first().map(|r| r.batch);
    assert_eq!(
        first_id,
        Some(2 * n.div_ceil(BATCH) as u64),
        "numbers go on"
    );
}

#[test]
fn skipped_samples_are_recorded_with_their_cause() {
    let mut files = jpegs();
    let bad = fs::read(corpus_dir().join("bad_jpeg_corrupt_dht.jpg")).expect("bad file");
    files.insert(5, bad);
    let n = files.len();
    let loader = Loader::new(
        dataset(&files),
        train(),
        options(Mode::Spans)
            .shuffle(false)
            .on_error(ErrorPolicy::Skip),
    )
    .expect("loader");
    let mut iter = loader.iter();
    let mut delivered = 0;
    for batch in iter.by_ref() {
        delivered += batch.expect("skipped, not raised").len();
    }
    assert_eq!(delivered, n - 1);
    let skipped: Vec<String> = iter.skipped().iter().map(|s| s.error.to_string()).collect();
    assert_eq!(skipped.len(), 1);
    drop(iter);
    let profile = loader.profile();
    let p = &profile.pipelines[0];
    assert_eq!(
        p.meta.get("loader.on_error").map(String::as_str),
        Some("skip")
    );
    assert_eq!(p.failures.len(), 1);
    let f = &p.failures[0];
    assert_eq!(f.cause, skipped[0]);
    assert_eq!(f.sample, Some(5));
    assert_eq!(f.batch, Some(1), "sample 5 is in batch 1");
    assert!(f.worker.is_some_and(|w| (w as usize) < WORKERS));
    assert_eq!(f.op.as_deref(), Some("decode"), "{f:?}");
    // Batch sizes are what the consumer got, so the summary counts the images delivered.
    let sizes: u32 = p
        .batches
        .iter()
        .filter(|b| b.delivered_ns.is_some())
        .filter_map(|b| b.size)
        .sum();
    assert_eq!(sizes as usize, n - 1);
    assert_eq!(
        Summary::from_profile(&profile).pipelines[0].images,
        (n - 1) as u64
    );
    assert_eq!(Summary::from_profile(&profile).pipelines[0].failures, 1);
    // The failed sample's spans are closed like any other.
    assert_eq!(p.stats.unbalanced_exits, 0);
    assert_eq!(p.spans.iter().filter(|s| s.op == "process").count(), n);
}

#[test]
fn completion_order_deliveries_carry_the_out_of_order_flag() {
    let files = jpegs();
    let loader = Loader::new(
        dataset(&files),
        train(),
        options(Mode::Spans)
            .delivery(Delivery::CompletionOrder)
            .prefetch_batches(4),
    )
    .expect("loader");
    let seen = run_epochs(&loader, 2);
    let profile = loader.profile();
    let records: HashMap<u64, _> = profile.pipelines[0]
        .batches
        .iter()
        .map(|b| (b.batch, b))
        .collect();
    assert_eq!(records.len(), seen.len());
    for s in &seen {
        let r = records[&s.id];
        if s.out_of_order {
            assert!(r.out_of_order, "{r:?}");
        }
        assert_eq!(r.delivered_ns, s.timing.delivered_ns);
    }
    let summary = Summary::from_profile(&profile);
    let share = seen.iter().filter(|s| s.out_of_order).count() as f64 / seen.len() as f64;
    assert!(summary.pipelines[0].out_of_order_share >= share);
    // Every sample of every batch still ran once per epoch.
    let total: usize = seen.iter().map(|s| s.len).sum();
    assert_eq!(total, 2 * files.len());
    let source_len = loader.source().len();
    assert_eq!(source_len, files.len());
}

#[test]
fn pixel_ops_are_profiled_as_their_own_spans() {
    use ferroloader_loader::transforms::spec::{JitterArg, OpSpec};
    let files = jpegs();
    let n = files.len() as u64;
    let mut spec = PipelineSpec::imagenet_train(64);
    spec.ops.insert(
        2,
        OpSpec::ColorJitter {
            brightness: JitterArg::Number(0.4),
            contrast: JitterArg::Number(0.4),
            saturation: JitterArg::Number(0.4),
            hue: JitterArg::Number(0.1),
        },
    );
    spec.ops.insert(3, OpSpec::RandomInvert { p: 0.5 });
    let pipeline = ImagePipeline::new(spec).expect("plans");
    let loader = Loader::new(dataset(&files), pipeline, options(Mode::Spans)).expect("loader");
    run_epochs(&loader, 1);
    let summary = Summary::from_profile(&loader.profile());
    let ps = &summary.pipelines[0];
    // Staged: the crop + resize into the u8 image, each pixel op, the conversion; no fused pass.
    for op in [
        "decode",
        "crop_params",
        "resize",
        "ColorJitter",
        "RandomInvert",
        "to_tensor",
    ] {
        assert_eq!(ps.op(op).map(|o| o.count), Some(n), "{op}");
    }
    assert!(ps.op("fused").is_none());
}
