//! `prepare`: the loader crate's offline preparation, run on a thread of its own while the
//! calling thread reports progress to a Python callable and answers Ctrl-C.
//!
//! Only translates; the preparation itself is `ferroloader_loader::prepare`. Must not hold the
//! GIL while files are processed.

use std::path::PathBuf;
use std::sync::Arc;

use crossbeam_channel::RecvTimeoutError;
use ferroloader_loader::prepare::{prepare as prepare_folder, PrepareOptions, PrepareProgress};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::detach::SLICE;
use crate::errors::ToPyErr;

/// Prepares the ImageFolder `src` into `dst` (see `ferroloader.prepare`). `progress(done,
/// total)` is called from this thread whenever more files are done. A Python exception (from
/// `progress` or Ctrl-C) cancels the run, waits for the files in progress, and is raised.
#[pyfunction]
#[pyo3(signature = (src, dst, shorter_side, *, quality = 90, num_workers = 0, progress = None))]
pub(crate) fn prepare<'py>(
    py: Python<'py>,
    src: PathBuf,
    dst: PathBuf,
    shorter_side: u32,
    quality: u8,
    num_workers: usize,
    progress: Option<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyDict>> {
    let options = PrepareOptions::new(shorter_side)
        .quality(quality)
        .num_threads(num_workers);
    let state = Arc::new(PrepareProgress::new());
    let (tx, rx) = crossbeam_channel::bounded(1);
    let worker_state = Arc::clone(&state);
    std::thread::Builder::new()
        .name("ferroloader-prepare".into())
        .spawn(move || {
            // The receiver only goes away after this send or a cancel-and-wait; ignore both.
            let _ = tx.send(prepare_folder(&src, &dst, &options, &worker_state));
        })
        .map_err(|e| PyRuntimeError::new_err(format!("prepare: cannot start a thread: {e}")))?;
    let mut reported = usize::MAX;
    let outcome = loop {
        match py.detach(|| rx.recv_timeout(SLICE)) {
            Ok(result) => break result,
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                return Err(PyRuntimeError::new_err(
                    "prepare: the worker thread stopped",
                ));
            }
        }
        let interrupted = py.check_signals().and_then(|()| match &progress {
            Some(callback) if state.done() != reported => {
                reported = state.done();
                callback.call1((reported, state.total())).map(|_| ())
            }
            _ => Ok(()),
        });
        if let Err(e) = interrupted {
            state.cancel();
            // Let the files in progress finish, so the manifest stays whole.
            let _ = py.detach(|| rx.recv());
            return Err(e);
        }
    };
    let report = outcome.map_err(|e| e.to_py_err(py))?;
    if let Some(callback) = &progress {
        callback.call1((state.done(), state.total()))?;
    }
    let out = PyDict::new(py);
    out.set_item("resized", report.resized)?;
    out.set_item("copied", report.copied)?;
    out.set_item("reused", report.reused)?;
    let unreadable: Vec<(std::ffi::OsString, String)> = report
        .unreadable
        .into_iter()
        .map(|(p, reason)| (p.into_os_string(), reason))
        .collect();
    out.set_item("unreadable", unreadable)?;
    out.set_item("bytes_in", report.bytes_in)?;
    out.set_item("bytes_out", report.bytes_out)?;
    out.set_item("cancelled", report.cancelled)?;
    Ok(out)
}
