//! torchvision v2's `MixUp` and `CutMix`, and timm's `FastCollateMixup`, run on a delivered
//! batch in place (`transforms::batch_mix`), with the GIL released: the Python side draws the
//! parameters per batch and mixes the labels. Must not draw or allocate per sample.

use ferroloader_loader::transforms::batch_mix::{
    cutmix_in_place, fast_collate_mix_in_place, mixup_in_place, BatchShape, MirrorMix,
};
use ferroloader_loader::transforms::Result as TransformResult;
use numpy::{Element, PyReadwriteArray4, PyUntypedArrayMethods};
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

/// Runs `op` on `images`, a C-contiguous `[B, C, H, W]` array of `T` written in place, with the
/// GIL released; `None` where `images` is no writable array of `T`.
fn on_batch<T: Element + Send>(
    py: Python<'_>,
    images: &Bound<'_, PyAny>,
    op: impl FnOnce(&mut [T], BatchShape) -> TransformResult<()> + Send,
) -> Option<PyResult<()>> {
    let mut array = images.extract::<PyReadwriteArray4<'_, T>>().ok()?;
    let shape = shape_of(array.shape());
    let Ok(values) = array.as_slice_mut() else {
        return Some(Err(PyValueError::new_err("images: not C-contiguous")));
    };
    Some(
        py.detach(|| op(values, shape))
            .map_err(|e| PyValueError::new_err(e.to_string())),
    )
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
    match (lam, r#box) {
        (Some(lam), None) => on_batch::<f32>(py, images, |v, s| {
            mixup_in_place(v, s, lam, &mut Vec::new())
        })
        .unwrap_or_else(|| {
            Err(PyTypeError::new_err(
                "images: MixUp needs a float32 [B, C, H, W] array",
            ))
        }),
        (None, Some(cut)) => on_batch::<f32>(py, images, |v, s| {
            cutmix_in_place(v, s, cut, &mut Vec::new())
        })
        .or_else(|| {
            on_batch::<u8>(py, images, |v, s| {
                cutmix_in_place(v, s, cut, &mut Vec::new())
            })
        })
        .unwrap_or_else(|| {
            Err(PyTypeError::new_err(
                "images: CutMix needs a float32 or uint8 [B, C, H, W] array",
            ))
        }),
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
    let mixes: Vec<MirrorMix> = mixes
        .into_iter()
        .map(|mix| match mix {
            None => MirrorMix::Keep,
            Some(MixArg::Blend(lam)) => MirrorMix::Blend(lam),
            Some(MixArg::Cut(cut)) => MirrorMix::Cut(cut),
        })
        .collect();
    on_batch::<u8>(py, images, |v, s| {
        fast_collate_mix_in_place(v, s, &mixes, &mut Vec::new())
    })
    .unwrap_or_else(|| {
        Err(PyTypeError::new_err(
            "images: FastCollateMixup needs a uint8 [B, C, H, W] array",
        ))
    })
}
