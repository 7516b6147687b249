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

mod config;
mod events;
mod profiler;
mod sink;
mod thread;
#[cfg(feature = "tracing")]
mod tracing_state;

use std::sync::{Mutex, MutexGuard, PoisonError};

pub use config::ProfilerConfig;
pub use events::{Arrival, BatchEvent};
pub use profiler::Profiler;
pub use thread::{SpanGuard, ThreadRecorder};
// Test hooks: public only for this crate's integration tests.
#[cfg(feature = "test-hooks")]
pub use {events::RawSpan, sink::Sink};
#[cfg(not(feature = "test-hooks"))]
pub(crate) use {events::RawSpan, sink::Sink};

/// Sentinel of a raw span's batch and sample: no sample context was set.
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

/// Poisoning only means another thread panicked while recording; the data is still consistent
/// enough to report, and a profiler must not turn one panic into many.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
