//! The hook through which recorded data can be watched as it is collected: a test hook, public
//! only with the `test-hooks` feature. Must not be called on the hot path: hooks run once per
//! chunk, batch event or failure.

use super::{BatchEvent, RawSpan};
use crate::counters::CounterArray;
use crate::schema::SampleFailure;

/// Receives recorded data as it reaches the collector, off the hot path (once per chunk, batch
/// event or failure); the tests watch chunk hand-offs through it. Every hook defaults to doing
/// nothing.
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
