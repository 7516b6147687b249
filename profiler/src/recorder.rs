//! Recording: the shared [`Profiler`], one [`ThreadRecorder`] per worker thread, batch events.
//!
//! The hot path is `enter`/`exit` on a thread's own recorder: two clock reads (plus one counter
//! group read per group in [`Mode::Counters`]) and a push into a preallocated chunk. A chunk goes
//! to the shared collector only when it is full or the recorder is flushed or dropped, through a
//! lock-free channel (so a worker preempted mid-hand-off cannot stall the others), and a fresh
//! chunk is allocated: one allocation per few thousand spans, no lock, allocation or I/O per
//! span. In [`Mode::Off`] a recorder holds no buffers and every call is one branch.
//!
//! Batch events, failures and setup calls (registering ops, creating recorders) take a lock:
//! they happen per batch or per thread, not per op. This module must not know what an op does.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};

use crate::clock::now_ns;
use crate::counters::{
    CounterArray, CounterAvailability, CounterConfig, CounterDeltas, CounterSet,
};
use crate::error::ProfilerError;
use crate::ops::{OpId, OpTable};
use crate::schema::{
    BatchRecord, Mode, Pipeline, PipelineStats, Profile, SampleFailure, SpanRecord, ThreadInfo,
    ThreadStats,
};

/// Sentinel of [`RawSpan::batch`] and [`RawSpan::sample`]: no sample context was set.
pub const NO_INDEX: u64 = u64::MAX;

/// Worker number of the spans the consumer thread ran ([`Profiler::consumer_span`]: batch
/// assembly on the consumer side). They go on the consumer's trace track and are not counted as
/// worker time in summaries.
pub const CONSUMER: u32 = u32::MAX;

/// Worker number of the spans of I/O threads ([`Profiler::io_span`]: a dataset fetching its
/// data, such as a shard request). They are not counted as worker time in summaries (the
/// workers' waiting for them is).
pub const IO: u32 = u32::MAX - 1;

/// Spans in a recorder's first chunk at most; each later chunk doubles, up to
/// [`ProfilerConfig::chunk_capacity`]. Chunks are faulted in when made (about 3 us a page on
/// some machines), so a recorder that lives briefly (a worker of a short epoch) must not pay for
/// a full-size chunk it will not fill.
pub const FIRST_CHUNK: usize = 256;

/// Default of [`ProfilerConfig::counter_reuse_ns`]: a counter group read costs about 0.5-1 us
/// (a system call), so boundaries within 1 us of the last read share it.
pub const COUNTER_REUSE_NS: u64 = 1_000;

/// Deepest span nesting a recorder tracks; deeper spans are counted as dropped, not recorded.
pub const MAX_DEPTH: usize = 16;

/// Settings of a [`Profiler`]. Chain the setters from [`ProfilerConfig::new`].
#[derive(Clone, Debug)]
pub struct ProfilerConfig {
    /// What to record. Default: [`Mode::Off`].
    pub mode: Mode,
    /// Pipeline label (one trace process per label). Default: `"native"`.
    pub label: String,
    /// Number of worker threads, for the run metadata. Default: 0.
    pub num_workers: u32,
    /// Samples per batch, for the run metadata. Default: 0.
    pub batch_size: u32,
    /// Spans per chunk handed to the collector (one channel send and one allocation per chunk).
    /// A recorder's first chunk holds at most [`FIRST_CHUNK`] spans and each next one twice as
    /// many, up to this. Default: 4096.
    pub chunk_capacity: usize,
    /// Spans kept at most; later chunks are dropped and counted (bounds memory on long runs:
    /// 40 bytes a span, 136 with counters). Default: 8,000,000.
    pub max_spans: usize,
    /// Which counter groups to open in [`Mode::Counters`]. Default: both.
    pub counters: CounterConfig,
    /// In [`Mode::Counters`], an op boundary this soon (ns) after the last counter read reuses
    /// that read instead of making another: back-to-back boundaries (one op's exit and the
    /// next one's enter, a child's exit and its parent's) cost one read, not two. What the
    /// thread does in between (at most this long) is counted in the span that starts, or, after
    /// an exit, in the enclosing one. A span always reads at its exit unless a nested span's
    /// exit just did, so no span is left with zero counts by reuse. 0 reads at every boundary.
    /// Default: [`COUNTER_REUSE_NS`].
    pub counter_reuse_ns: u64,
    /// Free-form run metadata. Default: empty.
    pub meta: BTreeMap<String, String>,
    /// Also emit a `tracing` span per op span. Default: false.
    #[cfg(feature = "tracing")]
    pub emit_tracing: bool,
}

impl Default for ProfilerConfig {
    fn default() -> Self {
        ProfilerConfig {
            mode: Mode::Off,
            label: "native".into(),
            num_workers: 0,
            batch_size: 0,
            chunk_capacity: 4096,
            max_spans: 8_000_000,
            counters: CounterConfig::default(),
            counter_reuse_ns: COUNTER_REUSE_NS,
            meta: BTreeMap::new(),
            #[cfg(feature = "tracing")]
            emit_tracing: false,
        }
    }
}

impl ProfilerConfig {
    /// Defaults with `mode`.
    pub fn new(mode: Mode) -> Self {
        ProfilerConfig {
            mode,
            ..Default::default()
        }
    }

    /// Sets the pipeline label.
    pub fn label(mut self, label: impl Into<String>) -> Self {
        self.label = label.into();
        self
    }

    /// Sets the number of workers (metadata).
    pub fn num_workers(mut self, n: u32) -> Self {
        self.num_workers = n;
        self
    }

    /// Sets the batch size (metadata).
    pub fn batch_size(mut self, n: u32) -> Self {
        self.batch_size = n;
        self
    }

    /// Sets the chunk capacity (at least 1).
    pub fn chunk_capacity(mut self, n: usize) -> Self {
        self.chunk_capacity = n.max(1);
        self
    }

    /// Sets the most spans kept.
    pub fn max_spans(mut self, n: usize) -> Self {
        self.max_spans = n;
        self
    }

    /// Chooses the counter groups.
    pub fn counters(mut self, counters: CounterConfig) -> Self {
        self.counters = counters;
        self
    }

    /// Sets how soon after a counter read a boundary reuses it (0: never).
    pub fn counter_reuse_ns(mut self, ns: u64) -> Self {
        self.counter_reuse_ns = ns;
        self
    }

    /// Adds a metadata entry.
    pub fn meta(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.meta.insert(key.into(), value.into());
        self
    }

    /// Emits `tracing` spans for ops too.
    #[cfg(feature = "tracing")]
    pub fn emit_tracing(mut self, on: bool) -> Self {
        self.emit_tracing = on;
        self
    }
}

/// One op span as recorded on the hot path (ids, not names). Handed to [`Sink`]s.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawSpan {
    /// Start, `CLOCK_MONOTONIC` ns.
    pub start_ns: u64,
    /// End.
    pub end_ns: u64,
    /// Batch, or [`NO_INDEX`].
    pub batch: u64,
    /// Sample, or [`NO_INDEX`].
    pub sample: u64,
    /// The op.
    pub op: OpId,
    /// Nesting level (0: top level).
    pub depth: u8,
}

impl Default for RawSpan {
    fn default() -> Self {
        RawSpan {
            start_ns: 0,
            end_ns: 0,
            batch: NO_INDEX,
            sample: NO_INDEX,
            op: OpId(0),
            depth: 0,
        }
    }
}

/// An event in the life of a batch, recorded by the loader's coordinator, workers or consumer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BatchEvent {
    /// The sampler planned the batch.
    Planned {
        /// Samples in it.
        size: u32,
    },
    /// A worker started the batch's first sample (the earliest of several is kept).
    FirstSampleStarted {
        /// That worker.
        worker: u32,
    },
    /// The batch's last sample finished.
    Completed {
        /// The worker that finished it, if one did.
        worker: Option<u32>,
    },
    /// The consumer received the batch.
    Delivered(Arrival),
}

/// How a batch reached the consumer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Arrival {
    /// How long `next()` blocked waiting for it.
    pub wait_ns: u64,
    /// It was not the oldest outstanding batch when it completed (or was delivered out of order).
    pub out_of_order: bool,
    /// Completed batches waiting in the queue at delivery, this one included.
    pub queue_occupancy: u32,
}

/// Receives recorded data as it reaches the collector, off the hot path (once per chunk, batch
/// event or failure), for live monitoring or streaming. Every hook defaults to doing nothing.
/// Hooks run on the recording thread: keep them short.
pub trait Sink: Send + Sync + 'static {
    /// A chunk of spans of `worker`; `counters` is empty or holds raw deltas parallel to `spans`
    /// (indexed by [`CounterKind::index`](crate::CounterKind::index)).
    fn on_spans(&self, _worker: u32, _spans: &[RawSpan], _counters: &[CounterArray]) {}
    /// A batch event at `t_ns`.
    fn on_batch_event(&self, _batch: u64, _t_ns: u64, _event: &BatchEvent) {}
    /// A failed or skipped sample.
    fn on_failure(&self, _failure: &SampleFailure) {}
}

/// Spans of one thread, handed over whole.
struct Chunk {
    thread: usize,
    spans: Vec<RawSpan>,
    counters: Vec<CounterArray>,
}

impl Chunk {
    /// A chunk whose memory is already faulted in, so the page faults of filling it do not land
    /// inside (and inflate the page-fault counts of) the ops being measured.
    fn new(thread: usize, capacity: usize, with_counters: bool) -> Self {
        let mut spans = Vec::with_capacity(capacity);
        spans.resize(capacity, RawSpan::default());
        spans.clear();
        let mut counters = Vec::new();
        if with_counters {
            counters.reserve_exact(capacity);
            counters.resize(capacity, [0u64; crate::counters::NUM_COUNTERS]);
            counters.clear();
        }
        Chunk {
            thread,
            spans,
            counters,
        }
    }
}

struct ThreadEntry {
    info: ThreadInfo,
    mask: u16,
}

#[derive(Default)]
struct Events {
    batches: Vec<(u64, u64, BatchEvent)>,
    failures: Vec<SampleFailure>,
    /// Spans of the consumer thread ([`Profiler::consumer_span`]).
    consumer_spans: Vec<RawSpan>,
    /// Spans of I/O threads and the bytes each moved ([`Profiler::io_span`]).
    io_spans: Vec<(RawSpan, u64)>,
    /// Whether the I/O track is listed among the threads.
    io_thread_listed: bool,
}

struct Shared {
    config: ProfilerConfig,
    pid: u32,
    start_ns: AtomicU64,
    /// 0 while the run goes on.
    end_ns: AtomicU64,
    ops: RwLock<OpTable>,
    /// Worker threads, in creation order (a chunk refers to its thread by index).
    threads: Mutex<Vec<ThreadEntry>>,
    /// Full chunks; `Sender` is `Sync`, and sending never blocks or takes a lock.
    chunk_tx: Sender<Chunk>,
    /// Drained by `finish` only.
    chunk_rx: Mutex<Receiver<Chunk>>,
    /// Spans sent and not yet collected, against `max_spans`.
    stored_spans: AtomicUsize,
    /// Spans dropped because `max_spans` was reached.
    dropped_spans: AtomicU64,
    events: Mutex<Events>,
    /// Counters the constructing thread could open (Counters mode only).
    probe: Option<CounterAvailability>,
    sinks: RwLock<Vec<Arc<dyn Sink>>>,
    live_recorders: AtomicUsize,
}

/// Poisoning only means another thread panicked while recording; the data is still consistent
/// enough to report, and a profiler must not turn one panic into many.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    fn sinks(&self) -> Vec<Arc<dyn Sink>> {
        self.sinks
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn has_sinks(&self) -> bool {
        !self
            .sinks
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .is_empty()
    }
}

/// The shared profiler of one run: cheap to clone (an `Arc`), `Send + Sync`.
///
/// Make one per pipeline run, a [`ThreadRecorder`] per worker thread with [`Profiler::thread`],
/// record batch events from the coordinator and consumer, then [`Profiler::finish`] to get the
/// [`Profile`].
#[derive(Clone)]
pub struct Profiler {
    shared: Arc<Shared>,
}

impl fmt::Debug for Profiler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Profiler")
            .field("label", &self.shared.config.label)
            .field("mode", &self.shared.config.mode)
            .finish_non_exhaustive()
    }
}

impl Profiler {
    /// A profiler; the run starts now (see [`Profiler::start`]). In [`Mode::Counters`] it probes
    /// which counters this machine offers (on the calling thread) for [`Profiler::counters`].
    pub fn new(config: ProfilerConfig) -> Self {
        let probe = (config.mode == Mode::Counters).then(|| CounterSet::open(config.counters).1);
        let (chunk_tx, chunk_rx) = channel();
        Profiler {
            shared: Arc::new(Shared {
                pid: std::process::id(),
                start_ns: AtomicU64::new(now_ns()),
                end_ns: AtomicU64::new(0),
                ops: RwLock::new(OpTable::new()),
                threads: Mutex::new(Vec::new()),
                chunk_tx,
                chunk_rx: Mutex::new(chunk_rx),
                stored_spans: AtomicUsize::new(0),
                dropped_spans: AtomicU64::new(0),
                events: Mutex::new(Events::default()),
                probe,
                sinks: RwLock::new(Vec::new()),
                live_recorders: AtomicUsize::new(0),
                config,
            }),
        }
    }

    /// A profiler that records nothing.
    pub fn off() -> Self {
        Profiler::new(ProfilerConfig::new(Mode::Off))
    }

    /// What it records.
    pub fn mode(&self) -> Mode {
        self.shared.config.mode
    }

    /// Whether it records anything.
    #[inline]
    pub fn is_enabled(&self) -> bool {
        self.shared.config.mode != Mode::Off
    }

    /// The pipeline label.
    pub fn label(&self) -> &str {
        &self.shared.config.label
    }

    /// Which counters could be opened on the thread that made the profiler ([`Mode::Counters`]
    /// only), with the reasons for those that could not.
    pub fn counters(&self) -> Option<&CounterAvailability> {
        self.shared.probe.as_ref()
    }

    /// The id of op `name`, registering it if new. Call at setup; takes a lock.
    pub fn register_op(&self, name: &str) -> Result<OpId, ProfilerError> {
        if let Some(id) = self
            .shared
            .ops
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .lookup(name)
        {
            return Ok(id);
        }
        self.shared
            .ops
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .register(name)
    }

    /// The name of a registered op.
    pub fn op_name(&self, id: OpId) -> Option<String> {
        self.shared
            .ops
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .name(id)
            .map(str::to_owned)
    }

    /// Adds a sink that sees data as it is collected.
    pub fn add_sink(&self, sink: Arc<dyn Sink>) {
        self.shared
            .sinks
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .push(sink);
    }

    /// Restarts the run clock (call when the first batch is requested, after setup).
    pub fn start(&self) {
        self.shared.start_ns.store(now_ns(), Ordering::Relaxed);
        self.shared.end_ns.store(0, Ordering::Relaxed);
    }

    /// Marks the end of the run (else [`Profiler::finish`] does).
    pub fn end(&self) {
        let _ = self.shared.end_ns.compare_exchange(
            0,
            now_ns().max(1),
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }

    /// A recorder for worker `worker`. **Call it on the thread that will record**: counters count
    /// the calling thread. The recorder may move (it is `Send`), but counters keep following the
    /// thread that created it. In [`Mode::Off`] it allocates nothing and records nothing.
    pub fn thread(&self, worker: u32, name: impl Into<String>) -> ThreadRecorder {
        let mode = self.shared.config.mode;
        if mode == Mode::Off {
            return ThreadRecorder {
                shared: Arc::clone(&self.shared),
                worker,
                inner: None,
            };
        }
        let (counters, availability) = if mode == Mode::Counters {
            let (set, avail) = CounterSet::open(self.shared.config.counters);
            (set, Some(avail))
        } else {
            (None, None)
        };
        let mask = counters.as_ref().map_or(0, CounterSet::mask);
        let tid = current_tid();
        let slot = {
            let mut threads = lock(&self.shared.threads);
            threads.push(ThreadEntry {
                info: ThreadInfo {
                    worker,
                    name: name.into(),
                    pid: Some(self.shared.pid),
                    tid: Some(tid),
                    counters: availability,
                    stats: ThreadStats::default(),
                },
                mask,
            });
            threads.len() - 1
        };
        self.shared.live_recorders.fetch_add(1, Ordering::Relaxed);
        let max_capacity = self.shared.config.chunk_capacity.max(1);
        let capacity = max_capacity.min(FIRST_CHUNK);
        let with_counters = counters.is_some();
        ThreadRecorder {
            shared: Arc::clone(&self.shared),
            worker,
            inner: Some(Box::new(RefCell::new(Inner {
                slot,
                capacity,
                max_capacity,
                chunk: Chunk::new(slot, capacity, with_counters),
                stack: [Frame::default(); MAX_DEPTH],
                depth: 0,
                batch: NO_INDEX,
                sample: NO_INDEX,
                counters,
                scratch: [0; crate::counters::NUM_COUNTERS],
                last: LastRead::default(),
                reuse_ns: self.shared.config.counter_reuse_ns,
                unbalanced: 0,
                too_deep: 0,
                read_errors: 0,
                tid,
                #[cfg(feature = "tracing")]
                tracing: self
                    .shared
                    .config
                    .emit_tracing
                    .then(|| TracingState::new(&self.shared)),
            }))),
        }
    }

    /// Records a span of `op` that the consumer thread (the one calling the loader's `next()`)
    /// ran for `batch`, such as assembling it, from `start_ns` to `end_ns` ([`now_ns`] readings):
    /// worker [`CONSUMER`], no sample, no counters. Takes a lock like a batch event, so it is for
    /// per-batch work, not per-sample ops, and needs no recorder (nothing to set up per thread or
    /// per epoch). No-op in [`Mode::Off`].
    pub fn consumer_span(&self, op: OpId, batch: u64, start_ns: u64, end_ns: u64) {
        if !self.is_enabled() {
            return;
        }
        let span = RawSpan {
            start_ns,
            end_ns: end_ns.max(start_ns),
            batch,
            sample: NO_INDEX,
            op,
            depth: 0,
        };
        if self.shared.has_sinks() {
            for s in self.shared.sinks() {
                s.on_spans(CONSUMER, std::slice::from_ref(&span), &[]);
            }
        }
        lock(&self.shared.events).consumer_spans.push(span);
    }

    /// Records a span of `op` that an I/O thread ran from `start_ns` to `end_ns` ([`now_ns`]
    /// readings), moving `bytes` bytes: worker [`IO`] (a thread named `"io"`), no sample, no
    /// counters. Takes a lock, so it is for requests (a shard fetch), not per-sample work.
    /// No-op in [`Mode::Off`].
    pub fn io_span(&self, op: OpId, start_ns: u64, end_ns: u64, bytes: u64) {
        if !self.is_enabled() {
            return;
        }
        let span = RawSpan {
            start_ns,
            end_ns: end_ns.max(start_ns),
            batch: NO_INDEX,
            sample: NO_INDEX,
            op,
            depth: 0,
        };
        if self.shared.has_sinks() {
            for s in self.shared.sinks() {
                s.on_spans(IO, std::slice::from_ref(&span), &[]);
            }
        }
        let mut events = lock(&self.shared.events);
        if !events.io_thread_listed {
            events.io_thread_listed = true;
            lock(&self.shared.threads).push(ThreadEntry {
                info: ThreadInfo {
                    worker: IO,
                    name: "io".to_owned(),
                    pid: Some(self.shared.pid),
                    tid: None,
                    counters: None,
                    stats: ThreadStats::default(),
                },
                mask: 0,
            });
        }
        events.io_spans.push((span, bytes));
    }

    /// Records a batch event now. No-op in [`Mode::Off`].
    pub fn batch_event(&self, batch: u64, event: BatchEvent) {
        if self.is_enabled() {
            self.batch_event_at(batch, now_ns(), event);
        }
    }

    /// Records a batch event at `t_ns` (a [`now_ns`] reading). No-op in [`Mode::Off`].
    pub fn batch_event_at(&self, batch: u64, t_ns: u64, event: BatchEvent) {
        if !self.is_enabled() {
            return;
        }
        if self.shared.has_sinks() {
            for s in self.shared.sinks() {
                s.on_batch_event(batch, t_ns, &event);
            }
        }
        lock(&self.shared.events).batches.push((batch, t_ns, event));
    }

    /// The sampler planned `batch` of `size` samples.
    pub fn batch_planned(&self, batch: u64, size: u32) {
        self.batch_event(batch, BatchEvent::Planned { size });
    }

    /// `worker` started the first sample of `batch`.
    pub fn batch_started(&self, batch: u64, worker: u32) {
        self.batch_event(batch, BatchEvent::FirstSampleStarted { worker });
    }

    /// The last sample of `batch` finished, on `worker`.
    pub fn batch_completed(&self, batch: u64, worker: Option<u32>) {
        self.batch_event(batch, BatchEvent::Completed { worker });
    }

    /// The consumer received `batch`.
    pub fn batch_delivered(&self, batch: u64, arrival: Arrival) {
        self.batch_event(batch, BatchEvent::Delivered(arrival));
    }

    /// Records a skipped or failed sample (rare path: allocates). No-op in [`Mode::Off`].
    pub fn record_failure(&self, failure: SampleFailure) {
        if !self.is_enabled() {
            return;
        }
        if self.shared.has_sinks() {
            for s in self.shared.sinks() {
                s.on_failure(&failure);
            }
        }
        lock(&self.shared.events).failures.push(failure);
    }

    /// Collects everything recorded so far into a [`Profile`] of one pipeline, and ends the run
    /// if [`Profiler::end`] was not called. Drop or [`flush`](ThreadRecorder::flush) the
    /// recorders first: spans still in a live recorder's chunk are not included (counted in
    /// `stats.unflushed_recorders`). Collected data is moved out: a second call returns only what
    /// was recorded since.
    pub fn finish(&self) -> Profile {
        self.end();
        let config = &self.shared.config;
        let names: Vec<String> = self
            .shared
            .ops
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .names()
            .to_vec();
        let chunks: Vec<Chunk> = lock(&self.shared.chunk_rx).try_iter().collect();
        let taken: usize = chunks.iter().map(|c| c.spans.len()).sum();
        self.shared.stored_spans.fetch_sub(taken, Ordering::Relaxed);
        let dropped = self.shared.dropped_spans.swap(0, Ordering::Relaxed);
        let (threads, masks) = {
            let t = lock(&self.shared.threads);
            let threads: Vec<ThreadInfo> = t.iter().map(|t| t.info.clone()).collect();
            let masks: Vec<u16> = t.iter().map(|t| t.mask).collect();
            (threads, masks)
        };
        let (raw_batches, failures, consumer_spans, io_spans) = {
            let mut e = lock(&self.shared.events);
            (
                std::mem::take(&mut e.batches),
                std::mem::take(&mut e.failures),
                std::mem::take(&mut e.consumer_spans),
                std::mem::take(&mut e.io_spans),
            )
        };

        let total: usize = chunks.iter().map(|c| c.spans.len()).sum();
        let mut spans = Vec::with_capacity(total);
        for chunk in &chunks {
            let worker = threads.get(chunk.thread).map_or(u32::MAX, |t| t.worker);
            let mask = masks.get(chunk.thread).copied().unwrap_or(0);
            for (i, s) in chunk.spans.iter().enumerate() {
                let op = names
                    .get(usize::from(s.op.0))
                    .cloned()
                    .unwrap_or_else(|| s.op.to_string());
                let counters = chunk
                    .counters
                    .get(i)
                    .filter(|_| mask != 0)
                    .map(|a| CounterDeltas::from_array(mask, a));
                spans.push(SpanRecord {
                    op,
                    worker,
                    batch: (s.batch != NO_INDEX).then_some(s.batch),
                    sample: (s.sample != NO_INDEX).then_some(s.sample),
                    start_ns: s.start_ns,
                    end_ns: s.end_ns,
                    depth: s.depth,
                    counters,
                    bytes: None,
                });
            }
        }
        for s in &consumer_spans {
            spans.push(SpanRecord {
                op: names
                    .get(usize::from(s.op.0))
                    .cloned()
                    .unwrap_or_else(|| s.op.to_string()),
                worker: CONSUMER,
                batch: (s.batch != NO_INDEX).then_some(s.batch),
                sample: None,
                start_ns: s.start_ns,
                end_ns: s.end_ns,
                depth: 0,
                counters: None,
                bytes: None,
            });
        }
        for (s, bytes) in &io_spans {
            spans.push(SpanRecord {
                op: names
                    .get(usize::from(s.op.0))
                    .cloned()
                    .unwrap_or_else(|| s.op.to_string()),
                worker: IO,
                batch: None,
                sample: None,
                start_ns: s.start_ns,
                end_ns: s.end_ns,
                depth: 0,
                counters: None,
                bytes: Some(*bytes),
            });
        }
        spans.sort_by_key(|s| (s.start_ns, s.worker, s.depth));

        let mut stats = PipelineStats {
            dropped_spans: dropped,
            unflushed_recorders: self.shared.live_recorders.load(Ordering::Relaxed) as u64,
            ..Default::default()
        };
        for t in &threads {
            stats.dropped_spans += t.stats.dropped_spans;
            stats.unbalanced_exits += t.stats.unbalanced_exits;
            stats.counter_read_errors += t.stats.counter_read_errors;
        }

        let counters = match (&self.shared.probe, config.mode) {
            (Some(p), _) => p.clone(),
            (None, Mode::Off) => CounterAvailability::not_requested("profiler mode is off"),
            (None, _) => CounterAvailability::not_requested("profiler mode is spans"),
        };

        let end = self.shared.end_ns.load(Ordering::Relaxed);
        Profile::new(vec![Pipeline {
            label: config.label.clone(),
            pid: Some(self.shared.pid),
            mode: config.mode,
            num_workers: config.num_workers,
            batch_size: config.batch_size,
            start_ns: self.shared.start_ns.load(Ordering::Relaxed),
            end_ns: end,
            meta: config.meta.clone(),
            counters,
            threads,
            spans,
            batches: assemble_batches(raw_batches),
            failures,
            stats,
        }])
    }
}

/// Folds batch events into one record per batch.
fn assemble_batches(events: Vec<(u64, u64, BatchEvent)>) -> Vec<BatchRecord> {
    let mut by_batch: BTreeMap<u64, BatchRecord> = BTreeMap::new();
    for (batch, t, ev) in events {
        let r = by_batch.entry(batch).or_insert_with(|| BatchRecord {
            batch,
            ..Default::default()
        });
        match ev {
            BatchEvent::Planned { size } => {
                r.size = Some(size);
                r.planned_ns = Some(r.planned_ns.map_or(t, |p| p.min(t)));
            }
            BatchEvent::FirstSampleStarted { .. } => {
                r.first_started_ns = Some(r.first_started_ns.map_or(t, |p| p.min(t)));
            }
            BatchEvent::Completed { worker } => {
                let later = match r.completed_ns {
                    Some(c) => c <= t,
                    None => true,
                };
                if later {
                    r.completed_ns = Some(t);
                    r.completed_by = worker;
                }
            }
            BatchEvent::Delivered(d) => {
                r.delivered_ns = Some(t);
                r.wait_ns = Some(d.wait_ns);
                r.out_of_order = d.out_of_order;
                r.queue_occupancy = Some(d.queue_occupancy);
            }
        }
    }
    by_batch.into_values().collect()
}

#[derive(Clone, Copy)]
struct Frame {
    op: OpId,
    start_ns: u64,
    batch: u64,
    sample: u64,
    counters: CounterArray,
}

impl Default for Frame {
    fn default() -> Self {
        Frame {
            op: OpId(0),
            start_ns: 0,
            batch: NO_INDEX,
            sample: NO_INDEX,
            counters: [0; crate::counters::NUM_COUNTERS],
        }
    }
}

/// The last counter group read of a recorder.
#[derive(Clone, Copy, Default)]
struct LastRead {
    counts: CounterArray,
    /// Clock right after the read; 0: none yet.
    at_ns: u64,
    /// Taken (or last reused) at a span's exit, with no span entered since.
    by_exit: bool,
}

impl LastRead {
    /// Whether a boundary at `now` may reuse it.
    #[inline]
    fn fresh(&self, now: u64, reuse_ns: u64) -> bool {
        self.at_ns != 0 && now.saturating_sub(self.at_ns) <= reuse_ns
    }
}

struct Inner {
    slot: usize,
    /// Spans the current chunk holds.
    capacity: usize,
    /// What chunks grow to.
    max_capacity: usize,
    chunk: Chunk,
    stack: [Frame; MAX_DEPTH],
    /// Open spans, including ones past `MAX_DEPTH` that are not recorded.
    depth: usize,
    batch: u64,
    sample: u64,
    counters: Option<CounterSet>,
    scratch: CounterArray,
    /// The last counter read, for boundaries that follow it closely.
    last: LastRead,
    reuse_ns: u64,
    unbalanced: u64,
    too_deep: u64,
    read_errors: u64,
    tid: u64,
    #[cfg(feature = "tracing")]
    tracing: Option<TracingState>,
}

/// The recorder of one worker thread: owned by that thread (`Send`, not `Sync`), so recording
/// takes no lock. Methods take `&self` so [`SpanGuard`]s can nest.
///
/// Not shareable between threads:
///
/// ```compile_fail
/// fn shared<T: Sync>() {}
/// shared::<ferroloader_profiler::ThreadRecorder>();
/// ```
pub struct ThreadRecorder {
    shared: Arc<Shared>,
    worker: u32,
    /// `None` in [`Mode::Off`].
    inner: Option<Box<RefCell<Inner>>>,
}

impl fmt::Debug for ThreadRecorder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThreadRecorder")
            .field("worker", &self.worker)
            .field("enabled", &self.inner.is_some())
            .finish_non_exhaustive()
    }
}

/// Closes its span when dropped (or by [`SpanGuard::exit`]).
#[must_use = "the span ends when the guard is dropped; bind it to a variable"]
#[derive(Debug)]
pub struct SpanGuard<'a> {
    rec: &'a ThreadRecorder,
    op: OpId,
}

impl SpanGuard<'_> {
    /// Ends the span now.
    pub fn exit(self) {
        // Dropping does it.
    }
}

impl Drop for SpanGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        self.rec.exit(self.op);
    }
}

impl ThreadRecorder {
    /// The worker number.
    pub fn worker(&self) -> u32 {
        self.worker
    }

    /// Whether this recorder records anything.
    #[inline]
    pub fn is_enabled(&self) -> bool {
        self.inner.is_some()
    }

    /// The profiler this recorder belongs to (to register ops or record batch events).
    pub fn profiler(&self) -> Profiler {
        Profiler {
            shared: Arc::clone(&self.shared),
        }
    }

    /// Sets the batch and sample that the following spans belong to.
    #[inline]
    pub fn set_sample(&self, batch: u64, sample: u64) {
        if let Some(inner) = &self.inner {
            if let Ok(mut i) = inner.try_borrow_mut() {
                i.batch = batch;
                i.sample = sample;
            }
        }
    }

    /// Clears the sample context.
    #[inline]
    pub fn clear_sample(&self) {
        self.set_sample(NO_INDEX, NO_INDEX);
    }

    /// Opens a span of `op`. Pair with [`ThreadRecorder::exit`], or use [`ThreadRecorder::span`].
    #[inline]
    pub fn enter(&self, op: OpId) {
        let Some(inner) = &self.inner else {
            return;
        };
        let Ok(mut i) = inner.try_borrow_mut() else {
            return;
        };
        i.enter(op, self);
    }

    /// Closes the innermost open span, which should be of `op`. An `exit` that matches no open
    /// span is counted in the stats and ignored; one that matches a span further down closes the
    /// spans above it unrecorded (they were never exited).
    #[inline]
    pub fn exit(&self, op: OpId) {
        let Some(inner) = &self.inner else {
            return;
        };
        let Ok(mut i) = inner.try_borrow_mut() else {
            return;
        };
        if i.exit(op) {
            self.hand_off(&mut i, true);
        }
    }

    /// Opens a span of `op`, closed when the guard drops.
    #[inline]
    pub fn span(&self, op: OpId) -> SpanGuard<'_> {
        self.enter(op);
        SpanGuard { rec: self, op }
    }

    /// Runs `f` inside a span of `op`.
    #[inline]
    pub fn in_span<T>(&self, op: OpId, f: impl FnOnce() -> T) -> T {
        let _g = self.span(op);
        f()
    }

    /// Records a skipped or failed sample in the current sample context (rare path: allocates).
    pub fn sample_failed(&self, op: Option<OpId>, cause: impl Into<String>) {
        let Some(inner) = &self.inner else {
            return;
        };
        let (batch, sample) = inner
            .try_borrow()
            .map(|i| (i.batch, i.sample))
            .unwrap_or((NO_INDEX, NO_INDEX));
        let profiler = self.profiler();
        profiler.record_failure(SampleFailure {
            worker: Some(self.worker),
            batch: (batch != NO_INDEX).then_some(batch),
            sample: (sample != NO_INDEX).then_some(sample),
            t_ns: now_ns(),
            op: op.and_then(|id| profiler.op_name(id)),
            cause: cause.into(),
        });
    }

    /// Hands the spans recorded so far to the collector (takes a lock, allocates a new chunk).
    pub fn flush(&self) {
        let Some(inner) = &self.inner else {
            return;
        };
        let Ok(mut i) = inner.try_borrow_mut() else {
            return;
        };
        self.hand_off(&mut i, true);
        self.publish_stats(&i);
    }

    /// Moves the current chunk to the collector; `replace`: give the recorder a fresh one.
    #[cold]
    fn hand_off(&self, i: &mut Inner, replace: bool) {
        if i.chunk.spans.is_empty() {
            return;
        }
        if self.shared.has_sinks() {
            for s in self.shared.sinks() {
                s.on_spans(self.worker, &i.chunk.spans, &i.chunk.counters);
            }
        }
        let n = i.chunk.spans.len();
        let shared = &self.shared;
        let before = shared.stored_spans.fetch_add(n, Ordering::Relaxed);
        let mut accepted = before.saturating_add(n) <= shared.config.max_spans;
        if accepted {
            let full = std::mem::replace(
                &mut i.chunk,
                Chunk {
                    thread: i.slot,
                    spans: Vec::new(),
                    counters: Vec::new(),
                },
            );
            // The receiver lives in `shared`, which we hold: sending cannot fail. Should it
            // anyway, the spans are counted as dropped and the chunk memory reused.
            if let Err(back) = shared.chunk_tx.send(full) {
                i.chunk = back.0;
                accepted = false;
            }
        }
        if !accepted {
            shared.stored_spans.fetch_sub(n, Ordering::Relaxed);
            shared.dropped_spans.fetch_add(n as u64, Ordering::Relaxed);
            // Reuse the memory: the collector is full, later spans are only counted.
            i.chunk.spans.clear();
            i.chunk.counters.clear();
        } else if replace {
            i.capacity = i.capacity.saturating_mul(2).min(i.max_capacity);
            i.chunk = Chunk::new(i.slot, i.capacity, i.counters.is_some());
        }
    }

    fn publish_stats(&self, i: &Inner) {
        let moved = current_tid() != i.tid;
        let fraction = i.counters.as_ref().map(CounterSet::running_fraction);
        let mut threads = lock(&self.shared.threads);
        if let Some(t) = threads.get_mut(i.slot) {
            t.info.stats = ThreadStats {
                dropped_spans: i.too_deep,
                unbalanced_exits: i.unbalanced,
                counter_read_errors: i.read_errors,
                counter_running_fraction: fraction,
                moved_across_threads: moved,
            };
        }
    }
}

/// The calling thread's OS id.
#[cfg(target_os = "linux")]
fn current_tid() -> u64 {
    u64::from(
        rustix::thread::gettid()
            .as_raw_nonzero()
            .get()
            .unsigned_abs(),
    )
}

/// Without `gettid`: a process-unique number per thread, enough to tell threads apart.
#[cfg(not(target_os = "linux"))]
fn current_tid() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local!(static ID: u64 = NEXT.fetch_add(1, Ordering::Relaxed));
    ID.with(|id| *id)
}

impl Drop for ThreadRecorder {
    fn drop(&mut self) {
        let Some(inner) = self.inner.take() else {
            return;
        };
        let mut i = inner.into_inner();
        self.hand_off(&mut i, false);
        self.publish_stats(&i);
        self.shared.live_recorders.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Inner {
    #[inline]
    fn enter(&mut self, op: OpId, rec: &ThreadRecorder) {
        let depth = self.depth;
        self.depth += 1;
        if depth >= MAX_DEPTH {
            self.too_deep += 1;
            return;
        }
        #[cfg(feature = "tracing")]
        if let Some(t) = &mut self.tracing {
            t.enter(op, rec, self.batch, self.sample);
        }
        #[cfg(not(feature = "tracing"))]
        let _ = rec;
        let (batch, sample) = (self.batch, self.sample);
        let frame = &mut self.stack[depth];
        frame.op = op;
        frame.batch = batch;
        frame.sample = sample;
        let Some(c) = &mut self.counters else {
            frame.start_ns = now_ns();
            return;
        };
        let now = now_ns();
        if self.last.fresh(now, self.reuse_ns) {
            // Right after another boundary: start from its read.
            frame.counters = self.last.counts;
            frame.start_ns = now;
        } else {
            // Counters first, clock last: the counter read's own cost stays outside the span.
            if !c.read(&mut frame.counters) {
                self.read_errors += 1;
            }
            frame.start_ns = now_ns();
            self.last.counts = frame.counters;
            self.last.at_ns = frame.start_ns;
        }
        // This span's exit must read for itself.
        self.last.by_exit = false;
    }

    /// Returns true when the chunk is full and must be handed off.
    #[inline]
    fn exit(&mut self, op: OpId) -> bool {
        let end_ns = now_ns();
        if self.depth == 0 {
            self.unbalanced += 1;
            return false;
        }
        if self.depth > MAX_DEPTH {
            // Matches an enter that was too deep to record.
            self.depth -= 1;
            return false;
        }
        let mut top = self.depth - 1;
        if self.stack[top].op != op {
            // Find the matching open span; spans above it were never exited.
            match self.stack[..top].iter().rposition(|f| f.op == op) {
                Some(pos) => {
                    self.unbalanced += (top - pos) as u64;
                    #[cfg(feature = "tracing")]
                    if let Some(t) = &mut self.tracing {
                        for _ in pos..top {
                            t.exit();
                        }
                    }
                    top = pos;
                }
                None => {
                    self.unbalanced += 1;
                    return false;
                }
            }
        }
        self.depth = top;
        let frame = self.stack[top];
        if let Some(c) = &mut self.counters {
            if self.last.by_exit && self.last.fresh(end_ns, self.reuse_ns) {
                // A nested span's exit just read: this span ends there too.
                self.scratch = self.last.counts;
            } else {
                if !c.read(&mut self.scratch) {
                    self.read_errors += 1;
                }
                self.last = LastRead {
                    counts: self.scratch,
                    at_ns: now_ns(),
                    by_exit: true,
                };
            }
            let mut delta = [0u64; crate::counters::NUM_COUNTERS];
            for ((d, now), then) in delta.iter_mut().zip(&self.scratch).zip(&frame.counters) {
                *d = now.saturating_sub(*then);
            }
            self.chunk.counters.push(delta);
        }
        self.chunk.spans.push(RawSpan {
            start_ns: frame.start_ns,
            end_ns,
            batch: frame.batch,
            sample: frame.sample,
            op,
            depth: top as u8,
        });
        #[cfg(feature = "tracing")]
        if let Some(t) = &mut self.tracing {
            t.exit();
        }
        self.chunk.spans.len() >= self.capacity
    }
}

/// The `tracing` spans of a recorder's open op spans. Holds `Span`s (which are `Send`) and
/// enters them through their dispatcher rather than keeping `Entered` guards (which are not), so
/// the `tracing` feature does not take `Send` away from [`ThreadRecorder`].
#[cfg(feature = "tracing")]
struct TracingState {
    names: Vec<String>,
    entered: Vec<tracing::Span>,
}

#[cfg(feature = "tracing")]
impl TracingState {
    fn new(shared: &Shared) -> Self {
        TracingState {
            names: shared
                .ops
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .names()
                .to_vec(),
            entered: Vec::with_capacity(MAX_DEPTH),
        }
    }

    fn enter(&mut self, op: OpId, rec: &ThreadRecorder, batch: u64, sample: u64) {
        let idx = usize::from(op.0);
        if idx >= self.names.len() {
            // An op registered after this recorder was made: refresh the name snapshot.
            self.names = rec
                .shared
                .ops
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .names()
                .to_vec();
        }
        let name = self.names.get(idx).map_or("?", String::as_str);
        let as_i64 = |v: u64| if v == NO_INDEX { -1 } else { v as i64 };
        let span = tracing::info_span!(
            target: "ferroloader::op",
            "op",
            op = name,
            worker = rec.worker,
            batch = as_i64(batch),
            sample = as_i64(sample)
        );
        span.with_subscriber(|(id, dispatch)| dispatch.enter(id));
        self.entered.push(span);
    }

    fn exit(&mut self) {
        if let Some(span) = self.entered.pop() {
            span.with_subscriber(|(id, dispatch)| dispatch.exit(id));
        }
    }
}
