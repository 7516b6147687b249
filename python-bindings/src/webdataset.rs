//! `WebDataset` as a Python object: tar shards from local disk, HTTP or object storage.
//!
//! Construction (reading the index, or every shard when there is none) runs with the GIL
//! released. Only translates arguments: ordering, fetching and caching belong to
//! `ferroloader_loader::shards`. Pickles by its arguments (a spawned worker lists the shards
//! again).
//!
//! Fork safety: the native dataset owns fetcher threads and a tokio runtime, which a forked
//! child does not have. It is kept in a [`ForkLocal`]; the first time a child asks for it
//! ([`PyWebDataset::source`], which a `Loader` built in the child calls) a new one is made
//! from the inherited listing (plain data, read without touching a lock), so the child reads
//! the same samples with fetchers of its own and without listing the shards again.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferroloader_loader::shards::store::StoreOptions;
use ferroloader_loader::shards::{WebDataset, WebDatasetOptions};
use ferroloader_loader::Source;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use pyo3::IntoPyObjectExt;

use crate::detach::run_detached;
use crate::errors::ToPyErr;
use crate::fork::ForkLocal;

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
    /// The dataset of this process. Locked only with the GIL held and never across a call that
    /// releases it, so no other thread can hold the lock when the process forks.
    current: Mutex<ForkLocal<Arc<WebDataset>>>,
    /// The dataset as constructed, for reads of its plain data (URLs, keys, labels) in any
    /// process; its threads are used only through `current`.
    listing: Arc<WebDataset>,
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
    shuffle_initial: usize,
    read_ahead_shards: usize,
    read_ahead_bytes: u64,
    range_bytes: u64,
    max_requests: usize,
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
        storage_options = None, range_bytes = 8_388_608, max_requests = 8, shuffle_initial = 100
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
        range_bytes: u64,
        max_requests: usize,
        shuffle_initial: usize,
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
            shuffle_initial,
            read_ahead_shards,
            read_ahead_bytes,
            range_bytes,
            max_requests,
            cache_dir,
            cache_limit_bytes,
            retries,
            retry_backoff,
            storage_options,
        };
        let options = args.options();
        let urls = args.urls.clone();
        let inner = Arc::new(run_detached(py, |_| {
            Some(WebDataset::new(&urls, options.clone()))
        })?);
        Ok(PyWebDataset {
            current: Mutex::new(ForkLocal::new(Arc::clone(&inner))),
            listing: inner,
            args,
        })
    }

    /// Whether this dataset's fetchers were inherited through `fork()` and not rebuilt here
    /// yet (the next loader made over it in this process rebuilds them).
    #[getter]
    fn inherited(&self) -> bool {
        self.current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .inherited()
    }

    /// The shard URLs, brace patterns expanded, in dataset order.
    #[getter]
    fn urls(&self) -> Vec<String> {
        self.listing.urls().to_vec()
    }

    /// Samples per shard, in dataset order.
    #[getter]
    fn shard_sizes(&self) -> Vec<usize> {
        self.listing.shard_sizes()
    }

    /// Every sample's label, in index order.
    #[getter]
    fn targets(&self) -> Vec<i64> {
        (0..self.listing.len())
            .map(|i| self.listing.label(i))
            .collect()
    }

    /// The WebDataset key of sample `index` (the member name up to its first dot).
    fn key(&self, index: usize) -> PyResult<String> {
        if index >= self.listing.len() {
            return Err(pyo3::exceptions::PyIndexError::new_err(format!(
                "index {index} is out of range for {} samples",
                self.listing.len()
            )));
        }
        Ok(self.listing.key(index).to_owned())
    }

    /// Whether images are turned upright per their EXIF orientation, as the index says (shards
    /// written from a Hugging Face dataset, whose `Image()` column decodes them so); a
    /// `Loader` over the dataset takes it as its `exif_transpose` default.
    #[getter]
    fn exif_transpose(&self) -> bool {
        self.listing.exif_transpose()
    }

    /// Pillow's mode the images are decoded to: `"L"` (one channel) where the index says the
    /// source gave them so (shards of a grayscale Hugging Face dataset), else `"RGB"`; a
    /// `Loader` over the dataset takes it as its image mode.
    #[getter]
    fn mode(&self) -> &'static str {
        if self.listing.grayscale() {
            "L"
        } else {
            "RGB"
        }
    }

    /// The index JSON describing these shards (what `index.json` holds for them).
    fn index_json(&self) -> String {
        self.listing.index().to_json()
    }

    fn __len__(&self) -> usize {
        self.listing.len()
    }

    fn __repr__(&self) -> String {
        format!(
            "WebDataset(shards={}, samples={})",
            self.listing.urls().len(),
            self.listing.len()
        )
    }

    /// Pickles by its arguments: the shards are listed again when unpickled.
    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyTuple>)> {
        let py = slf.py();
        let a = slf.get().args.clone();
        // More arguments than pyo3 converts as one tuple: converted one by one.
        let args = [
            a.urls.into_bound_py_any(py)?,
            a.index.into_bound_py_any(py)?,
            a.num_samples.into_bound_py_any(py)?,
            a.label_key.into_bound_py_any(py)?,
            a.shuffle_buffer.into_bound_py_any(py)?,
            a.read_ahead_shards.into_bound_py_any(py)?,
            a.read_ahead_bytes.into_bound_py_any(py)?,
            a.cache_dir.into_bound_py_any(py)?,
            a.cache_limit_bytes.into_bound_py_any(py)?,
            a.retries.into_bound_py_any(py)?,
            a.retry_backoff.into_bound_py_any(py)?,
            a.storage_options.into_bound_py_any(py)?,
            a.range_bytes.into_bound_py_any(py)?,
            a.max_requests.into_bound_py_any(py)?,
            a.shuffle_initial.into_bound_py_any(py)?,
        ];
        Ok((slf.get_type().into_any(), PyTuple::new(py, args)?))
    }
}

impl PyWebDataset {
    /// The dataset for this process's loaders: the one constructed, or in a forked child one
    /// rebuilt there (once) from the inherited listing, with fetchers and a runtime of its own.
    /// The inherited one is leaked in the child, never dropped (its threads do not exist there).
    pub(crate) fn source(&self, py: Python<'_>) -> PyResult<Arc<WebDataset>> {
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if let Ok(data) = current.get("WebDataset") {
            return Ok(Arc::clone(data));
        }
        let index = self.listing.index();
        let options = self.args.options();
        // No I/O (the listing is in memory): built with the GIL held, so the lock is never
        // held while another thread could run Python.
        let rebuilt =
            Arc::new(WebDataset::from_index(index, options).map_err(|e| e.to_py_err(py))?);
        // Replacing drops the inherited ForkLocal, which leaks its value in a child.
        *current = ForkLocal::new(Arc::clone(&rebuilt));
        Ok(rebuilt)
    }
}

impl Args {
    fn options(&self) -> WebDatasetOptions {
        WebDatasetOptions {
            index: self.index.clone(),
            num_samples: self.num_samples,
            label_key: self.label_key.clone(),
            shuffle_buffer: self.shuffle_buffer,
            shuffle_initial: self.shuffle_initial,
            read_ahead_shards: self.read_ahead_shards,
            read_ahead_bytes: self.read_ahead_bytes,
            range_bytes: self.range_bytes,
            max_requests: self.max_requests,
            cache_dir: self.cache_dir.clone(),
            cache_limit_bytes: self.cache_limit_bytes,
            store: StoreOptions {
                storage_options: self
                    .storage_options
                    .iter()
                    .flatten()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
                retries: self.retries,
                retry_backoff: Duration::from_secs_f64(self.retry_backoff),
            },
        }
    }
}
