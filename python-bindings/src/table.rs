//! `EncodedTable`: encoded images lying in Arrow buffers (a Hugging Face dataset's `Image()`
//! column), read by the workers where they lie, without the GIL and without a copy.
//!
//! Must not copy the buffers, nor keep anything of a Python object but a strong reference to
//! it: the Python side (`ferroloader.datasets`) decides which buffers and ranges make the rows.

use std::sync::Arc;

use ferroloader_loader::{ByteColumn, EncodedTable, SharedBytes, Source};
use numpy::PyReadonlyArray1;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

use crate::dataset::normalize_index;

/// Bytes owned by a Python object that never changes them: a `bytes`, or a `pyarrow.Buffer`
/// of an Arrow array (Arrow's format makes an array's buffers immutable once it is built).
struct HeldBytes {
    /// Keeps the memory alive; dropped (with the GIL, as pyo3 defers it) with the table.
    _owner: Py<PyAny>,
    ptr: *const u8,
    len: usize,
}

// SAFETY: the memory is only read, and stays valid and unchanged while `_owner` lives (see
// `HeldBytes::new`); a `Py<PyAny>` may be moved and shared between threads.
unsafe impl Send for HeldBytes {}
// SAFETY: as for `Send`: shared reads of memory nobody writes.
unsafe impl Sync for HeldBytes {}

impl AsRef<[u8]> for HeldBytes {
    fn as_ref(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: `ptr` points at `len` readable bytes that outlive `self` (they belong to
        // `_owner`, which `self` keeps alive) and that nothing writes to (`HeldBytes::new`).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl HeldBytes {
    /// Holds `object`'s bytes: a `bytes` object, or a CPU `pyarrow.Buffer` (exactly that type:
    /// its subclass `ResizableBuffer` may be resized, which moves its memory).
    fn new(object: &Bound<'_, PyAny>) -> PyResult<Self> {
        if let Ok(bytes) = object.cast::<PyBytes>() {
            let slice = bytes.as_bytes();
            return Ok(HeldBytes {
                _owner: object.clone().unbind(),
                ptr: slice.as_ptr(),
                len: slice.len(),
            });
        }
        let kind = object.get_type();
        let is_buffer = kind.module()? == "pyarrow.lib" && kind.name()? == "Buffer";
        if !is_buffer {
            return Err(PyTypeError::new_err(format!(
                "buffers: expected bytes or a pyarrow.Buffer, got {}",
                kind.name()?
            )));
        }
        if !object.getattr("is_cpu")?.extract::<bool>()? {
            return Err(PyValueError::new_err(
                "buffers: a pyarrow.Buffer in device memory; the workers read host memory",
            ));
        }
        let address: usize = object.getattr("address")?.extract()?;
        let len: usize = object.getattr("size")?.extract()?;
        Ok(HeldBytes {
            _owner: object.clone().unbind(),
            ptr: address as *const u8,
            len,
        })
    }
}

/// Pillow's mode name, as the table keeps it.
fn image_mode(mode: &str) -> PyResult<&'static str> {
    match mode {
        "RGB" => Ok("RGB"),
        "L" => Ok("L"),
        other => Err(PyValueError::new_err(format!(
            "mode: expected \"RGB\" or \"L\", got {other:?}"
        ))),
    }
}

/// One column as the Python side hands it: the buffers, and per row the buffer's index
/// (`2**32 - 1` for a null), the start and the length of its bytes.
type ColumnArgs<'py> = (
    Vec<Bound<'py, PyAny>>,
    PyReadonlyArray1<'py, u32>,
    PyReadonlyArray1<'py, u64>,
    PyReadonlyArray1<'py, u64>,
);

fn byte_column(name: &'static str, args: ColumnArgs<'_>) -> PyResult<ByteColumn> {
    let (buffers, buffer, start, len) = args;
    let held = buffers
        .iter()
        .map(|b| HeldBytes::new(b).map(|h| Arc::new(h) as SharedBytes))
        .collect::<PyResult<Vec<_>>>()?;
    ByteColumn::new(
        name,
        held,
        buffer.as_slice()?,
        start.as_slice()?,
        len.as_slice()?,
    )
    .map_err(|e| PyValueError::new_err(e.to_string()))
}

/// Encoded images with labels, each row's bytes a range of a shared buffer, or where it has
/// none, the file its path names. Made by `ferroloader.datasets` from a Hugging Face dataset.
#[pyclass(frozen, module = "ferroloader._native", name = "EncodedTable")]
pub(crate) struct PyEncodedTable {
    pub(crate) inner: Arc<EncodedTable>,
    /// Pillow's mode the dataset hands its images over in: `"RGB"`, or `"L"` for grayscale.
    mode: &'static str,
    /// Whether the dataset's own reading turns each image upright per its EXIF orientation
    /// (Hugging Face's `Image.decode_example` does; timm's reader of the same data does not).
    exif_transpose: bool,
    /// `(callable, args)` that makes this table again: how it pickles.
    origin: Option<Py<PyTuple>>,
}

#[pymethods]
impl PyEncodedTable {
    #[new]
    #[pyo3(signature = (
        images, paths, labels, name = "dataset".to_owned(), mode = "RGB", exif_transpose = false,
        origin = None
    ))]
    fn new(
        images: ColumnArgs<'_>,
        paths: Option<ColumnArgs<'_>>,
        labels: PyReadonlyArray1<'_, i64>,
        name: String,
        mode: &str,
        exif_transpose: bool,
        origin: Option<Bound<'_, PyTuple>>,
    ) -> PyResult<Self> {
        let mode = image_mode(mode)?;
        let labels = labels.as_slice()?.to_vec();
        let images = byte_column("images", images)?;
        let paths = match paths {
            Some(paths) => byte_column("paths", paths)?,
            None => ByteColumn::nulls(labels.len()),
        };
        let table = EncodedTable::new(images, paths, labels, name)
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        Ok(PyEncodedTable {
            inner: Arc::new(table),
            mode,
            exif_transpose,
            origin: origin.map(Bound::unbind),
        })
    }

    /// Every sample's label, in index order.
    #[getter]
    fn targets(&self) -> Vec<i64> {
        self.inner.labels().to_vec()
    }

    /// Pillow's mode of the images: `"RGB"`, or `"L"` (samples then come out with one
    /// channel, as torchvision's `ToTensor` gives for an `L` image).
    #[getter]
    fn mode(&self) -> &'static str {
        self.mode
    }

    /// The same rows (shared, not made again) handed over in `mode`, as a judgement of the
    /// images after the table is made finds it.
    fn with_mode(&self, py: Python<'_>, mode: &str) -> PyResult<Self> {
        Ok(PyEncodedTable {
            inner: self.inner.clone(),
            mode: image_mode(mode)?,
            exif_transpose: self.exif_transpose,
            origin: self.origin.as_ref().map(|o| o.clone_ref(py)),
        })
    }

    /// Whether the images are to be turned upright per their EXIF orientation, as the dataset
    /// they come from reads them.
    #[getter]
    fn exif_transpose(&self) -> bool {
        self.exif_transpose
    }

    /// `(encoded bytes, label)` of sample `index` (negative indices count from the end), read
    /// as a worker reads it.
    fn __getitem__<'py>(
        &self,
        py: Python<'py>,
        index: isize,
    ) -> PyResult<(Bound<'py, PyBytes>, i64)> {
        let i = normalize_index(index, self.inner.len())?;
        let table = &self.inner;
        let bytes = py
            .detach(|| {
                let mut buf = Vec::new();
                table
                    .read(i, &mut buf)
                    .map(<[u8]>::to_vec)
                    .map_err(|e| format!("{}: {e}", table.path(i).display()))
            })
            .map_err(pyo3::exceptions::PyOSError::new_err)?;
        Ok((PyBytes::new(py, &bytes), table.label(i)))
    }

    /// Where sample `index` comes from, as errors name it.
    fn describe(&self, index: isize) -> PyResult<String> {
        let i = normalize_index(index, self.inner.len())?;
        Ok(self.inner.path(i).display().to_string())
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    fn __repr__(&self) -> String {
        format!("EncodedTable(samples={})", self.inner.len())
    }

    /// Pickles as the `origin` it was made with says; without one it cannot.
    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        match &self.origin {
            Some(origin) => Ok(origin.bind(py).clone()),
            None => Err(PyTypeError::new_err(
                "EncodedTable holds references to Arrow buffers and cannot be pickled; pickle \
                 the dataset it was made from",
            )),
        }
    }
}
