//! The settings of a [`Profiler`](super::Profiler): plain data with chained setters. Must not
//! open counters or allocate recording buffers; the profiler does that when it is made.

use std::collections::BTreeMap;

use super::COUNTER_REUSE_NS;
use crate::counters::CounterConfig;
use crate::schema::Mode;

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
    /// A recorder's first chunk holds at most [`FIRST_CHUNK`](super::FIRST_CHUNK) spans and
    /// each next one twice as many, up to this. Default: 4096.
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
