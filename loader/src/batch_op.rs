//! Ops on a whole batch (MixUp, CutMix: whatever mixes samples with each other) that the worker
//! completing the batch runs, on the parameters the consumer planned for it ahead of time.
//!
//! The draws of such ops belong to the consumer (they replay a Python generator keyed by the
//! batch), so the consumer plans each batch's op a few batches before it wants the batch; the
//! worker whose sample completes the batch takes the plan and runs it before the batch is
//! handed over, off the consumer's thread. A batch that completes before its plan arrives is
//! handed over unmixed and the consumer mixes it itself, with the same parameters: the output
//! never depends on which thread ran the op. Only batches delivered as they were planned are
//! mixed here; an epoch that compacts batches around skipped samples leaves all mixing to the
//! consumer ([`BatchOps::enabled`]).
//!
//! This module must not know any concrete op (the bindings define them) and must not draw.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Mutex, PoisonError};

use crate::batch::BatchImagesMut;
use crate::process::SampleLayout;

/// An op on a whole batch's images, in place.
pub trait BatchOp: Send {
    /// The op's name in profiles (`"RandomChoice/CutMix"`, say).
    fn name(&self) -> &'static str;

    /// Runs on `images`, `samples` samples of `layout` one after another. An error leaves the
    /// batch to the consumer, which runs the op again there and reports what it reports.
    fn apply(
        &self,
        images: BatchImagesMut<'_>,
        samples: usize,
        layout: SampleLayout,
    ) -> Result<(), String>;
}

/// The ops the consumer planned for an epoch's batches, by batch number (the number the
/// delivered batch has: [`crate::Batch::index`]).
pub struct BatchOps {
    enabled: bool,
    planned: Mutex<HashMap<usize, Box<dyn BatchOp>>>,
}

impl BatchOps {
    pub(crate) fn new(enabled: bool) -> Self {
        BatchOps {
            enabled,
            planned: Mutex::new(HashMap::new()),
        }
    }

    fn planned(&self) -> std::sync::MutexGuard<'_, HashMap<usize, Box<dyn BatchOp>>> {
        self.planned.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the workers run planned ops: only when every planned batch is delivered as it was
    /// planned (no samples skipped and compacted).
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Plans `op` for batch `batch`; false (and nothing planned) when the workers run no batch
    /// ops this epoch.
    pub fn plan(&self, batch: usize, op: Box<dyn BatchOp>) -> bool {
        if self.enabled {
            self.planned().insert(batch, op);
        }
        self.enabled
    }

    /// Forgets batch `batch`'s plan, if it is still there (the consumer got the batch unmixed).
    pub fn discard(&self, batch: usize) {
        self.planned().remove(&batch);
    }

    pub(crate) fn take(&self, batch: usize) -> Option<Box<dyn BatchOp>> {
        if !self.enabled {
            return None;
        }
        self.planned().remove(&batch)
    }
}

impl fmt::Debug for BatchOps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BatchOps")
            .field("enabled", &self.enabled)
            .field("planned", &self.planned().len())
            .finish()
    }
}
