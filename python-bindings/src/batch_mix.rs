//! torchvision v2's `MixUp` and `CutMix`, and timm's `FastCollateMixup`, run on a delivered
//! batch in place (`transforms::batch_mix`), with the GIL released: the Python side draws the
//! parameters per batch and mixes the labels. Must not draw or allocate per sample.

use ferroloader_loader::transforms::batch_mix::{
    cutmix_in_place, fast_collate_mix_in_place, mixup_in_place, BatchShape, MirrorMix,
};
use numpy::{PyReadwriteArray4, PyUntypedArrayMethods};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;

fn shape_of(dims: &[usize]) -> BatchShape {
    BatchShape {
        samples: dims[0],
        channels: dims[1],
        height: dims[2],
        width: dims[3],
    }
}

/// Mixes `images` (a C-contiguous `[B, C, H, W]` array of the batch, written in place) as
/// `MixUp(lam)` does (float32 only, as torchvision's) or, given `box` `(x1, y1, x2, y2)`, as
/// `CutMix` does (float32 or uint8).
#[pyfunction]
#[pyo3(signature = (images, *, lam = None, r#box = None))]
pub(crate) fn mix_batch(
    py: Python<'_>,
    images: &Bound<'_, PyAny>,
    lam: Option<f64>,
    r#box: Option<(usize, usize, usize, usize)>,
) -> PyResult<()> {
    let value_error =
        |e: ferroloader_loader::transforms::Error| PyValueError::new_err(e.to_string());
    match (lam, r#box) {
        (Some(lam), None) => {
            let mut array = images
                .extract::<PyReadwriteArray4<'_, f32>>()
                .map_err(|_| {
                    PyTypeError::new_err("images: MixUp needs a float32 [B, C, H, W] array")
                })?;
            let shape = shape_of(array.shape());
            let values = array
                .as_slice_mut()
                .map_err(|_| PyValueError::new_err("images: not C-contiguous"))?;
            py.detach(|| mixup_in_place(values, shape, lam, &mut Vec::new()))
                .map_err(value_error)
        }
        (None, Some(cut)) => {
            if let Ok(mut array) = images.extract::<PyReadwriteArray4<'_, f32>>() {
                let shape = shape_of(array.shape());
                let values = array
                    .as_slice_mut()
                    .map_err(|_| PyValueError::new_err("images: not C-contiguous"))?;
                return py
                    .detach(|| cutmix_in_place(values, shape, cut, &mut Vec::new()))
                    .map_err(value_error);
            }
            let mut array = images.extract::<PyReadwriteArray4<'_, u8>>().map_err(|_| {
                PyTypeError::new_err("images: CutMix needs a float32 or uint8 [B, C, H, W] array")
            })?;
            let shape = shape_of(array.shape());
            let values = array
                .as_slice_mut()
                .map_err(|_| PyValueError::new_err("images: not C-contiguous"))?;
            py.detach(|| cutmix_in_place(values, shape, cut, &mut Vec::new()))
                .map_err(value_error)
        }
        _ => Err(PyTypeError::new_err(
            "mix_batch: give lam (MixUp) or box (CutMix)",
        )),
    }
}

/// One sample's mix as Python gives it: a float `lam` or a box `(x1, y1, x2, y2)`.
#[derive(FromPyObject)]
pub(crate) enum MixArg {
    Cut((usize, usize, usize, usize)),
    Blend(f64),
}

/// Mixes `images` (a C-contiguous uint8 `[B, C, H, W]` array of the batch, written in place) as
/// timm's `FastCollateMixup` does: sample `i` becomes `mixes[i]` of itself and sample
/// `B - 1 - i` as they were (`None`: kept; a float `lam`: blended and rounded; a box
/// `(x1, y1, x2, y2)`: the mirror's box). `mixes` has one entry per sample, or one per sample of
/// the first half (timm's `half` mode).
#[pyfunction]
pub(crate) fn fast_collate_mix(
    py: Python<'_>,
    images: &Bound<'_, PyAny>,
    mixes: Vec<Option<MixArg>>,
) -> PyResult<()> {
    let mut array = images.extract::<PyReadwriteArray4<'_, u8>>().map_err(|_| {
        PyTypeError::new_err("images: FastCollateMixup needs a uint8 [B, C, H, W] array")
    })?;
    let shape = shape_of(array.shape());
    let values = array
        .as_slice_mut()
        .map_err(|_| PyValueError::new_err("images: not C-contiguous"))?;
    let mixes: Vec<MirrorMix> = mixes
        .into_iter()
        .map(|mix| match mix {
            None => MirrorMix::Keep,
            Some(MixArg::Blend(lam)) => MirrorMix::Blend(lam),
            Some(MixArg::Cut(cut)) => MirrorMix::Cut(cut),
        })
        .collect();
    py.detach(|| fast_collate_mix_in_place(values, shape, &mixes, &mut Vec::new()))
        .map_err(|e| PyValueError::new_err(e.to_string()))
}
