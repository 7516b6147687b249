//! `write_shards`: the loader crate's shard writer, run on a thread of its own while the
//! calling thread reports progress to a Python callable and answers Ctrl-C.
//!
//! Only translates; the writing itself is `ferroloader_loader::shard_writer`. Must not hold the
//! GIL while files are copied.

use std::borrow::Cow;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ferroloader_loader::progress::JobProgress;
use ferroloader_loader::shard_writer::{write_shards as write, ShardOptions};
use ferroloader_loader::Source;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::dataset::{PyFileList, PyImageFolder, PyPathList};
use crate::detach::run_with_progress;
use crate::table::PyEncodedTable;

/// Writes `dataset` (a native ImageFolder, FileList or PathList, or an EncodedTable with
/// `names`: each row's file name in the shards, whose extension names the member) into `dst` as
/// tar shards and their index (see `ferroloader.shard`); `exif_transpose` and `grayscale` are
/// recorded in the index. `progress(done, total)` is called from this thread whenever more samples are written.
/// A Python exception (from `progress` or Ctrl-C) cancels the run, waits for the sample in
/// progress, and is raised; the destination stays resumable.
#[pyfunction]
#[pyo3(signature = (
    dataset, dst, *, classes = None, shard_size, max_samples_per_shard = None, shuffle = false,
    seed = 0, num_workers = 0, progress = None, names = None, exif_transpose = false,
    grayscale = false
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
    names: Option<Vec<PathBuf>>,
    exif_transpose: bool,
    grayscale: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let source = native_source(dataset, names)?;
    let options = ShardOptions::default()
        .exif_transpose(exif_transpose)
        .grayscale(grayscale)
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

/// The dataset's native source. Only listed datasets, or a table whose rows are given
/// names: a shard member is named after the source file's extension, which bytes alone do
/// not have.
fn native_source(
    dataset: &Bound<'_, PyAny>,
    names: Option<Vec<PathBuf>>,
) -> PyResult<Arc<dyn Source>> {
    if let Ok(table) = dataset.cast::<PyEncodedTable>() {
        let table: Arc<dyn Source> = table.get().inner.clone();
        let names = names.ok_or_else(|| {
            PyValueError::new_err("names: an EncodedTable's rows need a file name each")
        })?;
        if names.len() != table.len() {
            return Err(PyValueError::new_err(format!(
                "names: {} given for {} rows",
                names.len(),
                table.len()
            )));
        }
        return Ok(Arc::new(NamedRows { table, names }));
    }
    if names.is_some() {
        return Err(PyValueError::new_err(
            "names: only for an EncodedTable (listed datasets are named by their files)",
        ));
    }
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

/// A table's rows under the names the caller gave them: what the writer takes each member's
/// key and extension from, and what its errors name. Reads are the table's.
struct NamedRows {
    table: Arc<dyn Source>,
    names: Vec<PathBuf>,
}

impl Source for NamedRows {
    fn len(&self) -> usize {
        self.table.len()
    }

    fn read<'a>(&'a self, index: usize, buf: &'a mut Vec<u8>) -> io::Result<&'a [u8]> {
        self.table.read(index, buf)
    }

    fn label(&self, index: usize) -> i64 {
        self.table.label(index)
    }

    fn path(&self, index: usize) -> Cow<'_, Path> {
        Cow::Borrowed(&self.names[index])
    }
}
