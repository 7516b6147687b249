//! Datasets as Python objects: `ImageFolder` and `FileList`, with torchvision's attribute names
//! (`root`, `classes`, `class_to_idx`, `samples`, `targets`).
//!
//! Listing runs with the GIL released. These are plain data (no threads, no locks held across
//! calls), so they are usable as they are after `fork()`; they pickle by their arguments and
//! list the files again when unpickled. Must not read or decode images.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;

use ferroloader_loader::{FileList, FileListOptions, ImageFolder, ImageFolderOptions, Source};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

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

    /// Class names in label order (sorted).
    #[getter]
    fn classes(&self) -> Vec<String> {
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

/// Files listed in a CSV or TSV file of `path,label` rows, paths relative to `root`.
#[pyclass(frozen, module = "ferroloader._native", name = "FileList")]
#[derive(Debug)]
pub(crate) struct PyFileList {
    pub(crate) inner: Arc<FileList>,
    root_given: Option<PathBuf>,
    delimiter: Option<String>,
    has_header: Option<bool>,
}

#[pymethods]
impl PyFileList {
    #[new]
    #[pyo3(signature = (path, root = None, delimiter = None, has_header = None))]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        root: Option<PathBuf>,
        delimiter: Option<String>,
        has_header: Option<bool>,
    ) -> PyResult<Self> {
        let mut options = FileListOptions::default();
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
        })
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
        self.inner
            .paths()
            .iter()
            .map(|p| p.as_os_str().to_owned())
            .collect()
    }

    /// Every sample's label, in list order (torchvision's name: `targets`).
    #[getter]
    fn targets(&self) -> Vec<i64> {
        self.inner.labels().to_vec()
    }

    /// `[(path, label), ...]` in list order.
    #[getter]
    fn samples(&self) -> Vec<(OsString, i64)> {
        self.inner
            .paths()
            .iter()
            .map(|p| p.as_os_str().to_owned())
            .zip(self.inner.labels().iter().copied())
            .collect()
    }

    /// `(path, label)` of sample `index` (negative indices count from the end).
    fn __getitem__(&self, index: isize) -> PyResult<(OsString, i64)> {
        let i = normalize_index(index, self.inner.len())?;
        Ok((
            self.inner.paths()[i].as_os_str().to_owned(),
            self.inner.labels()[i],
        ))
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
        );
        Ok((slf.get_type().into_any(), args.into_pyobject(slf.py())?))
    }
}

/// Python's indexing rule: `-len <= index < len`.
fn normalize_index(index: isize, len: usize) -> PyResult<usize> {
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

/// A dataset argument as the loader's source.
pub(crate) fn as_source(dataset: &Bound<'_, PyAny>) -> PyResult<Arc<dyn Source>> {
    if let Ok(folder) = dataset.cast::<PyImageFolder>() {
        let source: Arc<dyn Source> = folder.get().inner.clone();
        return Ok(source);
    }
    if let Ok(list) = dataset.cast::<PyFileList>() {
        let source: Arc<dyn Source> = list.get().inner.clone();
        return Ok(source);
    }
    Err(pyo3::exceptions::PyTypeError::new_err(format!(
        "dataset: expected a ferroloader.ImageFolder or ferroloader.FileList, got {}",
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
