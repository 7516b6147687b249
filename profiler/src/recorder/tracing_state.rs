//! The `tracing` spans mirroring a recorder's open op spans (feature `tracing`). Must not be
//! built without the feature, nor hold `Entered` guards (they are not `Send`).

use std::sync::PoisonError;

use super::profiler::Shared;
use super::{ThreadRecorder, MAX_DEPTH, NO_INDEX};
use crate::ops::OpId;

/// The `tracing` spans of a recorder's open op spans. Holds `Span`s (which are `Send`) and
/// enters them through their dispatcher rather than keeping `Entered` guards (which are not), so
/// the `tracing` feature does not take `Send` away from [`ThreadRecorder`].
#[cfg(feature = "tracing")]
pub(super) struct TracingState {
    names: Vec<String>,
    entered: Vec<tracing::Span>,
}

#[cfg(feature = "tracing")]
impl TracingState {
    pub(super) fn new(shared: &Shared) -> Self {
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

    pub(super) fn enter(&mut self, op: OpId, rec: &ThreadRecorder, batch: u64, sample: u64) {
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

    pub(super) fn exit(&mut self) {
        if let Some(span) = self.entered.pop() {
            span.with_subscriber(|(id, dispatch)| dispatch.exit(id));
        }
    }
}
