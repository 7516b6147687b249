//! The contract between the loader and the image pipeline it runs on every sample.
//!
//! The loader reads a sample's bytes and hands them to a [`SampleProcessor`] together with the
//! sample's random key, a per-worker scratch state and the batch slot to write into; op hooks
//! ([`OpHooks`]) let the profiler time every op. This module must not know any concrete op or
//! image format: the pipeline (decode, crop, resize, normalize) is plugged in by implementing the
//! trait, so the loader never depends on how it is built.

use std::fmt;

use bytes::BytesMut;

pub use ferroloader_transforms::spec::Op as TransformOp;

/// Element type of a processed sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    /// 32-bit float (a normalized tensor).
    F32,
    /// 8-bit unsigned (raw pixels, for GPU-side normalization).
    U8,
}

impl DType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::U8 => 1,
        }
    }
}

/// Axis order of a processed sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AxisOrder {
    /// Channels, height, width (torch's `ToTensor` layout).
    Chw,
    /// Height, width, channels (packed pixels).
    Hwc,
}

/// Element type and shape of one processed sample; every sample of a loader has the same layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SampleLayout {
    /// Element type.
    pub dtype: DType,
    /// What the three dimensions of `shape` are.
    pub order: AxisOrder,
    /// The three dimensions, in `order`.
    pub shape: [usize; 3],
}

impl SampleLayout {
    /// A `[C, H, W]` sample.
    pub fn chw(dtype: DType, channels: usize, height: usize, width: usize) -> Self {
        SampleLayout {
            dtype,
            order: AxisOrder::Chw,
            shape: [channels, height, width],
        }
    }

    /// A `[H, W, C]` sample.
    pub fn hwc(dtype: DType, height: usize, width: usize, channels: usize) -> Self {
        SampleLayout {
            dtype,
            order: AxisOrder::Hwc,
            shape: [height, width, channels],
        }
    }

    /// Elements per sample, or `None` if the product overflows.
    pub fn numel(&self) -> Option<usize> {
        self.shape
            .iter()
            .try_fold(1usize, |acc, &d| acc.checked_mul(d))
    }

    /// Bytes per sample, or `None` if it overflows.
    pub fn byte_len(&self) -> Option<usize> {
        self.numel()?.checked_mul(self.dtype.size())
    }
}

/// The batch slot one sample is written into: exactly one sample's elements.
///
/// The slot holds whatever an earlier batch left there (buffers are reused), so a processor must
/// write every element.
#[derive(Debug)]
pub enum SlotMut<'a> {
    /// A float sample.
    F32(&'a mut [f32]),
    /// A byte sample.
    U8(&'a mut [u8]),
}

impl SlotMut<'_> {
    /// Elements in the slot.
    pub fn len(&self) -> usize {
        match self {
            SlotMut::F32(s) => s.len(),
            SlotMut::U8(s) => s.len(),
        }
    }

    /// Whether the slot has no elements (never the case for a loader's slots).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The batch slots of one sample cut into parts ([`SampleProcessor::sample_parts`]): part `p`
/// of every sample of a batch lies in the batch's block `p`, so a part's batch is one
/// contiguous `[B, part]` run of the buffer (the views of a multi-view transform, each handed
/// out as its own tensor without a copy).
///
/// Invariant: with float samples every part is `f32`-aligned (checked when made), so
/// [`SlotParts::part`] fails only for a part that does not exist.
#[derive(Debug)]
pub struct SlotParts<'a> {
    dtype: DType,
    pieces: &'a mut [BytesMut],
}

impl<'a> SlotParts<'a> {
    /// The parts over `pieces`, or why they cannot hold `dtype` elements.
    pub(crate) fn new(dtype: DType, pieces: &'a mut [BytesMut]) -> Result<Self, String> {
        if dtype == DType::F32 {
            for piece in pieces.iter_mut() {
                bytemuck::try_cast_slice_mut::<u8, f32>(piece)
                    .map_err(|e| format!("batch slot is not f32-aligned: {e}"))?;
            }
        }
        Ok(SlotParts { dtype, pieces })
    }

    /// Parts of the sample.
    pub fn len(&self) -> usize {
        self.pieces.len()
    }

    /// Whether the sample has no parts (never the case for a loader's slots).
    pub fn is_empty(&self) -> bool {
        self.pieces.is_empty()
    }

    /// Part `part`, exactly its elements, every one to be written; `None` past the last part.
    pub fn part(&mut self, part: usize) -> Option<SlotMut<'_>> {
        let piece = self.pieces.get_mut(part)?;
        Some(match self.dtype {
            DType::U8 => SlotMut::U8(piece),
            // Cannot fail: checked in `new`.
            DType::F32 => SlotMut::F32(bytemuck::try_cast_slice_mut(piece).ok()?),
        })
    }
}

/// What a sample's randomness is derived from: the same key gives the same draws whatever the
/// number of workers or which worker runs the sample (feed it to
/// `ferroloader_transforms::rng::sample_rng_repeat(seed, epoch, index, repeat)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SampleKey {
    /// The loader's seed.
    pub seed: u64,
    /// The epoch being loaded.
    pub epoch: u64,
    /// The sample's index in the dataset (not its position in the epoch).
    pub index: u64,
    /// Which copy of `index` this is, so that copies draw apart (see
    /// [`crate::sampler::plan_repeats`]): 0 for an index's first visit in the epoch's plan
    /// (the only one without repeats; its draws are those of before copies were numbered),
    /// else a number no other copy of `index` in the epoch gets, on this rank or (for a
    /// distributed sampler the user gave, or the loader's own cut) any other.
    pub repeat: u64,
}

/// A step of sample processing that hooks can time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Op {
    /// Reading the sample's bytes from the dataset (run by the loader itself).
    Read,
    /// One of the image ops of the transforms crate (decode, crop, resize, fused, ...).
    Transform(TransformOp),
    /// The processor as a whole: named in errors raised outside any op span.
    Process,
    /// The loader touching the pages of a sample's slot in a batch buffer that was never used
    /// before (run by the loader itself, before [`Op::Read`]). A new buffer's memory is only
    /// mapped on first write; without this op those page faults would land in whichever op
    /// writes the slot first, and a short profile would overstate it several times.
    FirstTouch,
    /// Any other op, by name.
    Custom(&'static str),
}

impl Op {
    /// A short lowercase name, stable across versions (used in traces and error messages).
    pub fn name(&self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Transform(op) => op.name(),
            Op::Process => "process",
            Op::FirstTouch => "first_touch",
            Op::Custom(name) => name,
        }
    }
}

impl From<TransformOp> for Op {
    fn from(op: TransformOp) -> Self {
        Op::Transform(op)
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where a sample is being processed; passed to [`OpHooks::sample_start`] and
/// [`OpHooks::sample_end`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SampleContext {
    /// Worker thread number, `0..num_workers`.
    pub worker: usize,
    /// The epoch.
    pub epoch: u64,
    /// The planned batch the sample belongs to (its position divided by the batch size).
    pub batch: usize,
    /// The same batch numbered across every epoch of the loader (unique per loader: each epoch
    /// reserves a run of numbers when it starts); the batch number of profiles.
    pub batch_id: u64,
    /// The sample's slot in that batch.
    pub slot: usize,
    /// The sample's position in the epoch's order.
    pub position: usize,
    /// The sample's index in the dataset.
    pub index: usize,
}

/// Callbacks around every sample and every op, one value per worker thread (so `&mut self` and no
/// locking). Every method defaults to doing nothing; the profiler implements them.
///
/// Must stay cheap: the loader calls these a handful of times per sample.
pub trait OpHooks {
    /// A worker starts a sample (before its bytes are read).
    #[inline]
    fn sample_start(&mut self, _ctx: &SampleContext) {}
    /// An op starts.
    #[inline]
    fn enter(&mut self, _op: Op) {}
    /// An op ends (also when it failed).
    #[inline]
    fn exit(&mut self, _op: Op) {}
    /// The worker is done with the sample; `ok` is false when it failed or panicked.
    #[inline]
    fn sample_end(&mut self, _ctx: &SampleContext, _ok: bool) {}
}

/// Runs `f` inside an `op` span of `hooks`: `enter(op)`, `f()`, `exit(op)`.
#[inline]
pub fn in_op<H: OpHooks + ?Sized, T>(hooks: &mut H, op: Op, f: impl FnOnce() -> T) -> T {
    hooks.enter(op);
    let out = f();
    hooks.exit(op);
    out
}

/// Makes the hooks of each worker thread of an epoch.
pub trait Instrument: Send + Sync + 'static {
    /// The per-worker hooks.
    type Hooks: OpHooks + Send + 'static;
    /// Hooks for worker `worker` (`0..num_workers`), called on that worker's thread when it starts.
    fn worker_hooks(&self, worker: usize) -> Self::Hooks;
}

/// Hooks that do nothing; the default [`Instrument`].
#[derive(Clone, Copy, Debug, Default)]
pub struct NoHooks;

impl OpHooks for NoHooks {}

impl Instrument for NoHooks {
    type Hooks = NoHooks;
    fn worker_hooks(&self, _worker: usize) -> NoHooks {
        NoHooks
    }
}

/// Turns one sample's bytes into one batch slot: the image pipeline the loader runs.
///
/// Must be deterministic: the output may depend only on `bytes` and `key` (not on the scratch's
/// history or the thread), which is what makes batches bit-identical whatever the number of
/// workers. May panic: the loader catches it, reports the sample and gives the worker a fresh
/// scratch.
pub trait SampleProcessor: Send + Sync + 'static {
    /// Per-worker reusable state (decoder handle, resizer, intermediate images), made once per
    /// worker and kept across samples and epochs so the steady state allocates nothing.
    type Scratch: Send + 'static;

    /// A fresh scratch state.
    fn new_scratch(&self) -> Self::Scratch;

    /// Bytes `scratch` holds on to, so that the loader can drop a scratch that one outlier
    /// sample grew (see [`crate::LoaderOptions::scratch_limit`]). Default: 0, never dropped.
    fn scratch_bytes(&self, _scratch: &Self::Scratch) -> usize {
        0
    }

    /// The layout of every sample this processor writes. Called once, when the loader is built.
    fn sample_layout(&self) -> SampleLayout;

    /// Processes one sample into `out` (exactly one sample of [`Self::sample_layout`], every
    /// element to be written), running each op inside `hooks.enter(op)` / `hooks.exit(op)`.
    fn process(
        &self,
        bytes: &[u8],
        key: SampleKey,
        scratch: &mut Self::Scratch,
        out: SlotMut<'_>,
        hooks: &mut dyn OpHooks,
    ) -> Result<(), ferroloader_transforms::Error>;

    /// How each sample is cut into parts laid out block after block in a batch buffer:
    /// elements per part, in order, summing to the layout's elements; empty (the default):
    /// one part, the whole sample, so a batch is `[B, ...sample shape]`. With parts, a batch
    /// of `B` samples (`rows`, see [`crate::Batch::part`]) holds part `p` of sample `i` at
    /// element `rows * sum(parts[..p]) + i * parts[p]`. Called once, when the loader is built.
    fn sample_parts(&self) -> Vec<usize> {
        Vec::new()
    }

    /// Processes one sample into its parts (those of [`Self::sample_parts`], every element to
    /// be written). The default, for a processor of one part, runs [`Self::process`] on it.
    fn process_parts(
        &self,
        bytes: &[u8],
        key: SampleKey,
        scratch: &mut Self::Scratch,
        mut out: SlotParts<'_>,
        hooks: &mut dyn OpHooks,
    ) -> Result<(), ferroloader_transforms::Error> {
        let parts = out.len();
        match out.part(0) {
            Some(slot) if parts == 1 => self.process(bytes, key, scratch, slot, hooks),
            _ => Err(ferroloader_transforms::Error::InvalidArgument {
                name: "sample_parts",
                reason: format!(
                    "a processor without process_parts writes one part, the loader gave {parts}"
                ),
            }),
        }
    }
}

/// Wraps a worker's hooks to remember which op was running, so a failure can name it without
/// the processor having to. Fixed size, no allocation.
pub(crate) struct OpTracker<'a, H: OpHooks + ?Sized> {
    inner: &'a mut H,
    open: [Op; TRACKED_DEPTH],
    depth: usize,
    last_exited: Option<Op>,
}

/// Nesting depth of op spans the tracker remembers (deeper ones are counted, not named).
const TRACKED_DEPTH: usize = 4;

impl<'a, H: OpHooks + ?Sized> OpTracker<'a, H> {
    pub(crate) fn new(inner: &'a mut H) -> Self {
        OpTracker {
            inner,
            open: [Op::Process; TRACKED_DEPTH],
            depth: 0,
            last_exited: None,
        }
    }

    pub(crate) fn inner(&mut self) -> &mut H {
        self.inner
    }

    /// The op to blame for a failure: the innermost op still open, else the last one to end
    /// (processors usually close a span before propagating its error), else [`Op::Process`].
    pub(crate) fn failing_op(&self) -> Op {
        if self.depth > 0 {
            self.open[self.depth.min(TRACKED_DEPTH) - 1]
        } else {
            self.last_exited.unwrap_or(Op::Process)
        }
    }
}

impl<H: OpHooks + ?Sized> OpHooks for OpTracker<'_, H> {
    #[inline]
    fn enter(&mut self, op: Op) {
        if self.depth < TRACKED_DEPTH {
            self.open[self.depth] = op;
        }
        self.depth += 1;
        self.inner.enter(op);
    }

    #[inline]
    fn exit(&mut self, op: Op) {
        self.depth = self.depth.saturating_sub(1);
        self.last_exited = Some(op);
        self.inner.exit(op);
    }

    #[inline]
    fn sample_start(&mut self, ctx: &SampleContext) {
        self.inner.sample_start(ctx);
    }

    #[inline]
    fn sample_end(&mut self, ctx: &SampleContext, ok: bool) {
        self.inner.sample_end(ctx, ok);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_sizes() {
        let l = SampleLayout::chw(DType::F32, 3, 224, 224);
        assert_eq!(l.numel(), Some(3 * 224 * 224));
        assert_eq!(l.byte_len(), Some(4 * 3 * 224 * 224));
        let l = SampleLayout::hwc(DType::U8, 2, 5, 3);
        assert_eq!(l.shape, [2, 5, 3]);
        assert_eq!(l.byte_len(), Some(30));
        assert_eq!(
            SampleLayout::chw(DType::F32, usize::MAX, 2, 1).byte_len(),
            None
        );
    }

    #[test]
    fn tracker_blames_the_open_or_last_op() {
        let mut hooks = NoHooks;
        let mut t = OpTracker::new(&mut hooks);
        assert_eq!(t.failing_op(), Op::Process);
        t.enter(Op::Transform(TransformOp::Fused));
        t.enter(Op::Transform(TransformOp::Decode));
        assert_eq!(t.failing_op(), Op::Transform(TransformOp::Decode));
        t.exit(Op::Transform(TransformOp::Decode));
        assert_eq!(t.failing_op(), Op::Transform(TransformOp::Fused));
        t.exit(Op::Transform(TransformOp::Fused));
        assert_eq!(t.failing_op(), Op::Transform(TransformOp::Fused));
        in_op(&mut t, Op::Transform(TransformOp::Resize), || ());
        assert_eq!(t.failing_op(), Op::Transform(TransformOp::Resize));
    }
}
