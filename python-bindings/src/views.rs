//! Several views of each image in the native workers: a transform that returns a list of
//! views (`ferroloader._views`: MoCo's, SimCLR's, DINO's) whose every view converts natively
//! runs here, each view's pipeline writing its part of the sample's slot, so the views never
//! cross DataLoader's worker processes (about 2 MB a sample for DINO's ten).
//!
//! Each view is a part of the sample ([`SampleProcessor::sample_parts`]), so a batch buffer
//! holds view 0 of all its samples, then view 1 of all, ...: each view's batch is one
//! contiguous `[B, C, H, W]` (or `[B, H, W, C]`) block, which the consumer hands out as the
//! view's tensor without a copy (`crate::batch::into_arrays`). View
//! `v` draws from the key of [`view_seed`]`(seed, v)`: the draws `ferroloader._pydataset`'s
//! views path makes, so both give the same batches. With `shared_decode` the file is decoded
//! once, as the first view's decode step would, and every view reads that image as a binary
//! PNM (a region decode of the file gives the same pixels; the caller checks the views decode
//! alike and none scales in the DCT domain).
//!
//! Must not allocate per sample in the steady state (the decoded image and its PNM live in the
//! worker's scratch), nor run anything but the views' planned pipelines.

use ferroloader_loader::transforms::decode::DecodeContext;
use ferroloader_loader::transforms::image::RgbImage;
use ferroloader_loader::transforms::spec::PipelineContext;
use ferroloader_loader::transforms::Error as TransformError;
use ferroloader_loader::{
    DType, ImagePipeline, Op, OpHooks, SampleKey, SampleLayout, SampleProcessor, SlotParts,
    TransformOp,
};

use crate::tail::intern;

/// The seed view `view` of a sample draws from, for a loader seeded `seed`: the seed itself
/// for view 0 (a single view draws as the transform alone would), else SplitMix64's finalizer
/// of `seed + view * golden ratio`, so each view's draws are unrelated to the others' and to
/// other seeds' views.
pub(crate) fn view_seed(seed: u64, view: u64) -> u64 {
    if view == 0 {
        return seed;
    }
    let mut z = seed.wrapping_add(view.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// One view: its pipeline, its size, its span's name.
#[derive(Debug)]
struct View {
    pipeline: ImagePipeline,
    /// Its elements (`C * H * W`), the size of its part of the sample.
    len: usize,
    /// `view<v>`, interned once.
    span: &'static str,
}

/// The views' pipelines, planned.
///
/// Invariant: every view has the loader's dtype, and view `v` is part `v` of the sample
/// ([`Views::parts`]).
#[derive(Debug)]
pub(crate) struct Views {
    views: Vec<View>,
    dtype: DType,
    shared_decode: bool,
}

/// A worker's state for the views: each view's pipeline context, and the shared decode's.
#[derive(Default)]
pub(crate) struct ViewsScratch {
    contexts: Vec<Option<PipelineContext>>,
    decoder: Option<DecodeContext>,
    image: RgbImage,
    pnm: Vec<u8>,
}

impl ViewsScratch {
    pub(crate) fn retained_bytes(&self) -> usize {
        self.contexts
            .iter()
            .flatten()
            .map(PipelineContext::retained_bytes)
            .sum::<usize>()
            + self.image.as_raw().len()
            + self.pnm.capacity()
    }
}

impl Views {
    /// Plans the views; they must all write one dtype, and none defer its `Normalize` to the
    /// consumer (a uint8 view with `Normalize`: the Python loader keeps such views in Python).
    pub(crate) fn new(pipelines: Vec<ImagePipeline>, shared_decode: bool) -> Result<Self, String> {
        let Some(first) = pipelines.first() else {
            return Err("views: at least one view".to_owned());
        };
        let dtype = first.sample_layout().dtype;
        let mut views = Vec::with_capacity(pipelines.len());
        for (v, pipeline) in pipelines.into_iter().enumerate() {
            let layout = pipeline.sample_layout();
            if layout.dtype != dtype {
                return Err(format!(
                    "views: view {v} writes {:?} values, view 0 {dtype:?}: one batch holds one dtype",
                    layout.dtype
                ));
            }
            if pipeline.pipeline().deferred_normalize().is_some() {
                return Err(format!(
                    "views: view {v} leaves its Normalize to the consumer (uint8 output)"
                ));
            }
            let len = layout.shape.iter().product();
            views.push(View {
                pipeline,
                len,
                span: intern(format!("view{v}")),
            });
        }
        Ok(Views {
            views,
            dtype,
            shared_decode,
        })
    }

    /// The first view's pipeline (what the profile names the decoder after).
    pub(crate) fn first(&self) -> &ImagePipeline {
        &self.views[0].pipeline
    }

    /// Each view's sample shape, in order.
    pub(crate) fn shapes(&self) -> Vec<[usize; 3]> {
        self.views
            .iter()
            .map(|v| v.pipeline.sample_layout().shape)
            .collect()
    }

    /// Each view's elements: the parts the loader lays out block after block.
    pub(crate) fn parts(&self) -> Vec<usize> {
        self.views.iter().map(|v| v.len).collect()
    }

    /// Each view's axis order is its own; the loader's layout is the views' elements in a row.
    pub(crate) fn layout(&self) -> SampleLayout {
        let total = self.views.iter().map(|v| v.len).sum();
        SampleLayout::chw(self.dtype, 1, 1, total)
    }

    pub(crate) fn process(
        &self,
        bytes: &[u8],
        key: SampleKey,
        scratch: &mut ViewsScratch,
        mut out: SlotParts<'_>,
        hooks: &mut dyn OpHooks,
    ) -> Result<(), TransformError> {
        if out.len() != self.views.len() {
            return Err(TransformError::InvalidArgument {
                name: "views",
                reason: format!(
                    "{} views, a sample of {} parts",
                    self.views.len(),
                    out.len()
                ),
            });
        }
        scratch.contexts.resize_with(self.views.len(), || None);
        let ViewsScratch {
            contexts,
            decoder,
            image,
            pnm,
        } = scratch;
        let input: &[u8] = if self.shared_decode {
            hooks.enter(Op::Transform(TransformOp::Decode));
            let decoded = self.decode_once(bytes, decoder, image, pnm);
            hooks.exit(Op::Transform(TransformOp::Decode));
            decoded?;
            pnm
        } else {
            bytes
        };
        for (v, (view, context)) in self.views.iter().zip(contexts.iter_mut()).enumerate() {
            let key = SampleKey {
                seed: view_seed(key.seed, v as u64),
                ..key
            };
            // Checked above: as many parts as views.
            let Some(slot) = out.part(v) else {
                continue;
            };
            hooks.enter(Op::Custom(view.span));
            let done = view.pipeline.process(input, key, context, slot, hooks);
            hooks.exit(Op::Custom(view.span));
            done?;
        }
        Ok(())
    }

    /// Decodes `bytes` as the first view's decode step would, into `pnm` as a binary PNM.
    fn decode_once(
        &self,
        bytes: &[u8],
        decoder: &mut Option<DecodeContext>,
        image: &mut RgbImage,
        pnm: &mut Vec<u8>,
    ) -> Result<(), TransformError> {
        let context = match decoder {
            Some(context) => context,
            None => decoder.insert(DecodeContext::new(
                self.first().pipeline().spec().decode_options(),
            )?),
        };
        context.decode(bytes, image)?;
        pnm.clear();
        // `write!` into a Vec cannot fail.
        let _ = std::io::Write::write_fmt(
            pnm,
            format_args!("P6\n{} {}\n255\n", image.width(), image.height()),
        );
        pnm.extend_from_slice(image.as_raw());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn view_seeds_keep_view_zero_and_spread_the_others() {
        assert_eq!(view_seed(7, 0), 7);
        // Pinned: `ferroloader._views.view_seed` and the worker-process views path use it.
        assert_eq!(view_seed(7, 1), 0x63cb_e1e4_5932_0dd7);
        let seen: std::collections::HashSet<u64> = (0..64)
            .flat_map(|seed| (0..16).map(move |view| view_seed(seed, view)))
            .collect();
        assert_eq!(seen.len(), 64 * 16);
    }
}
