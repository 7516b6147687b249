//! What recorders record, before names are resolved: raw spans (ids, not names) and batch
//! events. Plain `Copy` data: must not allocate, so the hot path can push it as is.

use super::NO_INDEX;
use crate::ops::OpId;

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
