//! `WebDataset` as a Python object: tar shards from local disk, HTTP or object storage.
//!
//! Construction (reading the index, or every shard when there is none) runs with the GIL
//! released. Only translates arguments: ordering, fetching and caching belong to
//! `ferroloader_loader::shards`. Pickles by its arguments (a forked or spawned worker lists
//! the shards again).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ferroloader_loader::shards::store::StoreOptions;
use ferroloader_loader::shards::{WebDataset, WebDatasetOptions};
use ferroloader_loader::Source;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::detach::run_detached;

/// The `urls` argument: one URL or pattern, a path, or a list of them.
#[derive(Debug, FromPyObject)]
enum UrlsArg {
    One(String),
    Path(PathBuf),
    Many(Vec<String>),
}

/// Tar shards in the WebDataset layout (`KEY.jpg` + `KEY.cls`), read ahead of the workers.
#[pyclass(frozen, module = "ferroloader._native", name = "WebDataset")]
#[derive(Debug)]
pub(crate) struct PyWebDataset {
    pub(crate) inner: Arc<WebDataset>,
    args: Args,
}

/// The constructor's arguments, kept for pickling and `repr`.
#[derive(Clone, Debug)]
struct Args {
    urls: Vec<String>,
    index: Option<String>,
    num_samples: Option<usize>,
    label_key: String,
    shuffle_buffer: usize,
    read_ahead_shards: usize,
    read_ahead_bytes: u64,
    cache_dir: Option<PathBuf>,
    cache_limit_bytes: Option<u64>,
    retries: usize,
    retry_backoff: f64,
    storage_options: Option<BTreeMap<String, String>>,
}

#[pymethods]
impl PyWebDataset {
    #[new]
    #[pyo3(signature = (
        urls, index = None, num_samples = None, label_key = "cls",
        shuffle_buffer = 1000, read_ahead_shards = 4, read_ahead_bytes = 1_073_741_824,
        cache_dir = None, cache_limit_bytes = None, retries = 5, retry_backoff = 0.2,
        storage_options = None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        urls: UrlsArg,
        index: Option<String>,
        num_samples: Option<usize>,
        label_key: &str,
        shuffle_buffer: usize,
        read_ahead_shards: usize,
        read_ahead_bytes: u64,
        cache_dir: Option<PathBuf>,
        cache_limit_bytes: Option<u64>,
        retries: usize,
        retry_backoff: f64,
        storage_options: Option<BTreeMap<String, String>>,
    ) -> PyResult<Self> {
        if !retry_backoff.is_finite() || retry_backoff < 0.0 {
            return Err(PyValueError::new_err(format!(
                "retry_backoff: expected seconds >= 0, got {retry_backoff}"
            )));
        }
        let urls = match urls {
            UrlsArg::One(url) => vec![url],
            UrlsArg::Path(path) => vec![path.to_string_lossy().into_owned()],
            UrlsArg::Many(urls) => urls,
        };
        let args = Args {
            urls,
            index,
            num_samples,
            label_key: label_key.to_owned(),
            shuffle_buffer,
            read_ahead_shards,
            read_ahead_bytes,
            cache_dir,
            cache_limit_bytes,
            retries,
            retry_backoff,
            storage_options,
        };
        let options = WebDatasetOptions {
            index: args.index.clone(),
            num_samples: args.num_samples,
            label_key: args.label_key.clone(),
            shuffle_buffer: args.shuffle_buffer,
            read_ahead_shards: args.read_ahead_shards,
            read_ahead_bytes: args.read_ahead_bytes,
            cache_dir: args.cache_dir.clone(),
            cache_limit_bytes: args.cache_limit_bytes,
            store: StoreOptions {
                storage_options: args
                    .storage_options
                    .iter()
                    .flatten()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
                retries: args.retries,
                retry_backoff: Duration::from_secs_f64(args.retry_backoff),
            },
        };
        let urls = args.urls.clone();
        let inner = run_detached(py, |_| Some(WebDataset::new(&urls, options.clone())))?;
        Ok(PyWebDataset {
            inner: Arc::new(inner),
            args,
        })
    }

    /// The shard URLs, brace patterns expanded, in dataset order.
    #[getter]
    fn urls(&self) -> Vec<String> {
        self.inner.urls().to_vec()
    }

    /// Samples per shard, in dataset order.
    #[getter]
    fn shard_sizes(&self) -> Vec<usize> {
        self.inner.shard_sizes()
    }

    /// Every sample's label, in index order.
    #[getter]
    fn targets(&self) -> Vec<i64> {
        (0..self.inner.len()).map(|i| self.inner.label(i)).collect()
    }

    /// The WebDataset key of sample `index` (the member name up to its first dot).
    fn key(&self, index: usize) -> PyResult<String> {
        if index >= self.inner.len() {
            return Err(pyo3::exceptions::PyIndexError::new_err(format!(
                "index {index} is out of range for {} samples",
                self.inner.len()
            )));
        }
        Ok(self.inner.key(index).to_owned())
    }

    /// The index JSON describing these shards (what `index.json` holds for them).
    fn index_json(&self) -> String {
        self.inner.index().to_json()
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    fn __repr__(&self) -> String {
        format!(
            "WebDataset(shards={}, samples={})",
            self.inner.urls().len(),
            self.inner.len()
        )
    }

    /// Pickles by its arguments: the shards are listed again when unpickled.
    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyTuple>)> {
        let a = slf.get().args.clone();
        let args = (
            a.urls,
            a.index,
            a.num_samples,
            a.label_key,
            a.shuffle_buffer,
            a.read_ahead_shards,
            a.read_ahead_bytes,
            a.cache_dir,
            a.cache_limit_bytes,
            a.retries,
            a.retry_backoff,
            a.storage_options,
        );
        Ok((slf.get_type().into_any(), args.into_pyobject(slf.py())?))
    }
}
