//! torchvision v2's `MixUp` and `CutMix`, and timm's `FastCollateMixup`, run on a batch in place
//! (`transforms::batch_mix`): by the worker that completes the batch, on the parameters the
//! Python side planned for it ahead ([`PlannedMix`], `EpochIter.plan_mix`), or on a delivered
//! batch with the GIL released (`mix_batch`, `fast_collate_mix`). The Python side draws the
//! parameters per batch and mixes the labels. Must not draw or allocate per sample.

use ferroloader_loader::transforms::batch_mix::{
    cutmix_in_place, fast_collate_mix_in_place, mixup_in_place, BatchShape, MirrorMix,
};
use ferroloader_loader::transforms::Result as TransformResult;
use ferroloader_loader::{AxisOrder, BatchImagesMut, BatchOp, SampleLayout};
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

fn mirror_mixes(mixes: Vec<Option<MixArg>>) -> Vec<MirrorMix> {
    mixes
        .into_iter()
        .map(|mix| match mix {
            None => MirrorMix::Keep,
            Some(MixArg::Blend(lam)) => MirrorMix::Blend(lam),
            Some(MixArg::Cut(cut)) => MirrorMix::Cut(cut),
        })
        .collect()
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
    let mixes = mirror_mixes(mixes);
    on_batch::<u8>(py, images, |v, s| {
        fast_collate_mix_in_place(v, s, &mixes, &mut Vec::new())
    })
    .unwrap_or_else(|| {
        Err(PyTypeError::new_err(
            "images: FastCollateMixup needs a uint8 [B, C, H, W] array",
        ))
    })
}

/// The profile names a planned mix may have: the op, or the `RandomChoice`'s choice, or timm's
/// mode (static, as the profiler's custom op names are).
const MIX_NAMES: [&str; 9] = [
    "MixUp",
    "CutMix",
    "RandomChoice/MixUp",
    "RandomChoice/CutMix",
    "FastCollateMixup/batch",
    "FastCollateMixup/pair",
    "FastCollateMixup/elem",
    "FastCollateMixup/half",
    "FastCollateMixup",
];

/// One batch's mix with its parameters, planned by the Python side for a worker to run.
#[derive(Debug)]
pub(crate) struct PlannedMix {
    name: &'static str,
    kind: MixKind,
}

/// Which kernel, with its parameters.
#[derive(Debug)]
#[allow(clippy::enum_variant_names)] // the ops' own names
enum MixKind {
    MixUp(f64),
    CutMix((usize, usize, usize, usize)),
    Mirror(Vec<MirrorMix>),
}

impl PlannedMix {
    /// The mix `mix_batch` (`lam` or `box`) or `fast_collate_mix` (`mixes`) would run, named
    /// `name` in the profile.
    pub(crate) fn new(
        name: &str,
        lam: Option<f64>,
        cut: Option<(usize, usize, usize, usize)>,
        mixes: Option<Vec<Option<MixArg>>>,
    ) -> PyResult<Self> {
        let Some(&name) = MIX_NAMES.iter().find(|&&n| n == name) else {
            return Err(PyValueError::new_err(format!(
                "name: {name:?} is not a batch mix's ({})",
                MIX_NAMES.join(", ")
            )));
        };
        let kind =
            match (lam, cut, mixes) {
                (Some(lam), None, None) => MixKind::MixUp(lam),
                (None, Some(cut), None) => MixKind::CutMix(cut),
                (None, None, Some(mixes)) => MixKind::Mirror(mirror_mixes(mixes)),
                _ => return Err(PyTypeError::new_err(
                    "plan_mix: give one of lam (MixUp), box (CutMix) or mixes (FastCollateMixup)",
                )),
            };
        Ok(PlannedMix { name, kind })
    }
}

impl BatchOp for PlannedMix {
    fn name(&self) -> &'static str {
        self.name
    }

    fn apply(
        &self,
        images: BatchImagesMut<'_>,
        samples: usize,
        layout: SampleLayout,
    ) -> Result<(), String> {
        if layout.order != AxisOrder::Chw {
            return Err("batch mixing needs [C, H, W] samples".to_owned());
        }
        let [channels, height, width] = layout.shape;
        let shape = BatchShape {
            samples,
            channels,
            height,
            width,
        };
        let done = match (&self.kind, images) {
            (MixKind::MixUp(lam), BatchImagesMut::F32(v)) => {
                mixup_in_place(v, shape, *lam, &mut Vec::new())
            }
            (MixKind::CutMix(cut), BatchImagesMut::F32(v)) => {
                cutmix_in_place(v, shape, *cut, &mut Vec::new())
            }
            (MixKind::CutMix(cut), BatchImagesMut::U8(v)) => {
                cutmix_in_place(v, shape, *cut, &mut Vec::new())
            }
            (MixKind::Mirror(mixes), BatchImagesMut::U8(v)) => {
                fast_collate_mix_in_place(v, shape, mixes, &mut Vec::new())
            }
            _ => return Err("the batch's element type does not fit the mix".to_owned()),
        };
        done.map_err(|e| e.to_string())
    }
}
