//! Spans, batch events and CPU counter groups for ferroloader, and the exports built on them.
//!
//! The profiler records *named ops*: it knows nothing of images, datasets or the loader. The
//! loader makes one [`Profiler`] per run and one [`ThreadRecorder`] per worker thread, wraps each
//! op in a span ([`ThreadRecorder::span`] or `enter`/`exit`), and reports batch events
//! ([`Profiler::batch_delivered`] ...). [`Profiler::finish`] yields a [`Profile`] in the versioned
//! schema of [`schema`], which the Python-side instrumentation of a torchvision `DataLoader`
//! writes too; from it come a Chrome trace ([`trace`]) and a [`Summary`] ([`summary`]).
//!
//! It must never lock, allocate per event or do I/O on the hot path: spans go into per-thread
//! fixed-capacity chunks, handed to the collector through a lock-free channel one chunk at a
//! time, and [`Mode::Off`] costs one branch per call. Missing counters (no hardware PMU,
//! `perf_event_paranoid`, seccomp) are recorded with the reason and never make anything fail.
//!
//! ```
//! use ferroloader_profiler::{ops, Arrival, Mode, Profiler, ProfilerConfig};
//!
//! let profiler = Profiler::new(ProfilerConfig::new(Mode::Spans).label("native").batch_size(1));
//! let worker = {
//!     let p = profiler.clone();
//!     std::thread::spawn(move || {
//!         let rec = p.thread(0, "worker-0"); // on the worker thread: counters count it
//!         p.batch_started(0, 0);
//!         rec.set_sample(0, 42);
//!         rec.in_span(ops::DECODE, || std::hint::black_box(2 + 2));
//!         let _resize = rec.span(ops::RESIZE); // closed at the end of scope
//!         p.batch_completed(0, Some(0));
//!     })
//! };
//! worker.join().unwrap();
//! profiler.batch_delivered(0, Arrival { wait_ns: 1_000, ..Default::default() });
//! let profile = profiler.finish();
//! assert_eq!(profile.pipelines[0].spans.len(), 2);
//! let summary = ferroloader_profiler::Summary::from_profile(&profile);
//! println!("{}", summary.render_table());
//! ```

pub mod builder;
pub mod clock;
pub mod counters;
pub mod error;
pub mod ops;
pub mod recorder;
pub mod schema;
pub mod summary;
pub mod trace;

pub use builder::{
    BatchFacts, Delivery, ProcessId, ProfileBuilder, RecordedSpan, RecordingProcess, RunInfo,
};
pub use clock::now_ns;
pub use counters::{
    CounterArray, CounterAvailability, CounterConfig, CounterDeltas, CounterGroupKind, CounterKind,
    CounterSet, EventAvailability, GroupAvailability,
};
pub use error::ProfilerError;
pub use ops::OpId;
pub use recorder::{
    Arrival, BatchEvent, Profiler, ProfilerConfig, SpanGuard, ThreadRecorder, CONSUMER,
    COUNTER_REUSE_NS, IO,
};
#[cfg(feature = "test-hooks")]
pub use recorder::{RawSpan, Sink};
pub use schema::{
    BatchRecord, Mode, PipelineRecord, PipelineStats, Profile, SampleFailure, SpanRecord,
    ThreadInfo, ThreadStats,
};
pub use summary::Summary;
pub use trace::{chrome_trace, TraceOptions};
