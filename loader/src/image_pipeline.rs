//! The transforms crate's planned [`Pipeline`] as a [`SampleProcessor`]: what the loader runs
//! for image classification.
//!
//! Only translates (slot types, op names, the per-sample RNG key); the ops themselves live in
//! `ferroloader_transforms` and must not be reimplemented here.

use ferroloader_transforms::fused::{OutputKind, OutputSlot};
use ferroloader_transforms::rng::sample_rng_repeat;
use ferroloader_transforms::spec::{OpObserver, Pipeline, PipelineContext, PipelineSpec};
use ferroloader_transforms::Error as TransformError;

use crate::process::{
    DType, Op, OpHooks, SampleKey, SampleLayout, SampleProcessor, SlotMut, TransformOp,
};

/// Decode + torchvision ops per sample, planned once from a [`PipelineSpec`].
#[derive(Clone, Debug)]
pub struct ImagePipeline {
    pipeline: Pipeline,
}

impl ImagePipeline {
    /// Plans `spec`; errors name the bad op or argument.
    pub fn new(spec: PipelineSpec) -> Result<Self, TransformError> {
        Ok(ImagePipeline {
            pipeline: Pipeline::new(spec)?,
        })
    }

    /// The planned pipeline.
    pub fn pipeline(&self) -> &Pipeline {
        &self.pipeline
    }
}

/// Forwards the transforms' op boundaries to the loader's hooks.
struct Forward<'a>(&'a mut dyn OpHooks);

impl OpObserver for Forward<'_> {
    #[inline]
    fn enter(&mut self, op: TransformOp) {
        self.0.enter(Op::Transform(op));
    }
    #[inline]
    fn exit(&mut self, op: TransformOp) {
        self.0.exit(Op::Transform(op));
    }
    #[inline]
    fn enter_named(&mut self, name: &'static str) {
        self.0.enter(Op::Custom(name));
    }
    #[inline]
    fn exit_named(&mut self, name: &'static str) {
        self.0.exit(Op::Custom(name));
    }
}

impl SampleProcessor for ImagePipeline {
    /// Made on the worker's first sample, so a failure to set up the decoder is reported like
    /// any other sample error instead of aborting the worker.
    type Scratch = Option<PipelineContext>;

    fn new_scratch(&self) -> Self::Scratch {
        None
    }

    fn scratch_bytes(&self, scratch: &Self::Scratch) -> usize {
        scratch.as_ref().map_or(0, PipelineContext::retained_bytes)
    }

    fn sample_layout(&self) -> SampleLayout {
        let (h, w) = self.pipeline.output_size();
        let (h, w) = (h as usize, w as usize);
        let c = self.pipeline.channels();
        match self.pipeline.output_kind() {
            OutputKind::F32Chw { .. } | OutputKind::F32ChwUnnormalized { .. } => {
                SampleLayout::chw(DType::F32, c, h, w)
            }
            OutputKind::U8Chw => SampleLayout::chw(DType::U8, c, h, w),
            OutputKind::U8Hwc => SampleLayout::hwc(DType::U8, h, w, c),
        }
    }

    fn process(
        &self,
        bytes: &[u8],
        key: SampleKey,
        scratch: &mut Self::Scratch,
        out: SlotMut<'_>,
        hooks: &mut dyn OpHooks,
    ) -> Result<(), TransformError> {
        let ctx = match scratch {
            Some(ctx) => ctx,
            None => scratch.insert(self.pipeline.new_context()?),
        };
        let out = match out {
            SlotMut::F32(s) => OutputSlot::F32(s),
            SlotMut::U8(s) => OutputSlot::U8(s),
        };
        let mut rng = sample_rng_repeat(key.seed, key.epoch, key.index, key.repeat);
        self.pipeline
            .run(bytes, &mut rng, ctx, out, &mut Forward(hooks))
            .map(|_| ())
    }
}
