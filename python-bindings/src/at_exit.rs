//! Ending every epoch before the interpreter finalizes.
//!
//! An epoch's worker threads call into Python when the pipeline has a Python tail or the dataset
//! is read through the `dataset[i]` protocol. Once CPython starts finalizing, a thread that asks
//! for the GIL (or gets it back after a C extension released it, as Pillow does inside a resize)
//! is ended with `pthread_exit`, whose forced unwind through Rust frames aborts the process
//! ("terminate called without an active exception", exit status 134): a script that leaves a
//! loop early, or dies of an exception mid-epoch, would crash at exit. So every pump registers
//! here, and an `atexit` handler (registered by the Python package, run before finalization
//! begins) asks each to end its epoch and waits, GIL released, until its workers are joined.
//!
//! Must not hold the registry's lock while waiting, nor wait on a pump made in another process
//! (after `fork()` its thread does not exist here).

use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use pyo3::prelude::*;

use crate::fork::ForkLocal;

/// How long exit waits, in all, for the epochs to end. Each worker only has to finish the sample
/// it is on; a pump waiting for a batch that can never be made (every ring buffer held by the
/// consumer's tensors) is left, and its workers, which are then waiting rather than running
/// Python, cannot crash the exit.
const EXIT_WAIT: Duration = Duration::from_secs(30);

/// One epoch that may still be running.
struct Live {
    /// Asks the pump to end its epoch (idempotent).
    stop: Box<dyn Fn() + Send>,
    /// Disconnected once the pump thread has ended the epoch (its workers joined) and exited.
    done: Receiver<()>,
}

static LIVE: Mutex<Vec<ForkLocal<Live>>> = Mutex::new(Vec::new());

/// Registers a pump: `stop` asks it to end its epoch, `done` disconnects when it has.
pub(crate) fn register(stop: impl Fn() + Send + 'static, done: Receiver<()>) {
    let mut live = LIVE.lock().unwrap_or_else(PoisonError::into_inner);
    // Forget the pumps that have ended (and, leaking them, those of a parent process).
    live.retain(|entry| match entry.peek() {
        Some(l) if !entry.inherited() => {
            !matches!(l.done.try_recv(), Err(TryRecvError::Disconnected))
        }
        _ => false,
    });
    live.push(ForkLocal::new(Live {
        stop: Box::new(stop),
        done,
    }));
}

/// Ends every epoch of this process and waits (GIL released, at most [`EXIT_WAIT`]) for their
/// pumps to join their workers. For `atexit`; loaders stay usable (a later `iter()` starts a
/// new epoch).
#[pyfunction]
pub(crate) fn end_epochs_at_exit(py: Python<'_>) {
    let live = std::mem::take(&mut *LIVE.lock().unwrap_or_else(PoisonError::into_inner));
    // Those of a parent process are leaked by `into_inner`: their threads do not exist here.
    let ours: Vec<Live> = live.into_iter().filter_map(ForkLocal::into_inner).collect();
    for l in &ours {
        (l.stop)();
    }
    let done: Vec<Receiver<()>> = ours.into_iter().map(|l| l.done).collect();
    py.detach(move || {
        let deadline = Instant::now() + EXIT_WAIT;
        for d in done {
            // Nothing is ever sent: this returns when the pump drops its end, or at the deadline.
            let _ = d.recv_timeout(deadline.saturating_duration_since(Instant::now()));
        }
    });
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc;
    use std::sync::Arc;

    use super::*;

    fn live_count() -> usize {
        LIVE.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    #[test]
    fn registering_forgets_the_pumps_that_have_ended() {
        let stops = Arc::new(AtomicUsize::new(0));
        let (ended_tx, ended_rx) = mpsc::channel::<()>();
        let (running_tx, running_rx) = mpsc::channel::<()>();
        let counter = Arc::clone(&stops);
        register(
            move || {
                counter.fetch_add(1, Ordering::SeqCst);
            },
            ended_rx,
        );
        register(|| {}, running_rx);
        let before = live_count();
        drop(ended_tx);
        register(|| {}, mpsc::channel::<()>().1);
        // The ended pump is gone, the running one stays, the new one is in: one fewer, one more.
        assert_eq!(live_count(), before);
        assert_eq!(stops.load(Ordering::SeqCst), 0, "registering stops nothing");
        drop(running_tx);
    }
}
