//! The profile file format: one versioned JSON schema for native and Python-side recordings.
//!
//! A profile holds one or more *pipelines* (a labelled run: `"native"`, `"torchvision"`), each
//! with its run metadata, worker threads, op spans, batch events, failed samples and which CPU
//! counters were available (and why not). Merging two profiles concatenates their pipelines, so
//! a native and a torchvision run can be viewed side by side. This module must not depend on the
//! recorder: it is plain data, and Python writes the same JSON without any Rust.
//!
//! # Schema `ferroloader.profile`, version 1
//!
//! All times are `CLOCK_MONOTONIC` nanoseconds (`time.monotonic_ns()` in Python), absolute, so
//! pipelines recorded in one boot share a timeline. Fields marked optional may be omitted or
//! `null`; unknown fields are ignored, so later minor additions stay readable.
//!
//! ```text
//! {
//!   "schema": "ferroloader.profile",      required, exactly this string
//!   "version": 1,                          required; readers reject newer versions
//!   "clock": "CLOCK_MONOTONIC",            optional, informative
//!   "pipelines": [{
//!     "label": "torchvision",              required, unique within a file (merge renames)
//!     "pid": 4242,                         optional, the main (consumer) process
//!     "mode": "spans",                     "off" | "spans" | "counters"
//!     "num_workers": 2, "batch_size": 64,
//!     "start_ns": 0, "end_ns": 0,          run start and end
//!     "meta": {"decoder": "PIL"},          optional free-form strings
//!     "counters": {                        optional: which counters exist and why not
//!       "hardware": {"available": false, "reason": "...", "exclude_kernel": false,
//!                    "events": [{"counter": "cycles", "available": false, "reason": "..."}]},
//!       "software": {...}, "perf_event_paranoid": 2 },
//!     "threads": [{"worker": 0, "name": "worker-0", "pid": 4243, "tid": 4243,
//!                  "counters": {...} (optional), "stats": {...} (optional)}],
//!     "spans": [{"op": "decode", "worker": 0, "batch": 3, "sample": 17,
//!                "start_ns": 1, "end_ns": 2, "depth": 0,
//!                "counters": {"task_clock": 900, "page_faults": 3}}],   counters optional
//!     "batches": [{"batch": 3, "size": 64, "planned_ns": .., "first_started_ns": ..,
//!                  "completed_ns": .., "completed_by": 1, "delivered_ns": .., "wait_ns": ..,
//!                  "out_of_order": false, "queue_occupancy": 2}],        all but batch optional
//!     "failures": [{"worker": 0, "batch": 3, "sample": 17, "t_ns": .., "op": "decode",
//!                   "cause": "..."}],
//!     "stats": {"dropped_spans": 0, "unbalanced_exits": 0, "counter_read_errors": 0,
//!               "unflushed_recorders": 0}
//!   }]
//! }
//! ```
//!
//! `batch` numbers must be unique within a pipeline (number batches across epochs, not per
//! epoch). Worker number 4294967295 (`u32::MAX`, [`CONSUMER`](crate::CONSUMER)) is the consumer
//! thread: its spans (batch assembly) are drawn on the consumer's track and are not worker time;
//! no thread entry is needed for it. `depth` is the nesting level of a span within its worker (0: top level); a Python
//! writer with flat spans leaves it out. `wait_ns` is how long the consumer's `next()` blocked for
//! that batch (about 0 when it had already arrived out of order and was stashed).

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::counters::{CounterAvailability, CounterDeltas};
use crate::error::ProfilerError;

/// The `schema` string of every profile file.
pub const SCHEMA_NAME: &str = "ferroloader.profile";
/// The schema version this crate writes, and the newest it reads.
pub const SCHEMA_VERSION: u32 = 1;

/// What a profiler records.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Nothing: every recording call returns after one branch.
    #[default]
    Off,
    /// Op spans and batch events.
    Spans,
    /// Spans plus CPU counter deltas per span.
    Counters,
}

impl Mode {
    /// Lowercase name, as in the schema.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Off => "off",
            Mode::Spans => "spans",
            Mode::Counters => "counters",
        }
    }
}

/// Parses a [`Mode::name`]; any other text is [`ProfilerError::UnknownMode`].
impl std::str::FromStr for Mode {
    type Err = ProfilerError;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        [Mode::Off, Mode::Spans, Mode::Counters]
            .into_iter()
            .find(|m| m.name() == name)
            .ok_or_else(|| ProfilerError::UnknownMode { found: name.into() })
    }
}

/// A whole profile file: one or more pipelines.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    /// Always [`SCHEMA_NAME`].
    pub schema: String,
    /// The schema version ([`SCHEMA_VERSION`] when written by this crate).
    pub version: u32,
    /// The clock of every timestamp.
    #[serde(default = "default_clock")]
    pub clock: String,
    /// The recorded pipelines.
    pub pipelines: Vec<PipelineRecord>,
}

fn default_clock() -> String {
    "CLOCK_MONOTONIC".into()
}

/// The record of one labelled run of a loading pipeline (a whole loader: the native one or a
/// torchvision `DataLoader`) in a [`Profile`]; not the transforms crate's planned op pipeline.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PipelineRecord {
    /// Name of the pipeline (`"native"`, `"torchvision"`); one trace process per label.
    pub label: String,
    /// Process id of the consumer (main) process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// What was recorded.
    #[serde(default)]
    pub mode: Mode,
    /// Worker threads or processes.
    #[serde(default)]
    pub num_workers: u32,
    /// Samples per batch.
    #[serde(default)]
    pub batch_size: u32,
    /// Run start.
    pub start_ns: u64,
    /// Run end.
    pub end_ns: u64,
    /// Free-form metadata (decoder, dataset, machine...).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub meta: BTreeMap<String, String>,
    /// Which counters were available, and why not.
    #[serde(default)]
    pub counters: CounterAvailability,
    /// The worker threads that recorded spans.
    #[serde(default)]
    pub threads: Vec<ThreadInfo>,
    /// Op spans, ordered by start.
    #[serde(default)]
    pub spans: Vec<SpanRecord>,
    /// One record per batch, ordered by batch number.
    #[serde(default)]
    pub batches: Vec<BatchRecord>,
    /// Samples that were skipped or failed.
    #[serde(default)]
    pub failures: Vec<SampleFailure>,
    /// Recorder health: anything dropped or unbalanced.
    #[serde(default)]
    pub stats: PipelineStats,
}

impl PipelineRecord {
    /// An empty pipeline with `label` and no events.
    pub fn new(label: impl Into<String>) -> Self {
        PipelineRecord {
            label: label.into(),
            pid: None,
            mode: Mode::Spans,
            num_workers: 0,
            batch_size: 0,
            start_ns: 0,
            end_ns: 0,
            meta: BTreeMap::new(),
            counters: CounterAvailability::default(),
            threads: Vec::new(),
            spans: Vec::new(),
            batches: Vec::new(),
            failures: Vec::new(),
            stats: PipelineStats::default(),
        }
    }

    /// Wall time of the run.
    pub fn wall_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }
}

/// A worker thread (or worker process, on the Python side).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ThreadInfo {
    /// Worker number, `0..num_workers`; spans refer to it.
    pub worker: u32,
    /// Human-readable name (the trace's thread name).
    #[serde(default)]
    pub name: String,
    /// Process id (workers of a torch DataLoader are processes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// OS thread id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tid: Option<u64>,
    /// Counters this thread opened, when they differ per thread.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counters: Option<CounterAvailability>,
    /// This thread's recorder health.
    #[serde(default)]
    pub stats: ThreadStats,
}

/// Health of one thread's recorder.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ThreadStats {
    /// Spans not recorded: nested deeper than the recorder's stack.
    pub dropped_spans: u64,
    /// `exit` calls with no matching `enter` (or closing frames left open above them).
    pub unbalanced_exits: u64,
    /// Counter group reads that failed (those spans carry zero deltas for that group).
    pub counter_read_errors: u64,
    /// Lowest `time_running / time_enabled` of the counter groups (below 1: multiplexed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub counter_running_fraction: Option<f64>,
    /// The recorder was dropped on another thread than the one that created it, so its counters
    /// measured the creating thread.
    pub moved_across_threads: bool,
}

/// One op span.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SpanRecord {
    /// Op name.
    pub op: String,
    /// Worker that ran it.
    pub worker: u32,
    /// Batch the sample belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<u64>,
    /// Sample (dataset index or position) being processed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample: Option<u64>,
    /// Start.
    pub start_ns: u64,
    /// End.
    pub end_ns: u64,
    /// Nesting level within the worker (0: top level).
    #[serde(default)]
    pub depth: u8,
    /// Counter deltas over the span (inclusive of nested spans).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counters: Option<CounterDeltas>,
    /// Bytes the span moved, for I/O spans (a shard request).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
}

impl SpanRecord {
    /// Duration.
    pub fn dur_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }
}

/// Life of one batch, from plan to delivery. Every time is optional: each side records what it
/// can see.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct BatchRecord {
    /// Batch number, unique within the pipeline.
    pub batch: u64,
    /// Samples in the batch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<u32>,
    /// When the sampler planned it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub planned_ns: Option<u64>,
    /// When a worker started its first sample.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_started_ns: Option<u64>,
    /// When its last sample finished (Lotus' `BatchPreprocessed`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completed_ns: Option<u64>,
    /// Worker that finished it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completed_by: Option<u32>,
    /// When the consumer received it (Lotus' `BatchConsumed`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delivered_ns: Option<u64>,
    /// How long the consumer's `next()` blocked for it (Lotus' `BatchWait`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait_ns: Option<u64>,
    /// It arrived before an earlier batch and was held back (or delivered out of order).
    pub out_of_order: bool,
    /// Batches ready in the queue when it was delivered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue_occupancy: Option<u32>,
}

/// A sample that was skipped or failed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SampleFailure {
    /// Worker that hit it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worker: Option<u32>,
    /// Its batch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch: Option<u64>,
    /// The sample.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sample: Option<u64>,
    /// When.
    pub t_ns: u64,
    /// The op that failed, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub op: Option<String>,
    /// Why (error message).
    pub cause: String,
}

/// Recorder health of a pipeline, summed over threads.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PipelineStats {
    /// Spans lost: the collector was full ([`ProfilerConfig::max_spans`]) or nesting too deep.
    ///
    /// [`ProfilerConfig::max_spans`]: crate::ProfilerConfig::max_spans
    pub dropped_spans: u64,
    /// `exit` calls that matched no open span.
    pub unbalanced_exits: u64,
    /// Failed counter reads.
    pub counter_read_errors: u64,
    /// Recorders still alive at collection: spans they recorded since their last flush are
    /// missing from this profile.
    pub unflushed_recorders: u64,
}

impl Default for Profile {
    fn default() -> Self {
        Profile::new(Vec::new())
    }
}

impl Profile {
    /// A profile of `pipelines` with the current schema header.
    pub fn new(pipelines: Vec<PipelineRecord>) -> Self {
        Profile {
            schema: SCHEMA_NAME.into(),
            version: SCHEMA_VERSION,
            clock: default_clock(),
            pipelines,
        }
    }

    /// The pipeline labelled `label`.
    pub fn pipeline(&self, label: &str) -> Option<&PipelineRecord> {
        self.pipelines.iter().find(|p| p.label == label)
    }

    /// Checks the schema header.
    pub fn validate(&self) -> Result<(), ProfilerError> {
        if self.schema != SCHEMA_NAME {
            return Err(ProfilerError::WrongSchema {
                found: self.schema.clone(),
            });
        }
        if self.version > SCHEMA_VERSION {
            return Err(ProfilerError::UnsupportedVersion {
                found: self.version,
                supported: SCHEMA_VERSION,
            });
        }
        Ok(())
    }

    /// Encodes as pretty JSON.
    pub fn to_json(&self) -> Result<String, ProfilerError> {
        Ok(serde_json::to_string_pretty(self)?)
    }

    /// Decodes JSON and checks the schema header.
    pub fn from_json(json: &str) -> Result<Self, ProfilerError> {
        // Check the header first so a wrong file says so rather than "missing field".
        #[derive(Deserialize)]
        struct Header {
            schema: String,
            version: u32,
        }
        let header: Header = serde_json::from_str(json)?;
        let probe = Profile {
            schema: header.schema,
            version: header.version,
            clock: String::new(),
            pipelines: Vec::new(),
        };
        probe.validate()?;
        Ok(serde_json::from_str(json)?)
    }

    /// Writes the profile as JSON to `path`.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), ProfilerError> {
        crate::error::write_json(path.as_ref(), self)
    }

    /// Reads a profile written by [`Profile::save`] or by the Python instrumentation.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, ProfilerError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(ProfilerError::io_at(path))?;
        Self::from_json(&text)
    }

    /// Adds `other`'s pipelines after this one's. A label already present gets a `#2`, `#3`...
    /// suffix so every pipeline keeps its own trace process.
    pub fn merge(mut self, other: Profile) -> Profile {
        let mut labels: HashSet<String> = self.pipelines.iter().map(|p| p.label.clone()).collect();
        for mut p in other.pipelines {
            if labels.contains(&p.label) {
                let base = p.label.clone();
                let mut n = 2;
                while labels.contains(&format!("{base}#{n}")) {
                    n += 1;
                }
                p.label = format!("{base}#{n}");
            }
            labels.insert(p.label.clone());
            self.pipelines.push(p);
        }
        self.version = self.version.max(SCHEMA_VERSION);
        self
    }
}
