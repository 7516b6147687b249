//! `prepare`: the loader crate's offline preparation, run on a thread of its own while the
//! calling thread reports progress to a Python callable and answers Ctrl-C.
//!
//! Only translates; the preparation itself is `ferroloader_loader::prepare`. Must not hold the
//! GIL while files are processed.

use std::path::PathBuf;
use std::sync::Arc;

use ferroloader_loader::prepare::{prepare as prepare_folder, PrepareOptions};
use ferroloader_loader::progress::JobProgress;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::detach::run_with_progress;

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
    let state = Arc::new(JobProgress::new());
    let worker_state = Arc::clone(&state);
    let report = run_with_progress(
        py,
        "ferroloader-prepare",
        progress.as_ref(),
        || (state.done(), state.total()),
        || state.cancel(),
        move || prepare_folder(&src, &dst, &options, &worker_state),
    )?;
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
