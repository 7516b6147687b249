//! Datasets as Python objects: `ImageFolder` and `FileList`, with torchvision's attribute names
//! (`root`, `classes`, `class_to_idx`, `samples`, `targets`), and `ImageArray` (decoded images
//! in one `uint8` array, as torchvision's CIFAR datasets hold them).
//!
//! Listing runs with the GIL released. These are plain data (no threads, no locks held across
//! calls), so they are usable as they are after `fork()`; they pickle by their arguments and
//! list the files again when unpickled. Must not read or decode images.

use std::borrow::Cow;
use std::ffi::OsString;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use ferroloader_loader::dataset::read_file_into;
use ferroloader_loader::{
    Column, FileList, FileListOptions, ImageArray, ImageFolder, ImageFolderOptions, ListFormat,
    PathList, Source,
};
use numpy::ndarray::{ArrayD, IxDyn};
use numpy::{IntoPyArray, PyReadonlyArrayDyn, PyUntypedArrayMethods};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyTuple};

use crate::detach::run_detached;

/// torchvision's `ImageFolder`: images in `root/<class>/**/*`, labelled by the index of their
/// class in sorted order, listed in the order torchvision lists them.
#[pyclass(frozen, module = "ferroloader._native", name = "ImageFolder")]
#[derive(Debug)]
pub(crate) struct PyImageFolder {
    pub(crate) inner: Arc<ImageFolder>,
    extensions: Option<Vec<String>>,
    allow_empty: bool,
}

#[pymethods]
impl PyImageFolder {
    #[new]
    #[pyo3(signature = (root, extensions = None, allow_empty = false))]
    fn new(
        py: Python<'_>,
        root: PathBuf,
        extensions: Option<Vec<String>>,
        allow_empty: bool,
    ) -> PyResult<Self> {
        let mut options = ImageFolderOptions::default().allow_empty(allow_empty);
        if let Some(exts) = &extensions {
            if exts.is_empty() {
                return Err(PyValueError::new_err(
                    "extensions: give at least one file name ending (e.g. '.jpg')",
                ));
            }
            options = options.extensions(exts.iter().map(|e| e.to_lowercase()));
        }
        let folder = run_detached(py, |_| Some(ImageFolder::with_options(&root, &options)))?;
        Ok(PyImageFolder {
            inner: Arc::new(folder),
            extensions,
            allow_empty,
        })
    }

    /// The dataset root, as given.
    #[getter]
    fn root(&self) -> OsString {
        self.inner.root().as_os_str().to_owned()
    }

    /// Class names in label order (sorted), as `os.fsdecode` gives them.
    #[getter]
    fn classes(&self) -> Vec<OsString> {
        self.inner.classes().to_vec()
    }

    /// `{class name: label}`.
    #[getter]
    fn class_to_idx<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let dict = PyDict::new(py);
        for (i, name) in self.inner.classes().iter().enumerate() {
            dict.set_item(name, i)?;
        }
        Ok(dict)
    }

    /// `[(path, label), ...]` in index order, as torchvision's `samples`.
    #[getter]
    fn samples(&self) -> Vec<(OsString, usize)> {
        self.inner
            .samples()
            .iter()
            .map(|(p, c)| (p.as_os_str().to_owned(), *c))
            .collect()
    }

    /// Every sample's label, in index order (torchvision's `targets`).
    #[getter]
    fn targets(&self) -> Vec<usize> {
        self.inner.samples().iter().map(|(_, c)| *c).collect()
    }

    /// `(path, label)` of sample `index` (negative indices count from the end).
    fn __getitem__(&self, index: isize) -> PyResult<(OsString, usize)> {
        let samples = self.inner.samples();
        let i = normalize_index(index, samples.len())?;
        Ok((samples[i].0.as_os_str().to_owned(), samples[i].1))
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    fn __repr__(&self) -> String {
        format!(
            "ImageFolder(root={:?}, samples={}, classes={})",
            self.inner.root(),
            self.inner.len(),
            self.inner.classes().len()
        )
    }

    /// Pickles by its arguments: the folder is listed again when unpickled.
    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyTuple>)> {
        let this = slf.get();
        let args = (
            this.inner.root().as_os_str().to_owned(),
            this.extensions.clone(),
            this.allow_empty,
        );
        Ok((slf.get_type().into_any(), args.into_pyobject(slf.py())?))
    }
}

/// A column argument: a name (`str`) or a 0-based position (`int`).
#[derive(Clone, Debug, FromPyObject, IntoPyObject)]
pub(crate) enum ColumnArg {
    Index(usize),
    Name(String),
}

impl From<ColumnArg> for Column {
    fn from(arg: ColumnArg) -> Self {
        match arg {
            ColumnArg::Index(i) => Column::Index(i),
            ColumnArg::Name(n) => Column::Name(n),
        }
    }
}

/// Files listed in a CSV, TSV or JSON Lines file, paths relative to `root`.
#[pyclass(frozen, module = "ferroloader._native", name = "FileList")]
#[derive(Debug)]
pub(crate) struct PyFileList {
    pub(crate) inner: Arc<FileList>,
    root_given: Option<PathBuf>,
    delimiter: Option<String>,
    has_header: Option<bool>,
    path_column: Option<ColumnArg>,
    label_column: Option<ColumnArg>,
    format: Option<String>,
}

#[pymethods]
impl PyFileList {
    #[new]
    #[pyo3(signature = (
        path, root = None, delimiter = None, has_header = None, path_column = None,
        label_column = None, format = None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        root: Option<PathBuf>,
        delimiter: Option<String>,
        has_header: Option<bool>,
        path_column: Option<ColumnArg>,
        label_column: Option<ColumnArg>,
        format: Option<String>,
    ) -> PyResult<Self> {
        let mut options = FileListOptions::default();
        if let Some(f) = &format {
            options = options.format(match f.as_str() {
                "csv" | "tsv" | "delimited" => ListFormat::Delimited,
                "jsonl" | "json" => ListFormat::JsonLines,
                other => {
                    return Err(PyValueError::new_err(format!(
                        "format: expected 'csv', 'tsv' or 'jsonl', got {other:?}"
                    )))
                }
            });
            if f == "tsv" && delimiter.is_none() {
                options = options.delimiter(b'\t');
            }
        }
        if let Some(c) = &path_column {
            options = options.path_column(c.clone().into());
        }
        if let Some(c) = &label_column {
            options = options.label_column(c.clone().into());
        }
        if let Some(d) = &delimiter {
            match d.as_bytes() {
                [b] if d.is_ascii() => options = options.delimiter(*b),
                _ => {
                    return Err(PyValueError::new_err(format!(
                        "delimiter: must be one ASCII character, got {d:?}"
                    )))
                }
            }
        }
        if let Some(h) = has_header {
            options = options.has_header(h);
        }
        // Paths are relative to the list's own folder unless a root is given.
        let base = match &root {
            Some(r) => r.clone(),
            None => path
                .parent()
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(".")),
        };
        let list = run_detached(py, |_| Some(FileList::with_options(&path, &base, &options)))?;
        Ok(PyFileList {
            inner: Arc::new(list),
            root_given: root,
            delimiter,
            has_header,
            path_column,
            label_column,
            format,
        })
    }

    /// With class-name labels, the names in label order (sorted); `[]` for integer labels.
    #[getter]
    fn classes(&self) -> Vec<String> {
        self.inner.classes().to_vec()
    }

    /// `{class name: label}` for class-name labels; `{}` for integer labels.
    #[getter]
    fn class_to_idx<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let dict = PyDict::new(py);
        for (i, name) in self.inner.classes().iter().enumerate() {
            dict.set_item(name, i)?;
        }
        Ok(dict)
    }

    /// The list file.
    #[getter]
    fn path(&self) -> OsString {
        self.inner.list_path().as_os_str().to_owned()
    }

    /// The folder the listed paths are relative to.
    #[getter]
    fn root(&self) -> OsString {
        self.inner.root().as_os_str().to_owned()
    }

    /// Every sample's path (root joined), in list order.
    #[getter]
    fn paths(&self) -> Vec<OsString> {
        os_strings(self.inner.paths())
    }

    /// Every sample's label, in list order (torchvision's name: `targets`).
    #[getter]
    fn targets(&self) -> Vec<i64> {
        self.inner.labels().to_vec()
    }

    /// `[(path, label), ...]` in list order.
    #[getter]
    fn samples(&self) -> Vec<(OsString, i64)> {
        listed_samples(self.inner.samples())
    }

    /// `(path, label)` of sample `index` (negative indices count from the end).
    fn __getitem__(&self, index: isize) -> PyResult<(OsString, i64)> {
        listed_sample(self.inner.samples(), index)
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    fn __repr__(&self) -> String {
        format!(
            "FileList(path={:?}, root={:?}, samples={})",
            self.inner.list_path(),
            self.inner.root(),
            self.inner.len()
        )
    }

    /// Pickles by its arguments: the list is parsed again when unpickled.
    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyTuple>)> {
        let this = slf.get();
        let args = (
            this.inner.list_path().as_os_str().to_owned(),
            this.root_given.as_ref().map(|r| r.as_os_str().to_owned()),
            this.delimiter.clone(),
            this.has_header,
            this.path_column.clone(),
            this.label_column.clone(),
            this.format.clone(),
        );
        Ok((slf.get_type().into_any(), args.into_pyobject(slf.py())?))
    }
}

/// Files with labels from lists (what the Python side makes of torchvision's `ImageFolder`, a
/// list of `(path, label)`, a `Subset` or a `ConcatDataset`): read natively, no GIL per sample.
#[pyclass(frozen, module = "ferroloader._native", name = "PathList")]
#[derive(Debug)]
pub(crate) struct PyPathList {
    pub(crate) inner: Arc<PathList>,
}

#[pymethods]
impl PyPathList {
    #[new]
    fn new(paths: Vec<PathBuf>, labels: Vec<i64>) -> PyResult<Self> {
        let list =
            PathList::new(paths, labels).map_err(|e| PyValueError::new_err(e.to_string()))?;
        Ok(PyPathList {
            inner: Arc::new(list),
        })
    }

    /// Every sample's path, in index order.
    #[getter]
    fn paths(&self) -> Vec<OsString> {
        os_strings(self.inner.paths())
    }

    /// Every sample's label, in index order.
    #[getter]
    fn targets(&self) -> Vec<i64> {
        self.inner.labels().to_vec()
    }

    /// `[(path, label), ...]` in index order.
    #[getter]
    fn samples(&self) -> Vec<(OsString, i64)> {
        listed_samples(&self.inner)
    }

    /// `(path, label)` of sample `index` (negative indices count from the end).
    fn __getitem__(&self, index: isize) -> PyResult<(OsString, i64)> {
        listed_sample(&self.inner, index)
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    fn __repr__(&self) -> String {
        format!("PathList(samples={})", self.inner.len())
    }

    /// Pickles by its lists.
    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyTuple>)> {
        let this = slf.get();
        let args = (this.paths(), this.targets());
        Ok((slf.get_type().into_any(), args.into_pyobject(slf.py())?))
    }
}

/// Decoded images in one `uint8` array, `(N, H, W, 3)` RGB or `(N, H, W)` grayscale, with a
/// label each: copied in once, then read by the workers without the GIL.
#[pyclass(frozen, module = "ferroloader._native", name = "ImageArray")]
#[derive(Debug)]
pub(crate) struct PyImageArray {
    pub(crate) inner: Arc<ImageArray>,
}

#[pymethods]
impl PyImageArray {
    #[new]
    #[pyo3(signature = (images, labels, name = "ImageArray".to_owned()))]
    fn new(images: &Bound<'_, PyAny>, labels: Vec<i64>, name: String) -> PyResult<Self> {
        let py = images.py();
        // A tensor or a list becomes an array here; a copy only where it is not one already.
        let array = py
            .import("numpy")?
            .call_method1("ascontiguousarray", (images,))?;
        let array = array.extract::<PyReadonlyArrayDyn<'_, u8>>().map_err(|_| {
            let dtype = array
                .getattr("dtype")
                .map_or_else(|_| "?".to_owned(), |d| d.to_string());
            PyValueError::new_err(format!(
                "images: expected uint8 pixels (0-255), got {dtype}; convert with \
                 .astype(numpy.uint8) if the values are already in range"
            ))
        })?;
        let shape = match *array.shape() {
            [_, height, width] | [_, height, width, 1] => [height, width, 1],
            [_, height, width, channels] => [height, width, channels],
            ref other => {
                return Err(PyValueError::new_err(format!(
                    "images: expected an array of shape (N, H, W, 3) or (N, H, W), got {other:?}"
                )))
            }
        };
        let pixels = array.as_slice()?.to_vec();
        let inner = ImageArray::new(pixels, labels, shape, name)
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        Ok(PyImageArray {
            inner: Arc::new(inner),
        })
    }

    /// A copy of the images: `(N, H, W, 3)`, or `(N, H, W)` for grayscale.
    #[getter]
    fn images<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.array_of(py, Some(self.inner.len()), self.inner.pixels())
    }

    /// Every sample's label, in index order.
    #[getter]
    fn targets(&self) -> Vec<i64> {
        self.inner.labels().to_vec()
    }

    /// Pillow's mode of the images: `"RGB"`, or `"L"` for grayscale (samples then come out
    /// with one channel, as torchvision's `ToTensor` gives for an `L` image).
    #[getter]
    fn mode(&self) -> &'static str {
        if self.inner.image_shape()[2] == 1 {
            "L"
        } else {
            "RGB"
        }
    }

    /// What samples are called in errors (`name[index]`).
    #[getter]
    fn name(&self) -> String {
        self.inner.name().to_owned()
    }

    /// `(image, label)` of sample `index`: a `(H, W, 3)` or `(H, W)` copy of its pixels.
    fn __getitem__<'py>(
        &self,
        py: Python<'py>,
        index: isize,
    ) -> PyResult<(Bound<'py, PyAny>, i64)> {
        let i = normalize_index(index, self.inner.len())?;
        let image = self.array_of(py, None, self.inner.image(i))?;
        Ok((image, self.inner.labels()[i]))
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    fn __repr__(&self) -> String {
        let [height, width, channels] = self.inner.image_shape();
        format!(
            "ImageArray(name={:?}, samples={}, image_shape=({height}, {width}, {channels}))",
            self.inner.name(),
            self.inner.len()
        )
    }

    /// Pickles by its images and labels.
    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyTuple>)> {
        let py = slf.py();
        let this = slf.get();
        let args = (this.images(py)?, this.targets(), this.name());
        Ok((slf.get_type().into_any(), args.into_pyobject(py)?))
    }
}

impl PyImageArray {
    /// `pixels` as a new array of `count` images (one image when `None`), the channel axis
    /// dropped for grayscale as the images were given.
    fn array_of<'py>(
        &self,
        py: Python<'py>,
        count: Option<usize>,
        pixels: &[u8],
    ) -> PyResult<Bound<'py, PyAny>> {
        let [height, width, channels] = self.inner.image_shape();
        let mut shape: Vec<usize> = count.into_iter().collect();
        shape.extend([height, width]);
        if channels > 1 {
            shape.push(channels);
        }
        let array = ArrayD::from_shape_vec(IxDyn(&shape), pixels.to_vec())
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        Ok(array.into_pyarray(py).into_any())
    }
}

/// A map-style dataset whose `dataset[i]` is `(path or bytes, label)`: asked for each sample by
/// the worker that reads it, holding the GIL only for that call (a path is then read without it).
/// Labels are learnt as samples are read; the loader asks for a label only after reading its
/// sample. Labels are class indices: the Python side wraps a dataset whose targets are not
/// (`datasets.RecordedTargets`), so its labels are positions.
pub(crate) struct PyItems {
    dataset: Py<PyAny>,
    len: usize,
    labels: Vec<AtomicI64>,
}

impl fmt::Debug for PyItems {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PyItems")
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

/// What `dataset[i]` gave for the data.
enum Item {
    /// Bytes, copied into the worker's buffer.
    Copied,
    /// A file to read.
    File(PathBuf),
}

impl PyItems {
    pub(crate) fn new(dataset: &Bound<'_, PyAny>) -> PyResult<Self> {
        let len = dataset.len()?;
        let mut labels = Vec::new();
        labels.try_reserve_exact(len).map_err(|_| {
            pyo3::exceptions::PyMemoryError::new_err(format!("dataset: {len} labels"))
        })?;
        labels.resize_with(len, || AtomicI64::new(0));
        Ok(PyItems {
            dataset: dataset.clone().unbind(),
            len,
            labels,
        })
    }

    /// `dataset[index]`, checked against the protocol; bytes land in `buf`.
    fn fetch(&self, py: Python<'_>, index: usize, buf: &mut Vec<u8>) -> PyResult<Item> {
        let item = self.dataset.bind(py).get_item(index)?;
        let protocol = || {
            pyo3::exceptions::PyTypeError::new_err(format!(
                "dataset[{index}] returned {}, expected (path or bytes, label)",
                item.get_type()
                    .name()
                    .map_or_else(|_| "?".to_owned(), |n| n.to_string())
            ))
        };
        let (data, label): (Bound<'_, PyAny>, Bound<'_, PyAny>) =
            item.extract().map_err(|_| protocol())?;
        let label: i64 = label.extract().map_err(|_| {
            pyo3::exceptions::PyTypeError::new_err(format!(
                "dataset[{index}]: the target {} is not a class index (an integer), though \
                 dataset[0]'s is: the loader reads a dataset's targets as class indices when its \
                 first is one",
                label.repr().map_or_else(
                    |_| "?".to_owned(),
                    |r| r.to_string().chars().take(60).collect()
                )
            ))
        })?;
        self.labels[index].store(label, Ordering::Relaxed);
        if let Ok(bytes) = data.cast::<PyBytes>() {
            buf.clear();
            buf.extend_from_slice(bytes.as_bytes());
            return Ok(Item::Copied);
        }
        if let Ok(bytes) = data.cast::<PyByteArray>() {
            buf.clear();
            // `to_vec` copies under the GIL (a bytearray may change once it is released).
            buf.extend_from_slice(&bytes.to_vec());
            return Ok(Item::Copied);
        }
        let path: PathBuf = data.extract().map_err(|_| protocol())?;
        Ok(Item::File(path))
    }
}

impl Source for PyItems {
    fn len(&self) -> usize {
        self.len
    }

    fn read<'a>(&'a self, index: usize, buf: &'a mut Vec<u8>) -> io::Result<&'a [u8]> {
        // The error is named `dataset[index]` by the loader (`error_name`): the exception alone.
        let item = Python::attach(|py| {
            self.fetch(py, index, buf)
                .map_err(|e| io::Error::other(e.to_string()))
        })?;
        match item {
            Item::Copied => Ok(buf),
            Item::File(path) => read_file_into(&path, buf),
        }
    }

    fn label(&self, index: usize) -> i64 {
        self.labels[index].load(Ordering::Relaxed)
    }

    fn path(&self, index: usize) -> Cow<'_, Path> {
        Cow::Owned(PathBuf::from(format!("dataset[{index}]")))
    }

    /// The name the dataset gives the item (`ferroloader_item_name(index)`, a string: the
    /// Python side's wrappers of datasets whose items are bytes from a named row, a Hugging Face
    /// row's `train[3] (photo3.jpg)`), else `dataset[index] (its file)`: the item asked for
    /// again, where it is a path (bytes, or an item that fails now, leave `dataset[index]`).
    fn error_name(&self, index: usize) -> PathBuf {
        let named = Python::attach(|py| {
            let dataset = self.dataset.bind(py);
            if let Ok(name) =
                dataset.call_method1(pyo3::intern!(py, "ferroloader_item_name"), (index,))
            {
                if let Ok(name) = name.extract::<String>() {
                    return Some(PathBuf::from(name));
                }
            }
            let item = dataset.get_item(index).ok()?;
            let (data, _): (Bound<'_, PyAny>, Bound<'_, PyAny>) = item.extract().ok()?;
            let file = data.extract::<PathBuf>().ok()?;
            Some(PathBuf::from(format!(
                "dataset[{index}] ({})",
                file.display()
            )))
        });
        named.unwrap_or_else(|| self.path(index).into_owned())
    }
}

/// Paths as Python gets them (`os.fsdecode`).
fn os_strings(paths: &[PathBuf]) -> Vec<OsString> {
    paths.iter().map(|p| p.as_os_str().to_owned()).collect()
}

/// `[(path, label), ...]` of a list.
fn listed_samples(list: &PathList) -> Vec<(OsString, i64)> {
    os_strings(list.paths())
        .into_iter()
        .zip(list.labels().iter().copied())
        .collect()
}

/// `(path, label)` of sample `index` of a list (negative indices count from the end).
fn listed_sample(list: &PathList, index: isize) -> PyResult<(OsString, i64)> {
    let i = normalize_index(index, list.len())?;
    Ok((list.paths()[i].as_os_str().to_owned(), list.labels()[i]))
}

/// Python's indexing rule: `-len <= index < len`.
pub(crate) fn normalize_index(index: isize, len: usize) -> PyResult<usize> {
    let resolved = if index < 0 {
        len.checked_sub(index.unsigned_abs())
    } else {
        Some(index.unsigned_abs()).filter(|&i| i < len)
    };
    resolved.ok_or_else(|| {
        pyo3::exceptions::PyIndexError::new_err(format!(
            "index {index} is out of range for a dataset of {len} samples"
        ))
    })
}

/// A dataset argument as the loader's source: the native datasets as they are; anything else
/// (the Python side has turned every listable dataset into a `PathList` already) through the
/// `(path or bytes, label)` protocol.
pub(crate) fn as_source(dataset: &Bound<'_, PyAny>) -> PyResult<Arc<dyn Source>> {
    if let Ok(folder) = dataset.cast::<PyImageFolder>() {
        return Ok(folder.get().inner.clone());
    }
    if let Ok(list) = dataset.cast::<PyFileList>() {
        return Ok(list.get().inner.clone());
    }
    if let Ok(list) = dataset.cast::<PyPathList>() {
        return Ok(list.get().inner.clone());
    }
    if let Ok(array) = dataset.cast::<PyImageArray>() {
        return Ok(array.get().inner.clone());
    }
    if let Ok(table) = dataset.cast::<crate::table::PyEncodedTable>() {
        return Ok(table.get().inner.clone());
    }
    if let Ok(shards) = dataset.cast::<crate::webdataset::PyWebDataset>() {
        return Ok(shards.get().source(dataset.py())?);
    }
    if dataset.hasattr("__getitem__")? && dataset.hasattr("__len__")? {
        return Ok(Arc::new(PyItems::new(dataset)?));
    }
    Err(pyo3::exceptions::PyTypeError::new_err(format!(
        "dataset: expected a ferroloader dataset or a map-style dataset whose items are \
         (path or bytes, label), got {}",
        dataset.get_type().name()?
    )))
}

#[cfg(test)]
mod tests {
    use super::normalize_index;

    #[test]
    fn python_indexing_rule() {
        assert_eq!(normalize_index(0, 3).ok(), Some(0));
        assert_eq!(normalize_index(2, 3).ok(), Some(2));
        assert_eq!(normalize_index(-1, 3).ok(), Some(2));
        assert_eq!(normalize_index(-3, 3).ok(), Some(0));
        assert!(normalize_index(3, 3).is_err());
        assert!(normalize_index(-4, 3).is_err());
        assert!(normalize_index(0, 0).is_err());
        assert!(normalize_index(isize::MIN, 3).is_err());
    }
}
