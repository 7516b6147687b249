//! The pixel-op stage of planned pipelines (`ColorJitter`, `Grayscale`, `RandomGrayscale`,
//! `RandomPosterize`, `RandomSolarize`, `RandomEqualize`, `RandomAutocontrast`,
//! `RandomAdjustSharpness`, `RandomInvert`, `JPEG`) on the decode corpus.
//!
//! The reference for every sample is built from independent parts: the op-by-op pipeline
//! without the pixel ops (uint8 HWC: crop, resize, flip), then the colour kernel with the
//! parameters the policy draws give for the same sample generator, continued in torchvision's
//! order (crop, flip, then each op), then `to_tensor` + `normalize`. The staged pipeline and
//! its op-by-op execution must equal it bit for bit. Also: p = 0 and p = 1, op order, a flip
//! after the pixel ops, the spans, no pixel op leaving the single fused pass as it was, no
//! allocation once warm, and specs refused with the op and argument named. After a `ToImage`
//! marker the same ops (and warps, policies) plan torch's tensor kernels: the marker's place
//! before them does not matter, its absence does (their parity with torchvision is
//! python-bindings/tests/test_tensor_domain.py's).

use ferroloader_transforms::augment::color::{self, ColorScratch};
use ferroloader_transforms::augment::policy::{
    draw_p, draw_p_item, randperm, ColorJitter, ColorStep,
};
use ferroloader_transforms::crop::RandomResizedCrop;
use ferroloader_transforms::encode::JpegRoundTrip;
use ferroloader_transforms::fused::{FusedKernel, OutputKind, OutputSlot};
use ferroloader_transforms::rng::{sample_rng, SampleRng, TorchDraws};
use ferroloader_transforms::spec::{
    Execution, Fill, JitterArg, Layout, NumberOrRange, Op, OpSpec, OutputDtype, Pipeline,
    PipelineSpec, PolicyApi, QualityArg, Shear, Size, WarpInterpolation, IMAGENET_MEAN,
    IMAGENET_STD,
};
use ferroloader_transforms::tensor::{self, Scaling};
use ferroloader_transforms::RgbImage;

use crate::stage_pipeline;
use stage_pipeline::{allocations_over, bits, flip, stage_image, to_normalized};

use crate::counting_alloc;
use counting_alloc::allocations;

// ---------------------------------------------------------------- corpus and helpers

const SIZE: u32 = 48;
const SEED: u64 = 20;

fn corpus() -> Vec<(String, Vec<u8>)> {
    stage_pipeline::corpus(10)
}

fn rrc() -> OpSpec {
    stage_pipeline::rrc(SIZE)
}

fn train_with(middle: Vec<OpSpec>) -> Vec<OpSpec> {
    stage_pipeline::train_with(SIZE, middle)
}

fn run_f32(pipeline: &Pipeline, bytes: &[u8], index: u64) -> Vec<f32> {
    stage_pipeline::run_f32(pipeline, bytes, SEED, index)
}

fn plan(ops: Vec<OpSpec>) -> Pipeline {
    Pipeline::new(PipelineSpec::new(ops)).expect("plans")
}

/// Draws and applies one pixel op as the reference does: the policy's draw, then the kernel.
fn reference_op(op: &OpSpec, img: &mut RgbImage, rng: &mut SampleRng) -> bool {
    let mut scratch = ColorScratch::new();
    match *op {
        OpSpec::ColorJitter {
            brightness,
            contrast,
            saturation,
            hue,
        } => {
            let num = |a: JitterArg| match a {
                JitterArg::Number(v) => v,
                JitterArg::Range(_) => panic!("the reference takes numbers"),
            };
            let jitter = ColorJitter::from_scalars(
                num(brightness),
                num(contrast),
                num(saturation),
                num(hue),
            )
            .expect("jitter");
            let plan = jitter.draw(rng);
            for step in plan.steps() {
                match step {
                    ColorStep::Brightness(f) => color::adjust_brightness(img, f).expect("b"),
                    ColorStep::Contrast(f) => color::adjust_contrast(img, f).expect("c"),
                    ColorStep::Saturation(f) => color::adjust_saturation(img, f).expect("s"),
                    ColorStep::Hue(f) => color::adjust_hue(img, f).expect("h"),
                }
            }
            true
        }
        OpSpec::Grayscale { .. } => {
            color::to_grayscale_rgb(img);
            true
        }
        OpSpec::RandomGrayscale { p } => {
            let on = draw_p(rng, p);
            if on {
                color::to_grayscale_rgb(img);
            }
            on
        }
        OpSpec::RandomPosterize { bits, p } => {
            let on = draw_p_item(rng, p);
            if on {
                color::posterize(img, bits as u8).expect("posterize");
            }
            on
        }
        OpSpec::RandomSolarize { threshold, p } => {
            let on = draw_p_item(rng, p);
            if on {
                color::solarize(img, threshold);
            }
            on
        }
        OpSpec::RandomEqualize { p } => {
            let on = draw_p_item(rng, p);
            if on {
                color::equalize(img);
            }
            on
        }
        OpSpec::RandomAutocontrast { p } => {
            let on = draw_p_item(rng, p);
            if on {
                color::autocontrast(img);
            }
            on
        }
        OpSpec::RandomAdjustSharpness {
            sharpness_factor,
            p,
        } => {
            let on = draw_p_item(rng, p);
            if on {
                color::adjust_sharpness(img, sharpness_factor, &mut scratch).expect("sharpness");
            }
            on
        }
        OpSpec::RandomInvert { p } => {
            let on = draw_p_item(rng, p);
            if on {
                color::invert(img);
            }
            on
        }
        OpSpec::Jpeg { quality } => {
            // torch.randint(min, max + 1, ()).
            let [lo, hi] = quality.range();
            let q = lo + i64::from(rng.randint((hi - lo + 1) as u32));
            JpegRoundTrip::new()
                .expect("round trip")
                .apply(img, q as u8)
                .expect("applies");
            true
        }
        OpSpec::RandomChannelPermutation => {
            let mut order = [0u8; 3];
            randperm(rng, &mut order);
            color::permute_channels(img, order);
            order != [0, 1, 2]
        }
        OpSpec::RandomHorizontalFlip { p } => {
            let on = p > 0.0 && tensor::draw_flip(rng, p);
            if on {
                tensor::hflip(img);
            }
            on
        }
        ref other => panic!("not a pixel op: {other:?}"),
    }
}

/// The reference sample of `[RandomResizedCrop, flip(0.5), pixel..., ToTensor, Normalize]`,
/// and how many of the pixel ops applied.
fn reference(pixel: &[OpSpec], bytes: &[u8], index: u64) -> (Vec<f32>, usize) {
    let mut rng = sample_rng(SEED, 0, index);
    let mut img = stage_image(vec![rrc(), flip(0.5)], bytes, &mut rng);
    let applied = pixel
        .iter()
        .filter(|op| reference_op(op, &mut img, &mut rng))
        .count();
    (to_normalized(&img), applied)
}

/// One op of each kind, the random ones at `p = 0.5`.
fn every_op() -> Vec<OpSpec> {
    vec![
        OpSpec::ColorJitter {
            brightness: JitterArg::Number(0.4),
            contrast: JitterArg::Number(0.4),
            saturation: JitterArg::Number(0.4),
            hue: JitterArg::Number(0.1),
        },
        OpSpec::Grayscale {
            num_output_channels: 3,
        },
        // Not the default 0.1: many corpus images share a size, so their draws coincide and
        // a rare coin might never land in the test's few dozen samples.
        OpSpec::RandomGrayscale { p: 0.5 },
        OpSpec::RandomPosterize { bits: 3, p: 0.5 },
        OpSpec::RandomSolarize {
            threshold: 128.0,
            p: 0.5,
        },
        OpSpec::RandomEqualize { p: 0.5 },
        OpSpec::RandomAutocontrast { p: 0.5 },
        OpSpec::RandomAdjustSharpness {
            sharpness_factor: 2.0,
            p: 0.5,
        },
        OpSpec::RandomInvert { p: 0.5 },
        OpSpec::Jpeg {
            quality: QualityArg::Range([20, 90]),
        },
        OpSpec::RandomChannelPermutation,
    ]
}

fn with_p(op: &OpSpec, new_p: f64) -> OpSpec {
    let mut op = op.clone();
    match &mut op {
        OpSpec::RandomGrayscale { p }
        | OpSpec::RandomPosterize { p, .. }
        | OpSpec::RandomSolarize { p, .. }
        | OpSpec::RandomEqualize { p }
        | OpSpec::RandomAutocontrast { p }
        | OpSpec::RandomAdjustSharpness { p, .. }
        | OpSpec::RandomInvert { p } => *p = new_p,
        _ => {}
    }
    op
}

// ---------------------------------------------------------------- tests

#[test]
fn each_op_equals_the_stages_then_its_kernel_with_the_policy_draw() {
    let corpus = corpus();
    for op in every_op() {
        let staged = plan(train_with(vec![op.clone()]));
        let op_by_op = Pipeline::new(
            PipelineSpec::new(train_with(vec![op.clone()])).execution(Execution::OpByOp),
        )
        .expect("plans");
        let (mut applied, mut runs) = (0, 0);
        for (name, bytes) in &corpus {
            for index in 0..6 {
                let (want, n) = reference(std::slice::from_ref(&op), bytes, index);
                applied += n;
                runs += 1;
                let got = run_f32(&staged, bytes, index);
                assert!(
                    bits(&got) == bits(&want),
                    "{op:?} on {name} #{index}: staged differs from the reference"
                );
                let got = run_f32(&op_by_op, bytes, index);
                assert!(
                    bits(&got) == bits(&want),
                    "{op:?} on {name} #{index}: op-by-op differs from the reference"
                );
            }
        }
        // Random ops ran both ways over the corpus.
        let always = matches!(
            op,
            OpSpec::ColorJitter { .. } | OpSpec::Grayscale { .. } | OpSpec::Jpeg { .. }
        );
        assert!(
            if always {
                applied == runs
            } else {
                applied > 0 && applied < runs
            },
            "{op:?}: applied {applied} of {runs}"
        );
    }
}

#[test]
fn p_zero_never_and_p_one_always_applies() {
    let corpus = corpus();
    let plain = plan(train_with(vec![]));
    for op in every_op().iter().filter(|op| {
        !matches!(
            op,
            OpSpec::ColorJitter { .. }
                | OpSpec::Grayscale { .. }
                | OpSpec::Jpeg { .. }
                | OpSpec::RandomChannelPermutation
        )
    }) {
        let never = plan(train_with(vec![with_p(op, 0.0)]));
        let always = plan(train_with(vec![with_p(op, 1.0)]));
        let mut changed = 0;
        for (name, bytes) in corpus.iter().take(4) {
            for index in 0..4 {
                // p = 0 still draws its coin, after the crop and flip: same sample as without.
                let base = run_f32(&plain, bytes, index);
                assert!(
                    bits(&run_f32(&never, bytes, index)) == bits(&base),
                    "{op:?} p=0 on {name} #{index} changed the sample"
                );
                let (want, n) = reference(&[with_p(op, 1.0)], bytes, index);
                assert_eq!(n, 1);
                let got = run_f32(&always, bytes, index);
                assert!(bits(&got) == bits(&want), "{op:?} p=1 on {name} #{index}");
                changed += usize::from(bits(&got) != bits(&base));
            }
        }
        assert!(changed > 0, "{op:?} at p=1 never changed a sample");
    }
}

#[test]
fn several_ops_run_in_the_order_written() {
    let corpus = corpus();
    let invert = OpSpec::RandomInvert { p: 1.0 };
    let posterize = OpSpec::RandomPosterize { bits: 2, p: 1.0 };
    let a = vec![invert.clone(), posterize.clone()];
    let b = vec![posterize, invert];
    let (pa, pb) = (plan(train_with(a.clone())), plan(train_with(b.clone())));
    // The whole list at once, with draws interleaved in order.
    let all = every_op();
    let pall = plan(train_with(all.clone()));
    for (name, bytes) in corpus.iter().take(4) {
        for index in 0..4 {
            let ga = run_f32(&pa, bytes, index);
            let gb = run_f32(&pb, bytes, index);
            assert!(bits(&ga) == bits(&reference(&a, bytes, index).0), "{name}");
            assert!(bits(&gb) == bits(&reference(&b, bytes, index).0), "{name}");
            assert!(
                bits(&ga) != bits(&gb),
                "{name} #{index}: order made no difference"
            );
            let gall = run_f32(&pall, bytes, index);
            assert!(
                bits(&gall) == bits(&reference(&all, bytes, index).0),
                "{name} #{index}: every op in a row"
            );
        }
    }
}

#[test]
fn flips_after_and_between_pixel_ops_apply_where_they_stand() {
    let corpus = corpus();
    let solarize = OpSpec::RandomSolarize {
        threshold: 100.0,
        p: 0.5,
    };
    let invert = OpSpec::RandomInvert { p: 0.5 };
    // Flip (fused into the resize), solarize, flip (in place), invert, flip (fused into the
    // conversion): every coin in order.
    let middle = vec![solarize.clone(), flip(0.5), invert.clone(), flip(0.5)];
    let staged = plan(train_with(middle.clone()));
    let op_by_op =
        Pipeline::new(PipelineSpec::new(train_with(middle.clone())).execution(Execution::OpByOp))
            .expect("plans");
    let mut flips = [0usize; 2];
    for (name, bytes) in &corpus {
        for index in 0..8 {
            let mut rng = sample_rng(SEED, 0, index);
            let mut img = stage_image(vec![rrc(), flip(0.5)], bytes, &mut rng);
            for (k, op) in middle.iter().enumerate() {
                let on = reference_op(op, &mut img, &mut rng);
                if matches!(op, OpSpec::RandomHorizontalFlip { .. }) {
                    flips[usize::from(k == 3)] += usize::from(on);
                }
            }
            let want = to_normalized(&img);
            assert!(
                bits(&run_f32(&staged, bytes, index)) == bits(&want),
                "{name} #{index}: staged"
            );
            assert!(
                bits(&run_f32(&op_by_op, bytes, index)) == bits(&want),
                "{name} #{index}: op-by-op"
            );
        }
    }
    assert!(flips.iter().all(|&n| n > 0), "flip coins {flips:?}");

    // Point ops commute with a mirror: a certain flip after equals one before.
    let before = plan(vec![
        rrc(),
        flip(1.0),
        OpSpec::RandomEqualize { p: 1.0 },
        OpSpec::ToTensor,
    ]);
    let after = plan(vec![
        rrc(),
        OpSpec::RandomEqualize { p: 1.0 },
        flip(1.0),
        OpSpec::ToTensor,
    ]);
    for (name, bytes) in corpus.iter().take(4) {
        assert!(
            bits(&run_f32(&before, bytes, 3)) == bits(&run_f32(&after, bytes, 3)),
            "{name}"
        );
    }
}

#[test]
fn uint8_outputs_and_eval_pipelines_are_staged_too() {
    let corpus = corpus();
    let eval = |pixel: Vec<OpSpec>, tail: OpSpec| {
        let mut ops = vec![
            OpSpec::Resize {
                size: Size::Int(56),
                max_size: None,
                interpolation: Default::default(),
                antialias: true,
            },
            OpSpec::CenterCrop {
                size: Size::Int(SIZE),
            },
        ];
        ops.extend(pixel);
        ops.push(tail);
        ops
    };
    let op = OpSpec::RandomAutocontrast { p: 1.0 };
    let chw = Pipeline::new(
        PipelineSpec::new(eval(vec![op.clone()], OpSpec::PilToTensor)).output(OutputDtype::Uint8),
    )
    .expect("plans");
    let hwc = Pipeline::new(
        PipelineSpec::new(eval(vec![op.clone()], OpSpec::PilToTensor))
            .output(OutputDtype::Uint8)
            .layout(Layout::Hwc),
    )
    .expect("plans");
    for (name, bytes) in corpus.iter().take(4) {
        let mut rng = sample_rng(SEED, 0, 0);
        let mut want = stage_image(
            eval(vec![], OpSpec::PilToTensor)[..2].to_vec(),
            bytes,
            &mut rng,
        );
        reference_op(&op, &mut want, &mut rng);
        let mut got = vec![0u8; hwc.sample_len()];
        let mut ctx = hwc.new_context().expect("context");
        hwc.run(
            bytes,
            &mut sample_rng(SEED, 0, 0),
            &mut ctx,
            OutputSlot::U8(&mut got),
            &mut (),
        )
        .expect("runs");
        assert_eq!(got, want.as_raw(), "{name}: hwc");
        let mut want_chw = vec![0u8; chw.sample_len()];
        tensor::to_chw_u8(want.view(), &mut want_chw).expect("chw");
        let mut ctx = chw.new_context().expect("context");
        chw.run(
            bytes,
            &mut sample_rng(SEED, 0, 0),
            &mut ctx,
            OutputSlot::U8(&mut got),
            &mut (),
        )
        .expect("runs");
        assert_eq!(got, want_chw, "{name}: chw");
    }
}

fn spans(pipeline: &Pipeline, bytes: &[u8]) -> Vec<(bool, Op)> {
    stage_pipeline::spans(pipeline, bytes, SEED)
}

#[test]
fn each_pixel_op_has_its_span_and_no_pixel_op_keeps_the_single_pass() {
    let (_, bytes) = corpus().into_iter().next().expect("corpus");
    let ops = every_op();
    let got = spans(&plan(train_with(ops)), &bytes);
    let mut want = vec![
        (true, Op::Decode),
        (true, Op::CropParams),
        (false, Op::CropParams),
        (false, Op::Decode),
        (true, Op::Resize),
        (false, Op::Resize),
    ];
    for op in [
        Op::ColorJitter,
        Op::Grayscale,
        Op::RandomGrayscale,
        Op::RandomPosterize,
        Op::RandomSolarize,
        Op::RandomEqualize,
        Op::RandomAutocontrast,
        Op::RandomAdjustSharpness,
        Op::RandomInvert,
        Op::Jpeg,
        Op::RandomChannelPermutation,
    ] {
        want.extend([(true, op), (false, op)]);
    }
    want.extend([(true, Op::ToTensor), (false, Op::ToTensor)]);
    assert_eq!(got, want);

    // Without pixel ops: decode, crop parameters, one fused pass, nothing else.
    let got = spans(&plan(train_with(vec![])), &bytes);
    assert_eq!(
        got,
        vec![
            (true, Op::Decode),
            (true, Op::CropParams),
            (false, Op::CropParams),
            (false, Op::Decode),
            (true, Op::Fused),
            (false, Op::Fused),
        ]
    );

    // Every span name is distinct and listed in `Op::ALL` in declaration order.
    for (i, op) in Op::ALL.iter().enumerate() {
        assert_eq!(*op as usize, i);
        assert!(Op::ALL[..i].iter().all(|o| o.name() != op.name()));
    }
    assert_eq!(Op::RandomAdjustSharpness.name(), "RandomAdjustSharpness");
}

#[test]
fn identity_and_rgb_on_three_channels_keep_the_single_fused_pass() {
    let (_, bytes) = corpus().into_iter().next().expect("corpus");
    let fused = spans(&plan(train_with(vec![])), &bytes);
    // v2's Identity converts to an empty Compose; RGB is a marker.
    let idle = vec![
        OpSpec::Compose { transforms: vec![] },
        OpSpec::Rgb,
        OpSpec::Compose { transforms: vec![] },
    ];
    let mut ops = train_with(idle.clone());
    ops.splice(0..0, idle);
    let pipeline = plan(ops);
    assert_eq!(spans(&pipeline, &bytes), fused);
    for index in 0..4 {
        assert!(
            bits(&run_f32(&pipeline, &bytes, index))
                == bits(&run_f32(&plan(train_with(vec![])), &bytes, index))
        );
    }
}

#[test]
fn channel_permutation_puts_input_channel_perm_c_at_c() {
    // torchvision's `image[..., permutation, :, :]`.
    let mut img = RgbImage::from_raw(2, 1, vec![10, 20, 30, 1, 2, 3]).expect("image");
    color::permute_channels(&mut img, [2, 0, 1]);
    assert_eq!(img.as_raw(), &[30, 10, 20, 3, 1, 2]);
    color::permute_channels(&mut img, [0, 1, 2]);
    assert_eq!(img.as_raw(), &[30, 10, 20, 3, 1, 2]);
    // Every order of randperm(3) comes up, and nothing else.
    let mut seen = std::collections::BTreeSet::new();
    for index in 0..200 {
        let mut order = [0u8; 3];
        randperm(&mut sample_rng(SEED, 0, index), &mut order);
        let mut sorted = order;
        sorted.sort_unstable();
        assert_eq!(sorted, [0, 1, 2]);
        seen.insert(order);
    }
    assert_eq!(seen.len(), 6);
}

#[test]
fn no_pixel_op_is_the_single_fused_pass_byte_for_byte() {
    // The kernel called by hand with the draws of the sample generator: what the fused
    // pipeline wrote before the pixel-op stage existed.
    let pipeline = plan(train_with(vec![]));
    let rrc = RandomResizedCrop::new((SIZE, SIZE), (0.08, 1.0), (0.75, 4.0 / 3.0)).expect("rrc");
    let kind = OutputKind::F32Chw {
        mean: IMAGENET_MEAN,
        std: IMAGENET_STD,
        scaling: Scaling::Divide,
    };
    let mut kernel = FusedKernel::new();
    let mut decode =
        ferroloader_transforms::decode::DecodeContext::new(Default::default()).expect("decoder");
    let mut decoded = RgbImage::new();
    for (name, bytes) in corpus() {
        for index in 0..4 {
            let mut rng = sample_rng(SEED, 0, index);
            let info = decode.decode(&bytes, &mut decoded).expect("decodes");
            let crop = rrc.get_params(info.width, info.height, &mut rng);
            let flipped = tensor::draw_flip(&mut rng, 0.5);
            let mut want = vec![0f32; pipeline.sample_len()];
            kernel
                .run(
                    decoded.view(),
                    crop,
                    (SIZE, SIZE),
                    flipped,
                    &kind,
                    OutputSlot::F32(&mut want),
                )
                .expect("runs");
            assert!(
                bits(&run_f32(&pipeline, &bytes, index)) == bits(&want),
                "{name} #{index}"
            );
        }
    }
}

#[test]
fn staged_runs_allocate_nothing_once_warm() {
    let corpus = corpus();
    let mut ops = every_op();
    ops.insert(3, flip(0.5));
    ops.push(flip(0.5));
    let pipelines = [
        plan(train_with(ops.clone())),
        Pipeline::new(PipelineSpec::new(train_with(ops)).execution(Execution::OpByOp))
            .expect("plans"),
    ];
    for pipeline in &pipelines {
        let mut ctx = pipeline.new_context().expect("context");
        let mut out = vec![0f32; pipeline.sample_len()];
        let mut pass = || {
            allocations_over(
                pipeline,
                &mut ctx,
                &mut out,
                &corpus,
                SEED,
                0..3,
                allocations,
            )
        };
        pass();
        assert_eq!(
            pass(),
            0,
            "{:?}: steady state allocated",
            pipeline.spec().execution
        );
    }
}

/// The ops of the tensor domain: every colour op, the three warps (BILINEAR, with fills) and a
/// policy.
fn tensor_ops() -> Vec<OpSpec> {
    let mut ops = every_op();
    ops.extend([
        OpSpec::RandomRotation {
            degrees: NumberOrRange::Number(20.0),
            interpolation: WarpInterpolation::Bilinear,
            expand: false,
            center: Some([3.0, 40.5]),
            fill: Fill::PerChannel(vec![10.0, 20.5, 30.0]),
        },
        OpSpec::RandomAffine {
            degrees: NumberOrRange::Number(10.0),
            translate: Some([0.1, 0.2]),
            scale: Some([0.8, 1.2]),
            shear: Some(Shear::Number(5.0)),
            interpolation: WarpInterpolation::Bilinear,
            fill: Fill::Number(7.0),
            center: None,
        },
        OpSpec::RandomPerspective {
            distortion_scale: 0.5,
            p: 0.5,
            interpolation: WarpInterpolation::Bilinear,
            fill: Fill::Number(0.0),
        },
        OpSpec::TrivialAugmentWide {
            num_magnitude_bins: 31,
            interpolation: WarpInterpolation::Bilinear,
            fill: None,
            api: PolicyApi::V2,
        },
    ]);
    ops
}

fn to_image(api: PolicyApi) -> OpSpec {
    OpSpec::ToImage { api }
}

#[test]
fn to_image_switches_to_the_tensor_kernels_wherever_it_stands_before_them() {
    let corpus = corpus();
    let pil = plan(train_with(tensor_ops()));
    let mut first = vec![to_image(PolicyApi::V2)];
    first.extend(train_with(tensor_ops()));
    let first = plan(first);
    let after_crop = plan(train_with(
        [vec![to_image(PolicyApi::V2)], tensor_ops()].concat(),
    ));
    let v1 = plan(train_with(
        [vec![to_image(PolicyApi::V1)], tensor_ops()].concat(),
    ));
    // Right before the conversion it stands after every op: nothing changes.
    let last = plan(train_with(
        [tensor_ops(), vec![to_image(PolicyApi::V2)]].concat(),
    ));
    let (mut differ, mut apis_differ, mut resizes_differ) = (0, 0, 0);
    for (index, (name, bytes)) in corpus.iter().enumerate() {
        let index = index as u64;
        let tensor = bits(&run_f32(&after_crop, bytes, index));
        // Before the crop it makes the crop's resize torch's tensor resize (v2's uint8
        // kernel) too: the same crops and flips, other weights.
        resizes_differ += usize::from(tensor != bits(&run_f32(&first, bytes, index)));
        assert_eq!(
            bits(&run_f32(&pil, bytes, index)),
            bits(&run_f32(&last, bytes, index)),
            "{name}"
        );
        differ += usize::from(tensor != bits(&run_f32(&pil, bytes, index)));
        apis_differ += usize::from(tensor != bits(&run_f32(&v1, bytes, index)));
    }
    assert!(differ > corpus.len() / 2, "only {differ} samples differ");
    assert!(apis_differ > 0, "v1's and v2's kernels never differed");
    assert!(
        resizes_differ > 0,
        "torch's tensor resize never differed from Pillow's"
    );
    // The JSON form: `{"op": "ToImage"}` is v2's.
    let op: OpSpec = serde_json::from_str(r#"{"op": "ToImage"}"#).expect("parses");
    assert_eq!(op, to_image(PolicyApi::V2));
}

#[test]
fn tensor_domain_runs_allocate_nothing_once_warm() {
    let corpus = corpus();
    let mut ops = vec![to_image(PolicyApi::V1)];
    ops.extend(train_with(tensor_ops()));
    for execution in [Execution::Fused, Execution::OpByOp] {
        let pipeline =
            Pipeline::new(PipelineSpec::new(ops.clone()).execution(execution)).expect("plans");
        let mut ctx = pipeline.new_context().expect("context");
        let mut out = vec![0f32; pipeline.sample_len()];
        let mut pass = || {
            allocations_over(
                &pipeline,
                &mut ctx,
                &mut out,
                &corpus,
                SEED,
                0..3,
                allocations,
            )
        };
        pass();
        assert_eq!(pass(), 0, "{execution:?}: steady state allocated");
    }
}

#[test]
fn tensor_domain_refusals_name_the_op() {
    let bicubic = OpSpec::RandomRotation {
        degrees: NumberOrRange::Number(5.0),
        interpolation: WarpInterpolation::Bicubic,
        expand: false,
        center: None,
        fill: Fill::Number(0.0),
    };
    // Pillow's bicubic on the PIL image; torchvision's tensor kernels refuse it.
    plan(train_with(vec![bicubic.clone()]));
    let err = plan_error([vec![to_image(PolicyApi::V2)], vec![bicubic]].concat());
    assert!(
        err.contains("RandomRotation") && err.contains("'bicubic' is unsupported with Tensor"),
        "{err}"
    );
    let err = plan_error(vec![
        to_image(PolicyApi::V1),
        OpSpec::RandomSolarize {
            threshold: 256.0,
            p: 0.5,
        },
    ]);
    assert!(
        err.contains("RandomSolarize") && err.contains("above 255"),
        "{err}"
    );
    let err = plan_error(vec![OpSpec::RandomApply {
        transforms: vec![to_image(PolicyApi::V2), OpSpec::RandomInvert { p: 0.5 }],
        p: 0.5,
    }]);
    assert!(
        err.contains("RandomApply") && err.contains("ToImage"),
        "{err}"
    );
}

fn plan_error(ops: Vec<OpSpec>) -> String {
    stage_pipeline::plan_error(PipelineSpec::new(train_with(ops)))
}

#[test]
fn invalid_specs_are_refused_naming_op_and_argument() {
    let cases: Vec<(OpSpec, &str, &str)> = vec![
        (
            OpSpec::ColorJitter {
                brightness: JitterArg::Number(-0.1),
                contrast: Default::default(),
                saturation: Default::default(),
                hue: Default::default(),
            },
            "ColorJitter",
            "`brightness`",
        ),
        (
            OpSpec::ColorJitter {
                brightness: Default::default(),
                contrast: JitterArg::Range([1.5, 0.5]),
                saturation: Default::default(),
                hue: Default::default(),
            },
            "ColorJitter",
            "`contrast`",
        ),
        (
            OpSpec::ColorJitter {
                brightness: Default::default(),
                contrast: Default::default(),
                saturation: JitterArg::Range([-0.5, 1.0]),
                hue: Default::default(),
            },
            "ColorJitter",
            "`saturation`",
        ),
        (
            OpSpec::ColorJitter {
                brightness: Default::default(),
                contrast: Default::default(),
                saturation: Default::default(),
                hue: JitterArg::Number(0.6),
            },
            "ColorJitter",
            "`hue`",
        ),
        (
            OpSpec::Grayscale {
                num_output_channels: 2,
            },
            "Grayscale: 2 is not 1 or 3",
            "`num_output_channels`",
        ),
        (OpSpec::RandomGrayscale { p: 1.5 }, "RandomGrayscale", "`p`"),
        (
            OpSpec::RandomPosterize { bits: 0, p: 0.5 },
            "RandomPosterize",
            "`bits`",
        ),
        (
            OpSpec::RandomPosterize { bits: 9, p: 0.5 },
            "RandomPosterize",
            "`bits`",
        ),
        (
            OpSpec::RandomPosterize { bits: 4, p: -0.1 },
            "RandomPosterize",
            "`p`",
        ),
        (
            OpSpec::RandomSolarize {
                threshold: f64::NAN,
                p: 0.5,
            },
            "RandomSolarize",
            "`threshold`",
        ),
        (OpSpec::RandomEqualize { p: 2.0 }, "RandomEqualize", "`p`"),
        (
            OpSpec::RandomAutocontrast { p: f64::NAN },
            "RandomAutocontrast",
            "`p`",
        ),
        (
            OpSpec::RandomAdjustSharpness {
                sharpness_factor: -1.0,
                p: 0.5,
            },
            "RandomAdjustSharpness",
            "`sharpness_factor`",
        ),
        (OpSpec::RandomInvert { p: 1.01 }, "RandomInvert", "`p`"),
        (
            OpSpec::Jpeg {
                quality: QualityArg::Number(0),
            },
            "JPEG: quality must be an integer from 1 to 100",
            "`quality`",
        ),
        (
            OpSpec::Jpeg {
                quality: QualityArg::Range([90, 50]),
            },
            "JPEG",
            "`quality`",
        ),
        (
            OpSpec::Jpeg {
                quality: QualityArg::Range([1, 101]),
            },
            "JPEG",
            "`quality`",
        ),
        (
            OpSpec::Jpeg {
                quality: QualityArg::Number(i64::MIN),
            },
            "JPEG",
            "`quality`",
        ),
    ];
    for (op, op_name, arg) in cases {
        let msg = plan_error(vec![op.clone()]);
        assert!(msg.contains(op_name) && msg.contains(arg), "{op:?}: {msg}");
    }
    // A pixel op after the conversion, or before the geometry, is out of place.
    let mut ops = train_with(vec![]);
    ops.push(OpSpec::RandomInvert { p: 0.5 });
    let msg = match Pipeline::new(PipelineSpec::new(ops)) {
        Err(err) => err.to_string(),
        Ok(_) => panic!("planned"),
    };
    assert!(msg.contains("`ops`"), "{msg}");
    let msg = match Pipeline::new(PipelineSpec::new(vec![
        OpSpec::RandomInvert { p: 0.5 },
        rrc(),
        OpSpec::ToTensor,
    ])) {
        Err(err) => err.to_string(),
        Ok(_) => panic!("planned"),
    };
    // A pixel op first keeps the image's own size, which the spec must then give.
    assert!(msg.contains("`image_size`"), "{msg}");
}

#[test]
fn specs_parse_with_torchvision_names_and_defaults() {
    let json = r#"{"ops": [
        {"op": "RandomResizedCrop", "size": 48},
        {"op": "ColorJitter", "brightness": 0.4, "hue": [-0.1, 0.1]},
        {"op": "Grayscale", "num_output_channels": 3},
        {"op": "RandomGrayscale"},
        {"op": "RandomPosterize", "bits": 4},
        {"op": "RandomSolarize", "threshold": 192.0},
        {"op": "RandomEqualize"},
        {"op": "RandomAutocontrast", "p": 0.25},
        {"op": "RandomAdjustSharpness", "sharpness_factor": 2},
        {"op": "RandomInvert"},
        {"op": "JPEG", "quality": [50, 90]},
        {"op": "JPEG", "quality": 75},
        {"op": "ToTensor"}
    ]}"#;
    let spec: PipelineSpec = serde_json::from_str(json).expect("parses");
    assert_eq!(
        spec.ops[1],
        OpSpec::ColorJitter {
            brightness: JitterArg::Number(0.4),
            contrast: JitterArg::Number(0.0),
            saturation: JitterArg::Number(0.0),
            hue: JitterArg::Range([-0.1, 0.1]),
        }
    );
    assert_eq!(spec.ops[3], OpSpec::RandomGrayscale { p: 0.1 });
    assert_eq!(spec.ops[4], OpSpec::RandomPosterize { bits: 4, p: 0.5 });
    assert_eq!(spec.ops[9], OpSpec::RandomInvert { p: 0.5 });
    assert_eq!(
        spec.ops[10],
        OpSpec::Jpeg {
            quality: QualityArg::Range([50, 90])
        }
    );
    assert_eq!(
        spec.ops[11],
        OpSpec::Jpeg {
            quality: QualityArg::Number(75)
        }
    );
    Pipeline::new(spec.clone()).expect("plans");
    // Round trip.
    let back: PipelineSpec =
        serde_json::from_str(&serde_json::to_string(&spec).expect("serializes")).expect("parses");
    assert_eq!(back, spec);
    // torchvision's default num_output_channels=1 (one-channel samples).
    let gray: OpSpec = serde_json::from_str(r#"{"op": "Grayscale"}"#).expect("parses");
    assert_eq!(
        gray,
        OpSpec::Grayscale {
            num_output_channels: 1
        }
    );
    for bad in [
        r#"{"op": "RandomInvert", "prob": 0.5}"#,
        r#"{"op": "RandomPosterize"}"#,
        r#"{"op": "ColorJitter", "brightness": [0.5]}"#,
        r#"{"op": "RandomSolarize", "threshold": 1, "p": 0.5, "x": 1}"#,
        r#"{"op": "JPEG"}"#,
        r#"{"op": "JPEG", "quality": [50]}"#,
        r#"{"op": "JPEG", "quality": 50.5}"#,
    ] {
        assert!(serde_json::from_str::<OpSpec>(bad).is_err(), "{bad} parsed");
    }
}
