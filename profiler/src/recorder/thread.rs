//! The recorder of one worker thread: the hot path. `enter`/`exit` take no lock and do not
//! allocate; a full chunk goes to the collector through a lock-free channel. Must not touch
//! the profiler's shared state per span.

use std::cell::RefCell;
use std::fmt;
#[cfg(not(target_os = "linux"))]
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::profiler::Shared;
#[cfg(feature = "tracing")]
use super::tracing_state::TracingState;
use super::{lock, Profiler, RawSpan, MAX_DEPTH, NO_INDEX};
use crate::clock::now_ns;
use crate::counters::{CounterArray, CounterSet};
use crate::ops::OpId;
use crate::schema::{SampleFailure, ThreadStats};

/// Spans of one thread, handed over whole.
pub(super) struct Chunk {
    pub(super) thread: usize,
    pub(super) spans: Vec<RawSpan>,
    pub(super) counters: Vec<CounterArray>,
}

impl Chunk {
    /// A chunk whose memory is already faulted in, so the page faults of filling it do not land
    /// inside (and inflate the page-fault counts of) the ops being measured.
    pub(super) fn new(thread: usize, capacity: usize, with_counters: bool) -> Self {
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

#[derive(Clone, Copy)]
pub(super) struct Frame {
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
pub(super) struct LastRead {
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

pub(super) struct Inner {
    pub(super) slot: usize,
    /// Spans the current chunk holds.
    pub(super) capacity: usize,
    /// What chunks grow to.
    pub(super) max_capacity: usize,
    pub(super) chunk: Chunk,
    pub(super) stack: [Frame; MAX_DEPTH],
    /// Open spans, including ones past `MAX_DEPTH` that are not recorded.
    pub(super) depth: usize,
    pub(super) batch: u64,
    pub(super) sample: u64,
    pub(super) counters: Option<CounterSet>,
    pub(super) scratch: CounterArray,
    /// The last counter read, for boundaries that follow it closely.
    pub(super) last: LastRead,
    pub(super) reuse_ns: u64,
    pub(super) unbalanced: u64,
    pub(super) too_deep: u64,
    pub(super) read_errors: u64,
    pub(super) tid: u64,
    #[cfg(feature = "tracing")]
    pub(super) tracing: Option<TracingState>,
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
    pub(super) shared: Arc<Shared>,
    pub(super) worker: u32,
    /// `None` in [`Mode::Off`].
    pub(super) inner: Option<Box<RefCell<Inner>>>,
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
pub(super) fn current_tid() -> u64 {
    u64::from(
        rustix::thread::gettid()
            .as_raw_nonzero()
            .get()
            .unsigned_abs(),
    )
}

/// Without `gettid`: a process-unique number per thread, enough to tell threads apart.
#[cfg(not(target_os = "linux"))]
pub(super) fn current_tid() -> u64 {
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
