//! The one helper every long native call goes through (as polars' `utils.rs` does): it releases
//! the GIL while Rust works or waits, maps the Rust error to its Python exception, and answers
//! Ctrl-C promptly.
//!
//! Waiting happens in short slices: between slices the GIL is taken back just long enough to run
//! Python's signal handlers (`PyErr_CheckSignals`), so a SIGINT raises `KeyboardInterrupt` within
//! about one slice even while a batch is far from ready. Must not hold the GIL while decoding,
//! listing a folder or waiting for workers.

use std::time::Duration;

use crossbeam_channel::RecvTimeoutError;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

use crate::errors::ToPyErr;

/// How long one wait slice lasts before signals are checked again.
pub(crate) const SLICE: Duration = Duration::from_millis(20);

/// Runs `step` with the GIL released until it returns `Some`, then maps its error.
///
/// `step` gets the longest time it should block for; it returns `None` to be called again
/// (after Python's signal handlers have run: a `KeyboardInterrupt` raised by them is returned
/// as the error, and `step` is not called again). One-shot work simply returns `Some` the first
/// time; a pending Ctrl-C then surfaces at the interpreter's next check, right after.
pub(crate) fn run_detached<T, E, F>(py: Python<'_>, mut step: F) -> PyResult<T>
where
    F: FnMut(Duration) -> Option<Result<T, E>> + Send,
    T: Send,
    E: ToPyErr + Send,
{
    loop {
        if let Some(result) = py.detach(|| step(SLICE)) {
            return result.map_err(|e| e.to_py_err(py));
        }
        py.check_signals()?;
    }
}

/// Runs `job` on a thread of its own (named `thread_name`) while this thread, the GIL released
/// between slices, answers Ctrl-C and calls `progress(done, total)` whenever `counts()` moved,
/// and once more at the end. A Python exception (from `progress` or a signal) calls `cancel`,
/// waits for the job to stop (so what it writes stays whole, e.g. a resumable manifest), and is
/// raised; otherwise the job's error is mapped to its Python exception.
pub(crate) fn run_with_progress<T, E>(
    py: Python<'_>,
    thread_name: &str,
    progress: Option<&Bound<'_, PyAny>>,
    counts: impl Fn() -> (usize, usize),
    cancel: impl Fn(),
    job: impl FnOnce() -> Result<T, E> + Send + 'static,
) -> PyResult<T>
where
    T: Send + 'static,
    E: ToPyErr + Send + 'static,
{
    let (tx, rx) = crossbeam_channel::bounded(1);
    std::thread::Builder::new()
        .name(thread_name.into())
        .spawn(move || {
            // The receiver only goes away after this send or a cancel-and-wait; ignore both.
            let _ = tx.send(job());
        })
        .map_err(|e| {
            PyRuntimeError::new_err(format!("{thread_name}: cannot start a thread: {e}"))
        })?;
    let mut reported = None;
    let outcome = loop {
        match py.detach(|| rx.recv_timeout(SLICE)) {
            Ok(result) => break result,
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                return Err(PyRuntimeError::new_err(format!(
                    "{thread_name}: the worker thread stopped"
                )));
            }
        }
        let interrupted = py.check_signals().and_then(|()| match progress {
            Some(callback) if reported != Some(counts()) => {
                let now = counts();
                reported = Some(now);
                callback.call1(now).map(|_| ())
            }
            _ => Ok(()),
        });
        if let Err(e) = interrupted {
            cancel();
            let _ = py.detach(|| rx.recv());
            return Err(e);
        }
    };
    let value = outcome.map_err(|e| e.to_py_err(py))?;
    if let Some(callback) = progress {
        callback.call1(counts())?;
    }
    Ok(value)
}
