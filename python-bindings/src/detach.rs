//! The one helper every long native call goes through (as polars' `utils.rs` does): it releases
//! the GIL while Rust works or waits, maps the Rust error to its Python exception, and answers
//! Ctrl-C promptly.
//!
//! Waiting happens in short slices: between slices the GIL is taken back just long enough to run
//! Python's signal handlers (`PyErr_CheckSignals`), so a SIGINT raises `KeyboardInterrupt` within
//! about one slice even while a batch is far from ready. Must not hold the GIL while decoding,
//! listing a folder or waiting for workers.

use std::time::Duration;

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
