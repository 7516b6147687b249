//! A delivered batch handed to numpy without a copy.
//!
//! The [`Batch`] moves into a [`BatchMemory`] object, which becomes the numpy arrays' `base`:
//! the images, labels and indices arrays point straight into the batch's ring buffer and keep it
//! alive; when the last of them (and anything made from them without a copy, such as
//! `torch.from_numpy` tensors) is gone, the `Batch` drops and its buffer goes back to the
//! loader's ring. Must never copy the images.

use ferroloader_loader::{Batch, BatchImages};
use numpy::ndarray::{ArrayView, ArrayView1, ArrayView4, Dimension};
use numpy::{Element, PyArray};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

use crate::fork::ForkLocal;

/// Owns a delivered batch while numpy arrays view it (it is their `base`).
#[pyclass(frozen, module = "ferroloader._native")]
#[derive(Debug)]
pub(crate) struct BatchMemory {
    batch: ForkLocal<Batch>,
}

#[pymethods]
impl BatchMemory {
    /// Address of the first image byte in the loader's ring buffer (the arrays' data pointer;
    /// for tests proving that nothing was copied).
    #[getter]
    fn images_address(&self) -> PyResult<usize> {
        Ok(self.batch.get("batch")?.image_bytes().as_ptr() as usize)
    }

    /// Samples in the batch.
    fn __len__(&self) -> PyResult<usize> {
        Ok(self.batch.get("batch")?.len())
    }

    /// Which batch of the epoch it is.
    #[getter]
    fn index(&self) -> PyResult<usize> {
        Ok(self.batch.get("batch")?.index())
    }

    /// The epoch it belongs to.
    #[getter]
    fn epoch(&self) -> PyResult<u64> {
        Ok(self.batch.get("batch")?.epoch())
    }

    /// Seconds the consumer's `next()` waited for it.
    #[getter]
    fn wait(&self) -> PyResult<f64> {
        Ok(self.batch.get("batch")?.wait().as_secs_f64())
    }
}

/// Images (float32 or uint8, `[B, ...sample shape]`), labels (int64 `[B]`) and dataset indices
/// (`uintp` `[B]`) of `batch`, as numpy arrays viewing its buffer.
pub(crate) fn into_arrays(
    py: Python<'_>,
    batch: Batch,
) -> PyResult<(Bound<'_, PyAny>, Bound<'_, PyAny>, Bound<'_, PyAny>)> {
    let owner = Bound::new(
        py,
        BatchMemory {
            batch: ForkLocal::new(batch),
        },
    )?;
    let is_f32 = matches!(
        owner.get().batch.get("batch")?.images(),
        BatchImages::F32(_)
    );
    let images = if is_f32 {
        batch_array(&owner, |b| match b.images() {
            BatchImages::F32(data) => images_view(b, data),
            BatchImages::U8(_) => Err(PyRuntimeError::new_err("batch changed type")),
        })?
        .into_any()
    } else {
        batch_array(&owner, |b| match b.images() {
            BatchImages::U8(data) => images_view(b, data),
            BatchImages::F32(_) => Err(PyRuntimeError::new_err("batch changed type")),
        })?
        .into_any()
    };
    let labels = batch_array(&owner, |b| Ok(ArrayView1::from(b.labels())))?;
    let indices = batch_array(&owner, |b| Ok(ArrayView1::from(b.indices())))?;
    Ok((images, labels.into_any(), indices.into_any()))
}

/// `[B, ...sample shape]` over a batch's images.
fn images_view<'a, T>(batch: &Batch, data: &'a [T]) -> PyResult<ArrayView4<'a, T>> {
    let shape = batch.shape();
    ArrayView4::from_shape(shape, data).map_err(|e| {
        PyRuntimeError::new_err(format!(
            "batch of shape {shape:?} does not match its buffer: {e}"
        ))
    })
}

/// A numpy array over part of the batch that `owner` holds (`select` picks it), with `owner`
/// as the array's `base`.
fn batch_array<'py, T, D>(
    owner: &Bound<'py, BatchMemory>,
    select: impl for<'a> FnOnce(&'a Batch) -> PyResult<ArrayView<'a, T, D>>,
) -> PyResult<Bound<'py, PyArray<T, D>>>
where
    T: Element,
    D: Dimension,
{
    let view = select(owner.get().batch.get("batch")?)?;
    // SAFETY: `view` borrows from the batch that `owner` owns (or from static data), and
    // nothing touches (let alone reallocates) the batch's buffer until `owner` is dropped: a
    // `Batch` gives its buffer back to the ring only in its destructor, and `owner` becomes the
    // `base` of the array, so Python keeps it alive as long as the array (or anything viewing
    // it without a copy, such as a tensor from `torch.from_numpy`). numpy marks the array
    // writable; writes from Python only reach this batch's own buffer, which Rust does not read
    // again before reusing it (see the report on `Batch::images_mut`).
    Ok(unsafe { PyArray::borrow_from_array(&view, owner.clone().into_any()) })
}
