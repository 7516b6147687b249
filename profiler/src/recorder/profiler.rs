//! The shared [`Profiler`] of one run: setup (ops, recorders, sinks), batch events, failures,
//! consumer spans, and the collection of everything into a [`Profile`]. Its calls take locks:
//! they happen per batch or per thread, never per op; per-op recording is the thread
//! recorder's and must not come here.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use super::thread::{current_tid, Chunk, Frame, Inner, LastRead, ThreadRecorder};
#[cfg(feature = "tracing")]
use super::tracing_state::TracingState;
use super::{
    lock, Arrival, BatchEvent, ProfilerConfig, RawSpan, Sink, CONSUMER, FIRST_CHUNK, IO, MAX_DEPTH,
    NO_INDEX,
};
use crate::clock::now_ns;
use crate::counters::{CounterAvailability, CounterDeltas, CounterSet};
use crate::error::ProfilerError;
use crate::ops::{OpId, OpTable};
use crate::schema::{
    BatchRecord, Mode, PipelineRecord, PipelineStats, Profile, SampleFailure, SpanRecord,
    ThreadInfo, ThreadStats,
};

pub(super) struct ThreadEntry {
    pub(super) info: ThreadInfo,
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

pub(super) struct Shared {
    pub(super) config: ProfilerConfig,
    pid: u32,
    start_ns: AtomicU64,
    /// 0 while the run goes on.
    end_ns: AtomicU64,
    pub(super) ops: RwLock<OpTable>,
    /// Worker threads, in creation order (a chunk refers to its thread by index).
    pub(super) threads: Mutex<Vec<ThreadEntry>>,
    /// Full chunks; `Sender` is `Sync`, and sending never blocks or takes a lock.
    pub(super) chunk_tx: Sender<Chunk>,
    /// Drained by `finish` only.
    chunk_rx: Mutex<Receiver<Chunk>>,
    /// Spans sent and not yet collected, against `max_spans`.
    pub(super) stored_spans: AtomicUsize,
    /// Spans dropped because `max_spans` was reached.
    pub(super) dropped_spans: AtomicU64,
    events: Mutex<Events>,
    /// Counters the constructing thread could open (Counters mode only).
    probe: Option<CounterAvailability>,
    sinks: RwLock<Vec<Arc<dyn Sink>>>,
    pub(super) live_recorders: AtomicUsize,
}

impl Shared {
    pub(super) fn sinks(&self) -> Vec<Arc<dyn Sink>> {
        self.sinks
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub(super) fn has_sinks(&self) -> bool {
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
    pub(super) shared: Arc<Shared>,
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

    /// Adds a sink that sees data as it is collected. A test hook (feature `test-hooks`).
    #[cfg(feature = "test-hooks")]
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
        Profile::new(vec![PipelineRecord {
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
