//! The geometric ops of planned pipelines (`RandomVerticalFlip`, `RandomRotation`,
//! `RandomAffine`, `RandomPerspective`, `GaussianBlur`, `ElasticTransform`, `Pad`, `RandomCrop`, `CenterCrop` in the stage; `RandomCrop`
//! first or after `Resize`) on the decode corpus.
//!
//! The reference for every sample is built from independent parts: the op-by-op pipeline
//! without the op (uint8 HWC: crop, resize, flip), then the geometry kernel with the
//! parameters the policy draws give for the same sample generator, in torchvision's order,
//! then `to_tensor` + `normalize`. The staged pipeline and its op-by-op execution must equal it
//! bit for bit. Also: the spans, sizes planned through `Pad` and the crops, a `RandomCrop`
//! standing first (padding, `pad_if_needed`, too small an image), no allocation once warm, and
//! specs refused with the op and argument named.

use ferroloader_transforms::augment::elastic::{Elastic, ElasticField};
use ferroloader_transforms::augment::geometry::{
    perspective, vflip, AffineWarp, GaussianBlur, Interpolation, Padder, Padding, PaddingMode,
    RandomCropSpec,
};
use ferroloader_transforms::augment::grid_sample::GridSampler;
use ferroloader_transforms::augment::policy::{
    self, draw_p, RandomAffine, RandomPerspective, RandomRotation,
};
use ferroloader_transforms::crop::RandomResizedCrop;
use ferroloader_transforms::crop::{
    center_crop as center_crop_plan, center_crop_rect, resize_shorter_side,
};
use ferroloader_transforms::decode::DecodeContext;
use ferroloader_transforms::resize::{Filter, Resizer};
use ferroloader_transforms::rng::{sample_rng, SampleRng};
use ferroloader_transforms::spec::{
    Execution, Fill, KernelSize, NumberOrRange, Op, OpSpec, PadMode, PaddingArg, Pipeline,
    PipelineSpec, PolicyApi, Shear, Size, WarpInterpolation,
};
use ferroloader_transforms::{tensor, Error, RgbImage};

use crate::stage_pipeline;
use stage_pipeline::{allocations_over, bits, flip, normalize, to_normalized};

use crate::counting_alloc;
use counting_alloc::allocations;

// ---------------------------------------------------------------- corpus and helpers

const SIZE: u32 = 48;
const SEED: u64 = 21;

fn corpus() -> Vec<(String, Vec<u8>)> {
    stage_pipeline::corpus(8)
}

fn rrc() -> OpSpec {
    stage_pipeline::rrc(SIZE)
}

fn train_with(middle: Vec<OpSpec>) -> Vec<OpSpec> {
    stage_pipeline::train_with(SIZE, middle)
}

fn run_f32(pipeline: &Pipeline, bytes: &[u8], index: u64) -> Result<Vec<f32>, Error> {
    stage_pipeline::try_run_f32(pipeline, bytes, SEED, index).map(|(out, _)| out)
}

/// The op-by-op uint8 HWC run of `[RandomResizedCrop, flip(0.5)]` on `rng`: what the stage ops
/// see. Leaves `rng` after the crop and flip draws.
fn stage_image(bytes: &[u8], rng: &mut SampleRng) -> RgbImage {
    stage_pipeline::stage_image(vec![rrc(), flip(0.5)], bytes, rng)
}

fn plan(ops: Vec<OpSpec>) -> Pipeline {
    Pipeline::new(PipelineSpec::new(ops)).expect("plans")
}

fn plan_op_by_op(ops: Vec<OpSpec>) -> Pipeline {
    Pipeline::new(PipelineSpec::new(ops).execution(Execution::OpByOp)).expect("plans")
}

fn rotation() -> OpSpec {
    OpSpec::RandomRotation {
        degrees: NumberOrRange::Number(30.0),
        interpolation: WarpInterpolation::Nearest,
        expand: false,
        center: None,
        fill: Fill::PerChannel(vec![10.0, 200.0, 300.0]),
    }
}

fn rotation_bilinear_centered() -> OpSpec {
    OpSpec::RandomRotation {
        degrees: NumberOrRange::Range([-90.0, 45.0]),
        interpolation: WarpInterpolation::Bilinear,
        expand: false,
        center: Some([10.0, 30.5]),
        fill: Fill::Number(128.0),
    }
}

fn affine() -> OpSpec {
    OpSpec::RandomAffine {
        degrees: NumberOrRange::Number(20.0),
        translate: Some([0.1, 0.2]),
        scale: Some([0.8, 1.2]),
        shear: Some(Shear::Bounds(vec![-10.0, 10.0, -5.0, 5.0])),
        interpolation: WarpInterpolation::Bilinear,
        fill: Fill::Number(7.0),
        center: None,
    }
}

/// BICUBIC rotation about a corner and a whole RandomAffine, with fills.
fn bicubic_warps() -> [OpSpec; 2] {
    [
        OpSpec::RandomRotation {
            degrees: NumberOrRange::Range([-120.0, 60.0]),
            interpolation: WarpInterpolation::Bicubic,
            expand: false,
            center: Some([0.0, 47.0]),
            fill: Fill::PerChannel(vec![255.0, 0.0, 99.0]),
        },
        OpSpec::RandomAffine {
            degrees: NumberOrRange::Number(15.0),
            translate: Some([0.2, 0.1]),
            scale: Some([0.7, 1.3]),
            shear: Some(Shear::Bounds(vec![-20.0, 20.0])),
            interpolation: WarpInterpolation::Bicubic,
            fill: Fill::Number(33.0),
            center: None,
        },
    ]
}

fn perspective_op(distortion_scale: f64, p: f64, interpolation: WarpInterpolation) -> OpSpec {
    OpSpec::RandomPerspective {
        distortion_scale,
        p,
        interpolation,
        fill: Fill::PerChannel(vec![250.0, 20.0, 90.0]),
    }
}

fn blur() -> OpSpec {
    OpSpec::GaussianBlur {
        kernel_size: KernelSize::Pair([5, 3]),
        sigma: NumberOrRange::Range([0.1, 2.0]),
    }
}

/// A bilinear v2 `ElasticTransform` with a fill, and a nearest v1 one with its default.
fn elastic() -> [OpSpec; 2] {
    [
        OpSpec::ElasticTransform {
            alpha: [40.0, 60.0],
            sigma: [1.5, 2.0],
            interpolation: WarpInterpolation::Bilinear,
            fill: Some(Fill::PerChannel(vec![3.0, 200.0, 90.0])),
            api: PolicyApi::V2,
        },
        OpSpec::ElasticTransform {
            alpha: [90.0, 30.0],
            sigma: [1.0, 1.0],
            interpolation: WarpInterpolation::Nearest,
            fill: Some(Fill::Number(0.0)),
            api: PolicyApi::V1,
        },
    ]
}

fn pad() -> OpSpec {
    OpSpec::Pad {
        padding: PaddingArg::Seq(vec![1, 2, 3, 4]),
        fill: Fill::Number(0.0),
        padding_mode: PadMode::Reflect,
    }
}

fn random_crop(size: u32, padding: Option<i64>, pad_if_needed: bool, mode: PadMode) -> OpSpec {
    OpSpec::RandomCrop {
        size: Size::Int(size),
        padding: padding.map(PaddingArg::Int),
        pad_if_needed,
        fill: Fill::PerChannel(vec![1.0, 2.0, 3.0]),
        padding_mode: mode,
    }
}

fn vflip_op(p: f64) -> OpSpec {
    OpSpec::RandomVerticalFlip { p }
}

fn center_crop(size: u32) -> OpSpec {
    OpSpec::CenterCrop {
        size: Size::Int(size),
    }
}

fn fill_of(fill: &Fill) -> [u8; 3] {
    let values = match fill {
        Fill::Number(v) => vec![*v],
        Fill::PerChannel(v) => v.clone(),
    };
    ferroloader_transforms::augment::geometry::parse_fill(Some(&values)).expect("fill")
}

fn interp(i: WarpInterpolation) -> Interpolation {
    match i {
        WarpInterpolation::Nearest => Interpolation::Nearest,
        WarpInterpolation::Bilinear => Interpolation::Bilinear,
        WarpInterpolation::Bicubic => Interpolation::Bicubic,
    }
}

fn mode_of(m: PadMode) -> PaddingMode {
    match m {
        PadMode::Constant => PaddingMode::Constant,
        PadMode::Edge => PaddingMode::Edge,
        PadMode::Reflect => PaddingMode::Reflect,
        PadMode::Symmetric => PaddingMode::Symmetric,
    }
}

/// The spec of a `RandomCrop(Int(size), Option<Int(p)>, ..)` as the kernels take it.
fn crop_parts(op: &OpSpec) -> (policy::RandomCrop, RandomCropSpec) {
    let OpSpec::RandomCrop {
        size: Size::Int(size),
        padding,
        pad_if_needed,
        fill,
        padding_mode,
    } = op
    else {
        panic!("the reference takes RandomCrop(int, int padding)")
    };
    let p = match padding {
        None => 0,
        Some(PaddingArg::Int(p)) => *p as u32,
        Some(other) => panic!("{other:?}"),
    };
    let draw = policy::RandomCrop::new((*size, *size), [p; 4], *pad_if_needed).expect("crop");
    let spec = RandomCropSpec {
        height: *size,
        width: *size,
        padding: padding.as_ref().map(|_| Padding::all(p)),
        pad_if_needed: *pad_if_needed,
        fill: fill_of(fill),
        mode: mode_of(*padding_mode),
    };
    (draw, spec)
}

/// Draws and applies one op as the reference does: the policy's draw, then the kernel.
/// Returns whether a random op changed anything it could (for the coverage counts).
fn reference_op(op: &OpSpec, img: &mut RgbImage, rng: &mut SampleRng) -> bool {
    let mut out = RgbImage::new();
    match op {
        OpSpec::RandomVerticalFlip { p } => {
            let on = draw_p(rng, *p);
            if on {
                vflip(img);
            }
            return on;
        }
        OpSpec::RandomRotation {
            degrees,
            interpolation,
            center,
            fill,
            ..
        } => {
            let draw = match degrees {
                NumberOrRange::Number(d) => RandomRotation::symmetric(*d),
                NumberOrRange::Range([lo, hi]) => RandomRotation::new((*lo, *hi)),
            }
            .expect("degrees");
            let angle = draw.draw(rng);
            AffineWarp::new()
                .rotate(
                    img.view(),
                    angle,
                    *center,
                    false,
                    interp(*interpolation),
                    fill_of(fill),
                    &mut out,
                )
                .expect("rotates");
        }
        OpSpec::RandomAffine {
            degrees: NumberOrRange::Number(d),
            translate,
            scale,
            shear: Some(Shear::Bounds(shear)),
            interpolation,
            fill,
            center,
        } => {
            let draw = RandomAffine::new(
                (-d, *d),
                translate.map(|[a, b]| (a, b)),
                scale.map(|[a, b]| (a, b)),
                Some(shear),
            )
            .expect("affine");
            let plan = draw.draw(img.width(), img.height(), rng);
            AffineWarp::new()
                .affine(
                    img.view(),
                    plan.angle,
                    [f64::from(plan.translate.0), f64::from(plan.translate.1)],
                    plan.scale,
                    [plan.shear.0, plan.shear.1],
                    *center,
                    interp(*interpolation),
                    fill_of(fill),
                    &mut out,
                )
                .expect("warps");
        }
        OpSpec::RandomPerspective {
            distortion_scale,
            p,
            interpolation,
            fill,
        } => {
            let draw = RandomPerspective::new(*distortion_scale, *p).expect("perspective");
            let Some(plan) = draw.draw(img.width(), img.height(), rng) else {
                return false;
            };
            let (start, end) = plan.corners();
            perspective(
                img.view(),
                &start,
                &end,
                interp(*interpolation),
                fill_of(fill),
                &mut out,
            )
            .expect("warps");
        }
        OpSpec::GaussianBlur {
            kernel_size: KernelSize::Pair([kx, ky]),
            sigma: NumberOrRange::Range([lo, hi]),
        } => {
            let sigma = policy::GaussianBlur::new((*lo, *hi))
                .expect("sigma")
                .draw(rng);
            GaussianBlur::new()
                .apply(img, [*kx as u32, *ky as u32], [sigma, sigma])
                .expect("blurs");
            return true;
        }
        OpSpec::ElasticTransform {
            alpha,
            sigma,
            interpolation,
            fill,
            api,
        } => {
            let params = Elastic::new(*alpha, *sigma, *api).expect("params");
            let mut field = ElasticField::new();
            field
                .draw(&params, img.width(), img.height(), rng)
                .expect("field");
            let fill = fill.as_ref().map(|f| match f {
                Fill::Number(v) => [*v as f32; 3],
                Fill::PerChannel(v) => [v[0] as f32, v[1] as f32, v[2] as f32],
            });
            GridSampler::new()
                .elastic(img, &field, interp(*interpolation), fill, *api, &mut out)
                .expect("warps");
        }
        OpSpec::Pad {
            padding: PaddingArg::Seq(p),
            fill,
            padding_mode,
        } => {
            let padding = Padding::ltrb(p[0] as u32, p[1] as u32, p[2] as u32, p[3] as u32);
            Padder::new()
                .pad(
                    img.view(),
                    padding,
                    mode_of(*padding_mode),
                    fill_of(fill),
                    &mut out,
                )
                .expect("pads");
        }
        OpSpec::RandomCrop { .. } => {
            let (draw, spec) = crop_parts(op);
            let plan = draw.draw(img.width(), img.height(), rng).expect("fits");
            Padder::new()
                .random_crop(img.view(), &spec, plan.rect.top, plan.rect.left, &mut out)
                .expect("crops");
        }
        OpSpec::CenterCrop { size: Size::Int(s) } => out = center_crop_by_hand(img, *s),
        OpSpec::Resize {
            size: Size::Int(s),
            interpolation,
            ..
        } => {
            let (h, w) = resize_shorter_side(img.width(), img.height(), *s, None).expect("size");
            let mut resizer = Resizer::new();
            resizer.set_filter(interpolation.filter());
            resizer.resize(img.view(), h, w, &mut out).expect("resizes");
        }
        OpSpec::RandomResizedCrop {
            size: Size::Int(s),
            scale,
            ratio,
            interpolation,
            ..
        } => {
            let rrc = RandomResizedCrop::new((*s, *s), (scale[0], scale[1]), (ratio[0], ratio[1]))
                .expect("valid");
            let rect = rrc.get_params(img.width(), img.height(), rng);
            let mut resizer = Resizer::new();
            resizer.set_filter(interpolation.filter());
            let view = img.crop_view(rect).expect("inside");
            resizer.resize(view, *s, *s, &mut out).expect("resizes");
        }
        OpSpec::RandomHorizontalFlip { p } => {
            let on = *p > 0.0 && tensor::draw_flip(rng, *p);
            if on {
                tensor::hflip(img);
            }
            return on;
        }
        other => panic!("not a geometric op the reference knows: {other:?}"),
    }
    *img = out;
    true
}

/// The reference sample of `[RandomResizedCrop, flip(0.5), middle..., ToTensor, Normalize]`,
/// and how many of the random ops applied.
/// torchvision's `center_crop(img, s)` from its parts: `Pad` with zeros where the crop is
/// longer than the image, then the window.
fn center_crop_by_hand(img: &RgbImage, s: u32) -> RgbImage {
    let crop = center_crop_plan(img.width(), img.height(), s, s).expect("valid");
    let [l, t, r, b] = crop.padding;
    let mut padded = RgbImage::new();
    Padder::new()
        .pad(
            img.view(),
            Padding::ltrb(l, t, r, b),
            PaddingMode::Constant,
            [0; 3],
            &mut padded,
        )
        .expect("pads");
    let mut out = RgbImage::new();
    padded
        .crop_view(crop.rect)
        .expect("inside")
        .to_image(&mut out);
    out
}

fn reference(middle: &[OpSpec], bytes: &[u8], index: u64) -> (Vec<f32>, usize) {
    let mut rng = sample_rng(SEED, 0, index);
    let mut img = stage_image(bytes, &mut rng);
    let applied = middle
        .iter()
        .filter(|op| reference_op(op, &mut img, &mut rng))
        .count();
    (to_normalized(&img), applied)
}

fn every_op() -> Vec<OpSpec> {
    vec![
        vflip_op(0.5),
        rotation(),
        rotation_bilinear_centered(),
        affine(),
        perspective_op(0.6, 0.7, WarpInterpolation::Bilinear),
        perspective_op(1.0, 0.5, WarpInterpolation::Nearest),
        perspective_op(0.7, 0.6, WarpInterpolation::Bicubic),
        bicubic_warps()[0].clone(),
        bicubic_warps()[1].clone(),
        blur(),
        elastic()[0].clone(),
        elastic()[1].clone(),
        pad(),
        random_crop(40, Some(4), false, PadMode::Symmetric),
        // The input (48 + 3 + 4 high after the Pad above, or 48) is smaller than 56 on some
        // axis: `pad_if_needed` pads, with v1's second reflection of the first padding.
        random_crop(56, Some(2), true, PadMode::Reflect),
        center_crop(40),
        // Larger than the 48x48 input on both axes (or one, after the Pad above): zero padding.
        center_crop(57),
        // A resize after the plan's geometry (RandomResizedCrop(256), Resize(224)), with its
        // own filter, and a second random resized crop drawn on the staged size.
        OpSpec::Resize {
            size: Size::Int(50),
            max_size: None,
            interpolation: ferroloader_transforms::spec::Interpolation::Bicubic,
            antialias: true,
        },
        OpSpec::RandomResizedCrop {
            size: Size::Int(44),
            scale: [0.3, 1.0],
            ratio: [0.75, 4.0 / 3.0],
            interpolation: ferroloader_transforms::spec::Interpolation::Lanczos,
            antialias: true,
        },
    ]
}

// ---------------------------------------------------------------- tests

#[test]
fn each_op_equals_the_stages_then_its_kernel_with_the_policy_draw() {
    let corpus = corpus();
    for op in every_op() {
        let staged = plan(train_with(vec![op.clone()]));
        let op_by_op = plan_op_by_op(train_with(vec![op.clone()]));
        let (mut applied, mut runs) = (0, 0);
        for (name, bytes) in &corpus {
            for index in 0..4 {
                let (want, n) = reference(std::slice::from_ref(&op), bytes, index);
                applied += n;
                runs += 1;
                let got = run_f32(&staged, bytes, index).expect("runs");
                assert!(
                    bits(&got) == bits(&want),
                    "{op:?} on {name} #{index}: staged differs from the reference"
                );
                let got = run_f32(&op_by_op, bytes, index).expect("runs");
                assert!(
                    bits(&got) == bits(&want),
                    "{op:?} on {name} #{index}: op-by-op differs from the reference"
                );
            }
        }
        if matches!(
            op,
            OpSpec::RandomVerticalFlip { .. } | OpSpec::RandomPerspective { .. }
        ) {
            assert!(applied > 0 && applied < runs, "{op:?}: {applied} of {runs}");
        }
    }
}

#[test]
fn every_op_in_a_row_with_flips_between_draws_in_order() {
    let corpus = corpus();
    let mut middle = every_op();
    middle.insert(3, flip(0.5));
    middle.push(flip(0.5));
    let staged = plan(train_with(middle.clone()));
    let op_by_op = plan_op_by_op(train_with(middle.clone()));
    // Pad (1+3, 2+4), then crops to 40, 56, 40, 57, a resize to 50, a crop to 44: the
    // planned size follows the ops.
    assert_eq!(staged.output_size(), (44, 44));
    for (name, bytes) in corpus.iter().take(4) {
        for index in 0..4 {
            let (want, _) = reference(&middle, bytes, index);
            let got = run_f32(&staged, bytes, index).expect("runs");
            assert!(bits(&got) == bits(&want), "{name} #{index}: staged");
            let got = run_f32(&op_by_op, bytes, index).expect("runs");
            assert!(bits(&got) == bits(&want), "{name} #{index}: op by op");
        }
    }
}

#[test]
fn pad_and_crops_plan_the_sample_size() {
    let padded = plan(train_with(vec![pad()]));
    assert_eq!(padded.output_size(), (SIZE + 2 + 4, SIZE + 1 + 3));
    assert_eq!(padded.sample_shape(), [3, 54, 52]);
    let cropped = plan(train_with(vec![pad(), center_crop(30)]));
    assert_eq!(cropped.output_size(), (30, 30));
    let first = plan(vec![
        random_crop(32, Some(4), false, PadMode::Constant),
        OpSpec::ToTensor,
    ]);
    assert_eq!(first.output_size(), (32, 32));
    let resized = plan(vec![
        OpSpec::Resize {
            size: Size::Int(40),
            max_size: None,
            interpolation: Default::default(),
            antialias: true,
        },
        random_crop(36, None, false, PadMode::Constant),
        OpSpec::ToTensor,
    ]);
    assert_eq!(resized.output_size(), (36, 36));
}

/// What `[RandomCrop, flip(0.5), ToTensor, Normalize]` (after `Resize(resize)` when given)
/// gives, from the decoded image, the policy's draw and the padder by hand.
fn first_crop_reference(
    crop: &OpSpec,
    resize: Option<u32>,
    bytes: &[u8],
    index: u64,
) -> Result<Vec<f32>, Error> {
    let mut decode = DecodeContext::new(Default::default()).expect("decoder");
    let mut img = RgbImage::new();
    decode.decode(bytes, &mut img)?;
    if let Some(s) = resize {
        let (h, w) = resize_shorter_side(img.width(), img.height(), s, None)?;
        let mut out = RgbImage::new();
        Resizer::new().resize(img.view(), h, w, &mut out)?;
        img = out;
    }
    let mut rng = sample_rng(SEED, 0, index);
    let (draw, spec) = crop_parts(crop);
    let plan = draw.draw(img.width(), img.height(), &mut rng)?;
    let mut out = RgbImage::new();
    Padder::new().random_crop(img.view(), &spec, plan.rect.top, plan.rect.left, &mut out)?;
    if tensor::draw_flip(&mut rng, 0.5) {
        tensor::hflip(&mut out);
    }
    Ok(to_normalized(&out))
}

#[test]
fn random_crop_first_or_after_resize_equals_the_padder_with_the_policy_draw() {
    let corpus = corpus();
    let cases: Vec<(OpSpec, Option<u32>)> = vec![
        // CIFAR's recipe, and a window that needs no padding (the fused kernel crops).
        (random_crop(32, Some(4), false, PadMode::Constant), None),
        (random_crop(24, None, false, PadMode::Constant), None),
        (random_crop(40, Some(3), true, PadMode::Reflect), None),
        (random_crop(56, None, true, PadMode::Symmetric), Some(48)),
        (random_crop(44, None, false, PadMode::Edge), Some(48)),
    ];
    for (crop, resize) in cases {
        let mut ops = Vec::new();
        if let Some(s) = resize {
            ops.push(OpSpec::Resize {
                size: Size::Int(s),
                max_size: None,
                interpolation: Default::default(),
                antialias: true,
            });
        }
        ops.extend([crop.clone(), flip(0.5), OpSpec::ToTensor, normalize()]);
        let fused = plan(ops.clone());
        let op_by_op = plan_op_by_op(ops.clone());
        for (name, bytes) in &corpus {
            for index in 0..3 {
                let want = first_crop_reference(&crop, resize, bytes, index);
                let got = run_f32(&fused, bytes, index);
                let by_op = run_f32(&op_by_op, bytes, index);
                match want {
                    Ok(want) => {
                        let got = got.expect("fused runs");
                        assert!(bits(&got) == bits(&want), "{crop:?} on {name} #{index}");
                        let got = by_op.expect("op by op runs");
                        assert!(bits(&got) == bits(&want), "{crop:?} on {name} #{index}");
                    }
                    // An image smaller than the crop: both executions refuse it, naming sizes.
                    Err(_) => {
                        for err in [got.expect_err("fused"), by_op.expect_err("op by op")] {
                            let msg = err.to_string();
                            assert!(
                                msg.contains("RandomCrop") && msg.contains("larger"),
                                "{msg}"
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn resize_then_random_resized_crop_equals_its_parts_with_the_policy_draw() {
    // Resize(40, bicubic), then RandomResizedCrop(SIZE, bilinear) drawn on the resized size:
    // two filters, each its own op's.
    let ops = vec![
        OpSpec::Resize {
            size: Size::Int(40),
            max_size: None,
            interpolation: ferroloader_transforms::spec::Interpolation::Bicubic,
            antialias: true,
        },
        rrc(),
        flip(0.5),
        OpSpec::ToTensor,
        normalize(),
    ];
    let fused = plan(ops.clone());
    let op_by_op = plan_op_by_op(ops);
    assert_eq!(fused.output_size(), (SIZE, SIZE));
    let crop = RandomResizedCrop::new((SIZE, SIZE), (0.08, 1.0), (0.75, 4.0 / 3.0)).expect("valid");
    let mut decode = DecodeContext::new(Default::default()).expect("decoder");
    let (mut bicubic, mut bilinear) = (Resizer::new(), Resizer::new());
    bicubic.set_filter(Filter::Bicubic);
    for (name, bytes) in &corpus() {
        for index in 0..3 {
            let mut img = RgbImage::new();
            decode.decode(bytes, &mut img).expect("decodes");
            let (h, w) = resize_shorter_side(img.width(), img.height(), 40, None).expect("size");
            let mut resized = RgbImage::new();
            bicubic
                .resize(img.view(), h, w, &mut resized)
                .expect("resizes");
            let mut rng = sample_rng(SEED, 0, index);
            let rect = crop.get_params(w, h, &mut rng);
            let mut out = RgbImage::new();
            let view = resized.crop_view(rect).expect("inside");
            bilinear
                .resize(view, SIZE, SIZE, &mut out)
                .expect("resizes");
            if tensor::draw_flip(&mut rng, 0.5) {
                tensor::hflip(&mut out);
            }
            let want = to_normalized(&out);
            let got = run_f32(&fused, bytes, index).expect("runs");
            assert!(bits(&got) == bits(&want), "{name} #{index}: fused");
            let got = run_f32(&op_by_op, bytes, index).expect("runs");
            assert!(bits(&got) == bits(&want), "{name} #{index}: op by op");
        }
    }
}

#[test]
fn random_crop_larger_than_the_image_is_a_sample_error_naming_sizes() {
    let (_, bytes) = corpus().into_iter().next().expect("corpus");
    let pipeline = plan(vec![
        random_crop(5000, None, false, PadMode::Constant),
        OpSpec::ToTensor,
    ]);
    let err = run_f32(&pipeline, &bytes, 0).expect_err("too small");
    let msg = err.to_string();
    assert!(
        msg.contains("5000x5000") && msg.contains("RandomCrop") && msg.contains("pad_if_needed"),
        "{msg}"
    );
    // With pad_if_needed the same crop works.
    let pipeline = plan(vec![
        random_crop(600, None, true, PadMode::Constant),
        OpSpec::ToTensor,
    ]);
    run_f32(&pipeline, &bytes, 0).expect("padded to fit");
}

fn spans(pipeline: &Pipeline, bytes: &[u8]) -> Vec<(bool, Op)> {
    stage_pipeline::spans(pipeline, bytes, SEED)
}

#[test]
fn each_op_has_its_span() {
    let (_, bytes) = corpus().into_iter().next().expect("corpus");
    let got = spans(&plan(train_with(every_op())), &bytes);
    let mut want = vec![
        (true, Op::Decode),
        (true, Op::CropParams),
        (false, Op::CropParams),
        (false, Op::Decode),
        (true, Op::Resize),
        (false, Op::Resize),
    ];
    for op in [
        Op::RandomVerticalFlip,
        Op::RandomRotation,
        Op::RandomRotation,
        Op::RandomAffine,
        Op::RandomPerspective,
        Op::RandomPerspective,
        Op::RandomPerspective,
        Op::RandomRotation,
        Op::RandomAffine,
        Op::GaussianBlur,
        Op::ElasticTransform,
        Op::ElasticTransform,
        Op::Pad,
        Op::RandomCrop,
        Op::RandomCrop,
        Op::Crop,
        Op::Crop,
        Op::Resize,
        Op::Resize,
    ] {
        want.extend([(true, op), (false, op)]);
    }
    want.extend([(true, Op::ToTensor), (false, Op::ToTensor)]);
    assert_eq!(got, want);

    // RandomCrop first, padded: decode, crop parameters, the padded crop, the fused pass.
    let first = plan(vec![
        random_crop(32, Some(4), false, PadMode::Constant),
        OpSpec::ToTensor,
    ]);
    assert_eq!(
        spans(&first, &bytes),
        vec![
            (true, Op::Decode),
            (false, Op::Decode),
            (true, Op::CropParams),
            (false, Op::CropParams),
            (true, Op::RandomCrop),
            (false, Op::RandomCrop),
            (true, Op::Fused),
            (false, Op::Fused),
        ]
    );
}

#[test]
fn geometric_runs_allocate_nothing_once_warm() {
    let corpus = corpus();
    let mut middle = every_op();
    middle.insert(2, flip(0.5));
    let first = vec![
        random_crop(40, Some(4), true, PadMode::Reflect),
        flip(0.5),
        vflip_op(0.5),
        OpSpec::ToTensor,
    ];
    // After Resize the resized image and the decoded one trade buffers each sample: both
    // grow to the largest image, then nothing more is allocated.
    let resized = vec![
        OpSpec::Resize {
            size: Size::Int(56),
            max_size: None,
            interpolation: Default::default(),
            antialias: true,
        },
        random_crop(48, Some(2), false, PadMode::Edge),
        OpSpec::ToTensor,
    ];
    let pipelines = [
        plan(train_with(middle.clone())),
        plan_op_by_op(train_with(middle)),
        plan(first.clone()),
        plan_op_by_op(first),
        plan(resized.clone()),
        plan_op_by_op(resized),
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
        assert_eq!(pass(), 0, "{:?}: steady state allocated", pipeline.spec());
    }
}

/// An `ElasticTransform` of `(alpha, sigma, interpolation, fill)` after `edit`.
fn elastic_with(
    edit: impl Fn(&mut ([f64; 2], [f64; 2], WarpInterpolation, Option<Fill>)),
) -> OpSpec {
    let mut e = (
        [50.0, 50.0],
        [1.0, 1.0],
        WarpInterpolation::Bilinear,
        Some(Fill::Number(0.0)),
    );
    edit(&mut e);
    OpSpec::ElasticTransform {
        alpha: e.0,
        sigma: e.1,
        interpolation: e.2,
        fill: e.3,
        api: PolicyApi::V2,
    }
}

fn plan_error(ops: Vec<OpSpec>) -> String {
    stage_pipeline::plan_error(PipelineSpec::new(ops))
}

#[test]
fn invalid_specs_are_refused_naming_op_and_argument() {
    let rotation_with = |expand: bool, degrees: NumberOrRange| OpSpec::RandomRotation {
        degrees,
        interpolation: WarpInterpolation::Nearest,
        expand,
        center: None,
        fill: Fill::Number(0.0),
    };
    let cases: Vec<(OpSpec, &str, &str)> = vec![
        (vflip_op(1.5), "p", "RandomVerticalFlip"),
        (
            rotation_with(true, NumberOrRange::Number(10.0)),
            "expand",
            "RandomRotation",
        ),
        (
            rotation_with(false, NumberOrRange::Number(-10.0)),
            "degrees",
            "RandomRotation",
        ),
        (
            rotation_with(false, NumberOrRange::Range([10.0, -10.0])),
            "degrees",
            "RandomRotation",
        ),
        (
            OpSpec::RandomAffine {
                degrees: NumberOrRange::Number(0.0),
                translate: Some([1.5, 0.0]),
                scale: None,
                shear: None,
                interpolation: WarpInterpolation::Nearest,
                fill: Fill::Number(0.0),
                center: None,
            },
            "translate",
            "RandomAffine",
        ),
        (
            OpSpec::RandomAffine {
                degrees: NumberOrRange::Number(0.0),
                translate: None,
                scale: None,
                shear: Some(Shear::Bounds(vec![1.0, 2.0, 3.0])),
                interpolation: WarpInterpolation::Nearest,
                fill: Fill::PerChannel(vec![0.0, 0.0]),
                center: None,
            },
            "shear",
            "RandomAffine",
        ),
        (
            OpSpec::RandomAffine {
                degrees: NumberOrRange::Number(0.0),
                translate: None,
                scale: None,
                shear: None,
                interpolation: WarpInterpolation::Nearest,
                fill: Fill::PerChannel(vec![0.0, 0.0]),
                center: None,
            },
            "fill",
            "RandomAffine",
        ),
        (
            perspective_op(1.5, 0.5, WarpInterpolation::Bilinear),
            "distortion_scale",
            "RandomPerspective",
        ),
        (
            perspective_op(-0.1, 0.5, WarpInterpolation::Bilinear),
            "distortion_scale",
            "RandomPerspective",
        ),
        (
            perspective_op(0.5, 1.01, WarpInterpolation::Nearest),
            "p",
            "RandomPerspective",
        ),
        (
            OpSpec::RandomPerspective {
                distortion_scale: 0.5,
                p: 0.5,
                interpolation: WarpInterpolation::Nearest,
                fill: Fill::PerChannel(vec![1.0, 2.0]),
            },
            "fill",
            "RandomPerspective",
        ),
        (
            OpSpec::GaussianBlur {
                kernel_size: KernelSize::Int(4),
                sigma: NumberOrRange::Number(1.0),
            },
            "kernel_size",
            "GaussianBlur",
        ),
        (
            OpSpec::GaussianBlur {
                kernel_size: KernelSize::Int(3),
                sigma: NumberOrRange::Number(0.0),
            },
            "sigma",
            "GaussianBlur",
        ),
        // A kernel reflecting more than the 48-pixel stage image has.
        (
            OpSpec::GaussianBlur {
                kernel_size: KernelSize::Pair([3, 97]),
                sigma: NumberOrRange::Number(1.0),
            },
            "kernel_size",
            "GaussianBlur",
        ),
        (
            OpSpec::Pad {
                padding: PaddingArg::Int(-1),
                fill: Fill::Number(0.0),
                padding_mode: PadMode::Constant,
            },
            "padding",
            "Pad",
        ),
        (
            OpSpec::Pad {
                padding: PaddingArg::Seq(vec![1, 2, 3]),
                fill: Fill::Number(0.0),
                padding_mode: PadMode::Edge,
            },
            "padding",
            "Pad",
        ),
        // Larger than the stage's 48x48 input, known at plan time.
        (
            random_crop(49, None, false, PadMode::Constant),
            "size",
            "RandomCrop",
        ),
        (
            elastic_with(|e| e.1 = [5.0, 0.0]),
            "sigma",
            "ElasticTransform",
        ),
        (
            elastic_with(|e| e.0 = [f64::NAN, 1.0]),
            "alpha",
            "ElasticTransform",
        ),
        (
            elastic_with(|e| e.2 = WarpInterpolation::Bicubic),
            "interpolation",
            "ElasticTransform",
        ),
        (
            elastic_with(|e| e.3 = Some(Fill::Number(256.0))),
            "fill",
            "ElasticTransform",
        ),
        // A 48x48 stage image cannot reflect a 97-tap blur's 48 pixels of padding.
        (
            elastic_with(|e| e.1 = [12.0, 12.0]),
            "sigma",
            "ElasticTransform",
        ),
    ];
    for (op, arg, name) in cases {
        let msg = plan_error(train_with(vec![op.clone()]));
        assert!(
            msg.contains(arg) && msg.contains(name),
            "{op:?}: {msg} should name {name} and {arg}"
        );
    }
    // A stage op first keeps the image's own size: without `image_size`, that is what is asked.
    let msg = plan_error(vec![vflip_op(0.5), OpSpec::ToTensor]);
    assert!(msg.contains("`image_size`"), "{msg}");
    // Resize(int) then RandomCrop fixes the size; Resize(int) then a stage op follows the
    // images' size, which must then be given.
    let mut spec = PipelineSpec::new(vec![
        OpSpec::Resize {
            size: Size::Int(40),
            max_size: None,
            interpolation: Default::default(),
            antialias: true,
        },
        pad(),
        OpSpec::ToTensor,
    ]);
    let msg = plan_error(spec.ops.clone());
    assert!(msg.contains("`image_size`"), "{msg}");
    spec.image_size = Some([30, 60]);
    let planned = Pipeline::new(spec).expect("plans with the images' size");
    // 30x60 resized to 40x80, padded by 2 + 4 rows and 1 + 3 columns.
    assert_eq!(planned.output_size(), (46, 84));
    // Found by `structured_specs`: an image on the way larger than any decodable one (here
    // 60000x60000, inside a RandomApply), which each sample would have allocated (10 GB) only
    // to crop it down again.
    let huge = OpSpec::Resize {
        size: Size::Int(60_000),
        max_size: None,
        interpolation: Default::default(),
        antialias: true,
    };
    for ops in [
        vec![random_crop(8, None, false, PadMode::Constant), huge.clone()],
        vec![
            random_crop(8, None, false, PadMode::Constant),
            OpSpec::RandomApply {
                transforms: vec![huge.clone(), OpSpec::CenterCrop { size: Size::Int(8) }],
                p: 0.5,
            },
        ],
    ] {
        let msg = plan_error(
            [
                ops,
                vec![OpSpec::CenterCrop { size: Size::Int(8) }, OpSpec::ToTensor],
            ]
            .concat(),
        );
        assert!(
            msg.contains(
                "Resize makes a 60000x60000 image, 3600000000 pixels, more than max_pixels"
            ),
            "{msg}"
        );
    }
}

#[test]
fn specs_parse_with_torchvision_names_and_defaults() {
    let json = r#"{"ops": [
        {"op": "RandomCrop", "size": 40, "padding": 4},
        {"op": "RandomVerticalFlip"},
        {"op": "RandomRotation", "degrees": 15},
        {"op": "RandomAffine", "degrees": [-5, 10], "translate": [0.1, 0.1], "shear": 3,
         "interpolation": "bilinear", "fill": [1, 2, 3], "center": [3.5, 4]},
        {"op": "GaussianBlur", "kernel_size": 3},
        {"op": "Pad", "padding": [1, 2], "padding_mode": "symmetric"},
        {"op": "CenterCrop", "size": [30, 32]},
        {"op": "ToTensor"}
    ]}"#;
    let spec: PipelineSpec = serde_json::from_str(json).expect("parses");
    assert_eq!(
        spec.ops[0],
        OpSpec::RandomCrop {
            size: Size::Int(40),
            padding: Some(PaddingArg::Int(4)),
            pad_if_needed: false,
            fill: Fill::Number(0.0),
            padding_mode: PadMode::Constant,
        }
    );
    assert_eq!(spec.ops[1], OpSpec::RandomVerticalFlip { p: 0.5 });
    assert_eq!(
        spec.ops[2],
        OpSpec::RandomRotation {
            degrees: NumberOrRange::Number(15.0),
            interpolation: WarpInterpolation::Nearest,
            expand: false,
            center: None,
            fill: Fill::Number(0.0),
        }
    );
    assert_eq!(
        spec.ops[4],
        OpSpec::GaussianBlur {
            kernel_size: KernelSize::Int(3),
            sigma: NumberOrRange::Range([0.1, 2.0]),
        }
    );
    let pipeline = Pipeline::new(spec.clone()).expect("plans");
    assert_eq!(pipeline.output_size(), (30, 32));
    let back: PipelineSpec =
        serde_json::from_str(&serde_json::to_string(&spec).expect("serializes")).expect("parses");
    assert_eq!(back, spec);
    for bad in [
        r#"{"op": "RandomRotation"}"#,
        r#"{"op": "RandomRotation", "degrees": 10, "interpolation": "lanczos"}"#,
        r#"{"op": "Pad", "padding": 1, "padding_mode": "wrap"}"#,
        r#"{"op": "RandomCrop", "size": 3, "pad": 1}"#,
    ] {
        assert!(serde_json::from_str::<OpSpec>(bad).is_err(), "{bad} parsed");
    }
}

#[test]
fn random_perspective_parses_with_torchvisions_defaults() {
    let op: OpSpec = serde_json::from_str(r#"{"op": "RandomPerspective"}"#).expect("parses");
    assert_eq!(
        op,
        OpSpec::RandomPerspective {
            distortion_scale: 0.5,
            p: 0.5,
            interpolation: WarpInterpolation::Bilinear,
            fill: Fill::Number(0.0),
        }
    );
    let op: OpSpec = serde_json::from_str(
        r#"{"op": "RandomPerspective", "distortion_scale": 0.2, "p": 1, "interpolation": "nearest",
            "fill": [1, 2, 3]}"#,
    )
    .expect("parses");
    assert_eq!(
        op,
        OpSpec::RandomPerspective {
            distortion_scale: 0.2,
            p: 1.0,
            interpolation: WarpInterpolation::Nearest,
            fill: Fill::PerChannel(vec![1.0, 2.0, 3.0]),
        }
    );
    let bicubic = r#"{"op": "RandomPerspective", "interpolation": "bicubic"}"#;
    let op: OpSpec = serde_json::from_str(bicubic).expect("Pillow's third filter parses");
    assert!(matches!(
        op,
        OpSpec::RandomPerspective {
            interpolation: WarpInterpolation::Bicubic,
            ..
        }
    ));
    // Pillow's transform takes no other filter: named in the error.
    let lanczos = r#"{"op": "RandomPerspective", "interpolation": "lanczos"}"#;
    let err = serde_json::from_str::<OpSpec>(lanczos).expect_err("lanczos refused");
    assert!(err.to_string().contains("lanczos"), "{err}");
}

#[test]
fn random_perspective_at_scale_zero_is_the_identity() {
    // distortion_scale=0 draws every corner onto itself: the exact identity map (torchvision's
    // least-squares noise aside, see augment::geometry::perspective), whatever the filter.
    let corpus = corpus();
    for interpolation in [WarpInterpolation::Nearest, WarpInterpolation::Bilinear] {
        let with = plan(train_with(vec![perspective_op(0.0, 1.0, interpolation)]));
        let without = plan(train_with(vec![]));
        for (name, bytes) in corpus.iter().take(3) {
            for index in 0..3 {
                let got = run_f32(&with, bytes, index).expect("runs");
                let want = run_f32(&without, bytes, index).expect("runs");
                assert!(
                    bits(&got) == bits(&want),
                    "{name} #{index} {interpolation:?}"
                );
            }
        }
    }
}

#[test]
fn vertical_flip_at_p_one_is_the_flipped_sample_and_draws_at_p_zero() {
    let corpus = corpus();
    let never = plan(train_with(vec![vflip_op(0.0), flip(0.5)]));
    let always = plan(train_with(vec![vflip_op(1.0), flip(0.5)]));
    let mut changed = 0;
    for (name, bytes) in corpus.iter().take(4) {
        for index in 0..4 {
            let mut rng = sample_rng(SEED, 0, index);
            let mut img = stage_image(bytes, &mut rng);
            let base = img.clone();
            // torchvision draws the coin whatever p: the flip after it sees the next draw.
            assert!(!draw_p(&mut rng, 0.0));
            let hflip = tensor::draw_flip(&mut rng, 0.5);
            let mut want_never = base.clone();
            if hflip {
                tensor::hflip(&mut want_never);
            }
            assert!(
                bits(&run_f32(&never, bytes, index).expect("runs"))
                    == bits(&to_normalized(&want_never)),
                "{name} #{index}: p=0"
            );
            vflip(&mut img);
            if hflip {
                tensor::hflip(&mut img);
            }
            let got = run_f32(&always, bytes, index).expect("runs");
            assert!(bits(&got) == bits(&to_normalized(&img)), "{name} #{index}");
            changed += usize::from(img.as_raw() != want_never.as_raw());
        }
    }
    assert!(changed > 0);
}

#[test]
fn center_crop_first_or_after_resize_pads_when_larger_than_the_image() {
    let resize = |size| OpSpec::Resize {
        size: Size::Int(size),
        max_size: None,
        interpolation: Default::default(),
        antialias: true,
    };
    // Taller than every corpus image and narrower than some; larger on both axes after Resize.
    let cases: Vec<(Option<u32>, u32)> = vec![(None, 700), (Some(40), 64), (Some(40), 41)];
    let mut decode = DecodeContext::new(Default::default()).expect("decoder");
    for (resized, size) in cases {
        let mut ops: Vec<OpSpec> = resized.map(resize).into_iter().collect();
        ops.extend([center_crop(size), OpSpec::ToTensor, normalize()]);
        let fused = plan(ops.clone());
        let op_by_op = plan_op_by_op(ops);
        for (name, bytes) in corpus().iter().take(4) {
            let mut img = RgbImage::new();
            decode.decode(bytes, &mut img).expect("decodes");
            if let Some(s) = resized {
                let (h, w) = resize_shorter_side(img.width(), img.height(), s, None).expect("size");
                let mut out = RgbImage::new();
                Resizer::new()
                    .resize(img.view(), h, w, &mut out)
                    .expect("resizes");
                img = out;
            }
            let want = to_normalized(&center_crop_by_hand(&img, size));
            let got = run_f32(&fused, bytes, 0).expect("runs");
            assert!(
                bits(&got) == bits(&want),
                "{name}, {resized:?} then {size}: fused"
            );
            let got = run_f32(&op_by_op, bytes, 0).expect("runs");
            assert!(
                bits(&got) == bits(&want),
                "{name}, {resized:?} then {size}: op by op"
            );
        }
    }
}

#[test]
fn random_resized_crop_then_center_crop_in_the_stage() {
    // RandomResizedCrop(256)-like then CenterCrop: the centre of the staged image.
    let corpus = corpus();
    let pipeline = plan(train_with(vec![center_crop(32)]));
    assert_eq!(pipeline.output_size(), (32, 32));
    for (name, bytes) in corpus.iter().take(3) {
        let mut rng = sample_rng(SEED, 0, 0);
        let img = stage_image(bytes, &mut rng);
        let mut want = RgbImage::new();
        img.crop_view(center_crop_rect(SIZE, SIZE, 32, 32).expect("fits"))
            .expect("inside")
            .to_image(&mut want);
        let got = run_f32(&pipeline, bytes, 0).expect("runs");
        assert!(bits(&got) == bits(&to_normalized(&want)), "{name}");
    }
}

#[test]
fn a_fill_per_channel_on_a_one_channel_image_is_refused_as_torchvision_refuses_it() {
    use ferroloader_transforms::spec::ImageMode;
    let gray = |ops: Vec<OpSpec>| {
        let mut spec = PipelineSpec::new(ops);
        spec.mode = ImageMode::L;
        spec
    };
    let crop_padded = |fill: Fill| OpSpec::RandomCrop {
        size: Size::Int(20),
        padding: Some(PaddingArg::Int(2)),
        pad_if_needed: false,
        fill,
        padding_mode: PadMode::Constant,
    };
    let three = || Fill::PerChannel(vec![1.0, 2.0, 3.0]);
    let nested = OpSpec::RandomApply {
        transforms: vec![rotation()],
        p: 0.5,
    };
    // A stage op (rotation() fills [10, 200, 300]), one inside a RandomApply, and the first op.
    for ops in [
        train_with(vec![rotation()]),
        train_with(vec![nested]),
        vec![crop_padded(three()), OpSpec::ToTensor],
    ] {
        let msg = stage_pipeline::plan_error(gray(ops.clone()));
        assert!(
            msg.contains("`fill`") && msg.contains("(3 != 1)"),
            "{ops:?}: {msg}"
        );
        // Three channels take them.
        Pipeline::new(PipelineSpec::new(ops)).expect("an RGB image takes three fill values");
    }
    // One value per channel of a one-channel image, or one number: planned.
    for fill in [Fill::PerChannel(vec![7.0]), Fill::Number(7.0)] {
        Pipeline::new(gray(vec![crop_padded(fill), OpSpec::ToTensor])).expect("one value");
    }
}
