//! A delivered batch handed to numpy without a copy.
//!
//! The [`Batch`] moves into a [`BatchMemory`] object, which becomes the numpy arrays' `base`:
//! the images, labels and indices arrays point straight into the batch's ring buffer and keep it
//! alive; when the last of them (and anything made from them without a copy, such as
//! `torch.from_numpy` tensors) is gone, the `Batch` drops and its buffer goes back to the
//! loader's ring. A batch of samples cut into parts (the views of `crate::views`) gives one
//! `[B, part]` array per part instead, each viewing its block of the buffer. Must never copy
//! the images.

use ferroloader_loader::{Batch, BatchImagesMut};
use numpy::ndarray::{
    ArrayViewMut1, ArrayViewMut2, ArrayViewMut4, Dimension, Ix2, Ix4, RawArrayViewMut,
};
use numpy::{Element, PyArray};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyList;

use crate::fork::ForkLocal;

/// Owns a delivered batch while numpy arrays view it (it is their `base`).
#[pyclass(frozen, module = "ferroloader._native")]
#[derive(Debug)]
pub(crate) struct BatchMemory {
    batch: ForkLocal<Batch>,
    /// Where the images start, kept apart so that reading it never borrows the images, which
    /// Python may be writing through the arrays.
    images_address: usize,
}

#[pymethods]
impl BatchMemory {
    /// Address of the first image byte in the loader's ring buffer (the arrays' data pointer;
    /// for tests proving that nothing was copied).
    #[getter]
    fn images_address(&self) -> usize {
        self.images_address
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

/// The images of a batch as a raw `[B, ...sample shape]` view, or one raw `[B, part]` view
/// per part, typed.
enum RawImages {
    F32(RawArrayViewMut<f32, Ix4>),
    U8(RawArrayViewMut<u8, Ix4>),
    F32Parts(Vec<RawArrayViewMut<f32, Ix2>>),
    U8Parts(Vec<RawArrayViewMut<u8, Ix2>>),
}

/// Images (float32 or uint8, `[B, ...sample shape]`; a list of `[B, part]` arrays, one per
/// part, when samples are cut into parts), labels (int64 `[B]`) and dataset indices (`uintp`
/// `[B]`) of `batch`, as writable numpy arrays viewing its buffer.
pub(crate) fn into_arrays(
    py: Python<'_>,
    mut batch: Batch,
) -> PyResult<(Bound<'_, PyAny>, Bound<'_, PyAny>, Bound<'_, PyAny>)> {
    let shape = batch.shape();
    let images_address = batch.image_bytes().as_ptr() as usize;
    let parts = part_ranges(&batch)?;
    // Raw views made from the batch's one `&mut` borrow of its buffers: the arrays write through
    // them, so they must carry write permission, which views made later from `&Batch` (the
    // owner below hands out only shared borrows) would not.
    let (images, labels, indices) = batch.parts_mut();
    let images = match (images, parts) {
        (BatchImagesMut::F32(data), None) => {
            RawImages::F32(images_view(shape, data)?.raw_view_mut())
        }
        (BatchImagesMut::U8(data), None) => RawImages::U8(images_view(shape, data)?.raw_view_mut()),
        (BatchImagesMut::F32(data), Some(parts)) => {
            RawImages::F32Parts(part_views(shape[0], &parts, 4, data)?)
        }
        (BatchImagesMut::U8(data), Some(parts)) => {
            RawImages::U8Parts(part_views(shape[0], &parts, 1, data)?)
        }
    };
    let labels = ArrayViewMut1::from(labels).raw_view_mut();
    let indices = ArrayViewMut1::from(indices).raw_view_mut();
    let owner = Bound::new(
        py,
        BatchMemory {
            batch: ForkLocal::new(batch),
            images_address,
        },
    )?
    .into_any();
    let images = match images {
        RawImages::F32(view) => borrow_into_array(view, &owner).into_any(),
        RawImages::U8(view) => borrow_into_array(view, &owner).into_any(),
        RawImages::F32Parts(views) => parts_list(py, views, &owner)?,
        RawImages::U8Parts(views) => parts_list(py, views, &owner)?,
    };
    let labels = borrow_into_array(labels, &owner).into_any();
    let indices = borrow_into_array(indices, &owner).into_any();
    Ok((images, labels, indices))
}

/// The byte range of each part's `[B, part]` block in the batch's images; `None` for a batch
/// of uncut samples.
fn part_ranges(batch: &Batch) -> PyResult<Option<Vec<std::ops::Range<usize>>>> {
    if batch.parts() < 2 {
        return Ok(None);
    }
    (0..batch.parts())
        .map(|p| {
            batch.part_range(p).ok_or_else(|| {
                PyRuntimeError::new_err(format!("batch part {p} lies outside its buffer"))
            })
        })
        .collect::<PyResult<_>>()
        .map(Some)
}

/// One raw `[samples, part]` view per part of `data` (`size` bytes an element), at the byte
/// ranges `parts` (disjoint, as the blocks of a buffer are).
fn part_views<T>(
    samples: usize,
    parts: &[std::ops::Range<usize>],
    size: usize,
    data: &mut [T],
) -> PyResult<Vec<RawArrayViewMut<T, Ix2>>> {
    let mut views = Vec::with_capacity(parts.len());
    let mut rest = data;
    let mut at = 0;
    for range in parts {
        let (start, end) = (range.start / size, range.end / size);
        let taken = std::mem::take(&mut rest);
        let (block, tail) = start
            .checked_sub(at)
            .and_then(|skip| taken.get_mut(skip..))
            .filter(|after| after.len() >= end - start)
            .map(|after| after.split_at_mut(end - start))
            .ok_or_else(|| {
                PyRuntimeError::new_err(format!("batch part at {range:?} does not fit its buffer"))
            })?;
        let width = (end - start).checked_div(samples).unwrap_or(0);
        let mut view = ArrayViewMut2::from_shape([samples, width], block).map_err(|e| {
            PyRuntimeError::new_err(format!("batch part of {samples} samples: {e}"))
        })?;
        views.push(view.raw_view_mut());
        rest = tail;
        at = end;
    }
    Ok(views)
}

/// A list of numpy arrays over `views`, each with `owner` as its `base`.
fn parts_list<'py, T: Element>(
    py: Python<'py>,
    views: Vec<RawArrayViewMut<T, Ix2>>,
    owner: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let arrays: Vec<Bound<'py, PyAny>> = views
        .into_iter()
        .map(|view| borrow_into_array(view, owner).into_any())
        .collect();
    Ok(PyList::new(py, arrays)?.into_any())
}

/// `[B, ...sample shape]` over a batch's images.
fn images_view<T>(shape: [usize; 4], data: &mut [T]) -> PyResult<ArrayViewMut4<'_, T>> {
    ArrayViewMut4::from_shape(shape, data).map_err(|e| {
        PyRuntimeError::new_err(format!(
            "batch of shape {shape:?} does not match its buffer: {e}"
        ))
    })
}

/// A numpy array over `view`, part of the batch that `owner` holds, with `owner` as its `base`.
fn borrow_into_array<'py, T, D>(
    view: RawArrayViewMut<T, D>,
    owner: &Bound<'py, PyAny>,
) -> Bound<'py, PyArray<T, D>>
where
    T: Element,
    D: Dimension,
{
    // SAFETY: `view` was made from the `&mut` borrow `Batch::parts_mut` gave of the batch's
    // heap buffers, which moving the `Batch` into `owner` does not move. Nothing else touches
    // that memory until `owner` is dropped: `BatchMemory` only reads the batch's other fields,
    // and a `Batch` gives its buffer back to the ring only in its destructor. `owner` becomes
    // the array's `base`, so Python keeps it alive as long as the array or anything viewing it
    // without a copy (a tensor from `torch.from_numpy`). The arrays are disjoint, and Python
    // reads and writes them only while holding the GIL.
    unsafe {
        let view = view.deref_into_view_mut();
        PyArray::borrow_from_array(&view, owner.clone())
    }
}
