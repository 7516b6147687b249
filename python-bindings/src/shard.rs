//! `write_shards`: the loader crate's shard writer, run on a thread of its own while the
//! calling thread reports progress to a Python callable and answers Ctrl-C.
//!
//! Only translates; the writing itself is `ferroloader_loader::shard_writer`. Must not hold the
//! GIL while files are copied.

use std::path::PathBuf;
use std::sync::Arc;

use ferroloader_loader::progress::JobProgress;
use ferroloader_loader::shard_writer::{write_shards as write, ShardOptions};
use ferroloader_loader::Source;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::dataset::{PyFileList, PyImageFolder, PyPathList};
use crate::detach::run_with_progress;

/// Writes `dataset` (a native ImageFolder, FileList or PathList) into `dst` as tar shards and
/// their index (see `ferroloader.shard`). `progress(done, total)` is called from this thread
/// whenever more samples are written. A Python exception (from `progress` or Ctrl-C) cancels the
/// run, waits for the sample in progress, and is raised; the destination stays resumable.
#[pyfunction]
#[pyo3(signature = (
    dataset, dst, *, classes = None, shard_size, max_samples_per_shard = None, shuffle = false,
    seed = 0, num_workers = 0, progress = None
))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn write_shards<'py>(
    py: Python<'py>,
    dataset: &Bound<'py, PyAny>,
    dst: PathBuf,
    classes: Option<Vec<String>>,
    shard_size: u64,
    max_samples_per_shard: Option<usize>,
    shuffle: bool,
    seed: u64,
    num_workers: usize,
    progress: Option<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyDict>> {
    let source = native_source(dataset)?;
    let options = ShardOptions::default()
        .shard_size(shard_size)
        .max_samples_per_shard(max_samples_per_shard)
        .shuffle(shuffle, seed)
        .num_threads(num_workers);
    let state = Arc::new(JobProgress::new());
    let worker_state = Arc::clone(&state);
    let report = run_with_progress(
        py,
        "ferroloader-shard",
        progress.as_ref(),
        || (state.done(), state.total()),
        || state.cancel(),
        move || write(&*source, classes.as_deref(), &dst, &options, &worker_state),
    )?;
    let out = PyDict::new(py);
    out.set_item("shards", report.shards)?;
    out.set_item("samples", report.samples)?;
    out.set_item("reused_shards", report.reused_shards)?;
    out.set_item("bytes_read", report.bytes_read)?;
    out.set_item("bytes_written", report.bytes_written)?;
    out.set_item("index", report.index.map(PathBuf::into_os_string))?;
    out.set_item("cancelled", report.cancelled)?;
    Ok(out)
}

/// The dataset's native source. Only listed datasets: a shard member is named after the
/// source file's extension, which a `(bytes, label)` dataset does not have.
fn native_source(dataset: &Bound<'_, PyAny>) -> PyResult<Arc<dyn Source>> {
    if let Ok(folder) = dataset.cast::<PyImageFolder>() {
        return Ok(folder.get().inner.clone());
    }
    if let Ok(list) = dataset.cast::<PyFileList>() {
        return Ok(list.get().inner.clone());
    }
    if let Ok(list) = dataset.cast::<PyPathList>() {
        return Ok(list.get().inner.clone());
    }
    Err(PyTypeError::new_err(format!(
        "dataset: expected a ferroloader ImageFolder, FileList or PathList, got {}",
        dataset.get_type().name()?
    )))
}
