//! How far a long offline job (`prepare`, `shard_writer`) is, shared with the thread that reports
//! it, and a way to stop it. Counts only; must not know what the job does or block anyone.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Shared with the caller while a job runs. Each job says what its units are (files, samples)
/// and where it stops once cancelled.
#[derive(Debug, Default)]
pub struct JobProgress {
    done: AtomicUsize,
    total: AtomicUsize,
    cancel: AtomicBool,
}

impl JobProgress {
    /// Nothing done, nothing to do yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Units finished (including those an earlier run finished).
    pub fn done(&self) -> usize {
        self.done.load(Ordering::Relaxed)
    }

    /// Units in all; 0 until the job has listed its input.
    pub fn total(&self) -> usize {
        self.total.load(Ordering::Relaxed)
    }

    /// Asks the job to stop at its next safe point.
    pub fn cancel(&self) {
        self.cancel.store(true, Ordering::Relaxed);
    }

    pub(crate) fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed)
    }

    pub(crate) fn set_total(&self, total: usize) {
        self.total.store(total, Ordering::Relaxed);
    }

    pub(crate) fn set_done(&self, done: usize) {
        self.done.store(done, Ordering::Relaxed);
    }

    pub(crate) fn add_done(&self, n: usize) {
        self.done.fetch_add(n, Ordering::Relaxed);
    }
}
