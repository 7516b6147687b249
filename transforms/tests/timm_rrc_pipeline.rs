//! timm's `RandomResizedCropAndInterpolation` in planned pipelines on the decode corpus: first
//! (region decode, the single fused pass without pixel ops, the staged pass with one), after
//! `Resize`, and as a stage op, fused and op by op.
//!
//! The reference for every sample is built from independent parts on the sample's generator:
//! the whole decoded image, torchvision's crop draw (`RandomResizedCrop::get_params`), the
//! filter drawn right after it (`FilterChoice::draw`, timm's order), Pillow's resize with that
//! filter (`Resizer`, checked against Pillow in resize_parity.rs and the Python tests), the
//! flip's coin and mirror, `RandomInvert`'s coin where the pipeline has one, then to-tensor +
//! normalize. The pipeline must equal it bit for bit and report the filter it drew. Also: one
//! filter draws nothing (the samples are `RandomResizedCrop`'s), no allocation once warm, and
//! refusals naming the op and the argument.

use ferroloader_transforms::augment::color;
use ferroloader_transforms::augment::policy::draw_p_item;
use ferroloader_transforms::crop::{
    center_crop_rect, resize_shorter_side, FilterChoice, RandomResizedCrop,
};
use ferroloader_transforms::decode::{DecodeContext, DecodeOptions};
use ferroloader_transforms::fused::OutputSlot;
use ferroloader_transforms::resize::{Filter, Resizer};
use ferroloader_transforms::rng::{sample_rng, SampleRng};
use ferroloader_transforms::spec::{Execution, OpSpec, Pipeline, PipelineSpec, Size};
use ferroloader_transforms::{tensor, RgbImage};

use crate::stage_pipeline;
use stage_pipeline::{allocations_over, bits, flip, normalize, to_normalized};

use crate::counting_alloc;
use counting_alloc::allocations;

const SIZE: u32 = 40;
const SEED: u64 = 23;
const INDICES: u64 = 16;

/// `RandomResizedCropAndInterpolation(SIZE, interpolation=...)` with timm's scale and ratio.
fn timm_rrc(interpolation: serde_json::Value) -> OpSpec {
    serde_json::from_value(serde_json::json!({
        "op": "RandomResizedCropAndInterpolation", "size": SIZE, "interpolation": interpolation,
    }))
    .expect("parses")
}

/// Where the crop stands: what comes before it (none: it is the geometry) and whether a pixel
/// op (`RandomInvert(0.5)`) follows the flip.
#[derive(Clone, Copy, Debug)]
enum Placement {
    /// First, no pixel op: the single fused pass.
    Fused,
    /// First, `RandomInvert` after the flip: the staged pass.
    Staged,
    /// After `Resize(int)`: drawn on the resized image.
    AfterResize(u32),
    /// After `CenterCrop`: a stage op.
    AfterCenterCrop(u32),
}

fn ops(placement: Placement, crop: OpSpec) -> Vec<OpSpec> {
    let mut ops = match placement {
        Placement::AfterResize(side) => vec![OpSpec::Resize {
            size: Size::Int(side),
            max_size: None,
            interpolation: Default::default(),
            antialias: true,
        }],
        Placement::AfterCenterCrop(side) => vec![OpSpec::CenterCrop {
            size: Size::Int(side),
        }],
        Placement::Fused | Placement::Staged => Vec::new(),
    };
    ops.extend([crop, flip(0.5)]);
    if let Placement::Staged = placement {
        ops.push(OpSpec::RandomInvert { p: 0.5 });
    }
    ops.extend([OpSpec::ToTensor, normalize()]);
    ops
}

/// The sample by hand (see the module doc), and the filter drawn.
fn reference(
    placement: Placement,
    filters: &FilterChoice,
    bytes: &[u8],
    rng: &mut SampleRng,
) -> (Vec<f32>, Filter) {
    let mut decoded = RgbImage::new();
    DecodeContext::new(DecodeOptions::default())
        .expect("decoder")
        .decode(bytes, &mut decoded)
        .expect("decodes");
    let mut resizer = Resizer::new();
    let source = match placement {
        Placement::AfterResize(side) => {
            let (h, w) =
                resize_shorter_side(decoded.width(), decoded.height(), side, None).expect("size");
            let mut resized = RgbImage::new();
            resizer.set_filter(Filter::Bilinear);
            resizer
                .resize(decoded.view(), h, w, &mut resized)
                .expect("resizes");
            resized
        }
        Placement::AfterCenterCrop(side) => {
            let rect =
                center_crop_rect(decoded.width(), decoded.height(), side, side).expect("fits");
            let mut cropped = RgbImage::new();
            decoded
                .crop_view(rect)
                .expect("view")
                .to_image(&mut cropped);
            cropped
        }
        Placement::Fused | Placement::Staged => decoded,
    };
    let rrc = RandomResizedCrop::with_defaults((SIZE, SIZE)).expect("valid");
    let crop = rrc.get_params(source.width(), source.height(), rng);
    let filter = filters.draw(rng);
    let mut img = RgbImage::new();
    resizer.set_filter(filter);
    resizer
        .resize(source.crop_view(crop).expect("view"), SIZE, SIZE, &mut img)
        .expect("resizes");
    if tensor::draw_flip(rng, 0.5) {
        tensor::hflip(&mut img);
    }
    if matches!(placement, Placement::Staged) && draw_p_item(rng, 0.5) {
        color::invert(&mut img);
    }
    (to_normalized(&img), filter)
}

const PLACEMENTS: [Placement; 4] = [
    Placement::Fused,
    Placement::Staged,
    Placement::AfterResize(56),
    Placement::AfterCenterCrop(48),
];

#[test]
fn samples_equal_the_crop_resized_with_the_drawn_filter() {
    let corpus = stage_pipeline::corpus(8);
    let random = FilterChoice::new(&[Filter::Bilinear, Filter::Bicubic]).expect("valid");
    let three = FilterChoice::new(&[Filter::Lanczos, Filter::Nearest, Filter::Box]).expect("valid");
    let choices = [
        (serde_json::json!("random"), random),
        (serde_json::json!(["lanczos", "nearest", "box"]), three),
    ];
    for (interpolation, filters) in choices {
        for placement in PLACEMENTS {
            for execution in [Execution::Fused, Execution::OpByOp] {
                let spec = PipelineSpec::new(ops(placement, timm_rrc(interpolation.clone())))
                    .execution(execution);
                let pipeline = Pipeline::new(spec).expect("plans");
                let mut ctx = pipeline.new_context().expect("context");
                let mut drawn = vec![0; filters.filters().len()];
                for (name, bytes) in &corpus {
                    for index in 0..INDICES {
                        let what =
                            format!("{interpolation} {placement:?} {execution:?} {name} #{index}");
                        let mut out = vec![0f32; pipeline.sample_len()];
                        let report = pipeline
                            .run(
                                bytes,
                                &mut sample_rng(SEED, 0, index),
                                &mut ctx,
                                OutputSlot::F32(&mut out),
                                &mut (),
                            )
                            .expect("runs");
                        let mut rng = sample_rng(SEED, 0, index);
                        let (want, filter) = reference(placement, &filters, bytes, &mut rng);
                        assert!(bits(&out) == bits(&want), "{what}");
                        // Stage ops' filters are not the geometry's: the report says the
                        // geometry's own (bilinear for a crop that does not resample).
                        if !matches!(placement, Placement::AfterCenterCrop(_)) {
                            assert_eq!(report.filter, filter, "{what}");
                        }
                        let at = filters.filters().iter().position(|f| *f == filter);
                        drawn[at.expect("one of the choice")] += 1;
                    }
                }
                // Every filter of the choice drawn (the corpus has enough samples).
                assert!(
                    drawn.iter().all(|&n| n > 0),
                    "{interpolation} {placement:?}: {drawn:?}"
                );
            }
        }
    }
}

#[test]
fn one_filter_draws_nothing_and_is_random_resized_crop() {
    let corpus = stage_pipeline::corpus(6);
    for placement in PLACEMENTS {
        for execution in [Execution::Fused, Execution::OpByOp] {
            let torchvision = OpSpec::RandomResizedCrop {
                size: Size::Int(SIZE),
                scale: [0.08, 1.0],
                ratio: [0.75, 4.0 / 3.0],
                interpolation: serde_json::from_value(serde_json::json!("bicubic"))
                    .expect("parses"),
                antialias: true,
            };
            let plan = |crop: OpSpec| {
                Pipeline::new(PipelineSpec::new(ops(placement, crop)).execution(execution))
                    .expect("plans")
            };
            let want = plan(torchvision);
            for one in [serde_json::json!("bicubic"), serde_json::json!(["bicubic"])] {
                let got = plan(timm_rrc(one.clone()));
                for (name, bytes) in &corpus {
                    for index in 0..INDICES {
                        let (a, rng_a) =
                            stage_pipeline::try_run_f32(&got, bytes, SEED, index).expect("runs");
                        let (b, rng_b) =
                            stage_pipeline::try_run_f32(&want, bytes, SEED, index).expect("runs");
                        let what = format!("{one} {placement:?} {execution:?} {name} #{index}");
                        assert!(bits(&a) == bits(&b), "{what}");
                        // The same draws: the generators are left in the same state.
                        let (mut rng_a, mut rng_b) = (rng_a, rng_b);
                        assert_eq!(
                            tensor::draw_flip(&mut rng_a, 0.5),
                            tensor::draw_flip(&mut rng_b, 0.5),
                            "{what}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn a_choice_allocates_nothing_once_warm() {
    let corpus = stage_pipeline::corpus(8);
    for placement in PLACEMENTS {
        for execution in [Execution::Fused, Execution::OpByOp] {
            let spec = PipelineSpec::new(ops(placement, timm_rrc(serde_json::json!("random"))))
                .execution(execution);
            let pipeline = Pipeline::new(spec).expect("plans");
            let mut ctx = pipeline.new_context().expect("context");
            let mut out = vec![0f32; pipeline.sample_len()];
            let mut pass = || {
                allocations_over(
                    &pipeline,
                    &mut ctx,
                    &mut out,
                    &corpus,
                    SEED,
                    0..6,
                    allocations,
                )
            };
            // Two passes to warm, as timm_pipeline.rs explains (the AVX-512 plan grows once
            // more on the second).
            pass();
            pass();
            assert_eq!(
                pass(),
                0,
                "{placement:?} {execution:?}: steady state allocated"
            );
        }
    }
}

#[test]
fn invalid_specs_are_refused_naming_op_and_argument() {
    let cases = [
        (
            serde_json::json!("nearest-exact"),
            "`interpolation`: RandomResizedCropAndInterpolation: \"nearest-exact\" is not a resize filter",
        ),
        (
            serde_json::json!(["bilinear", "cubic"]),
            "`interpolation`: RandomResizedCropAndInterpolation: \"cubic\" is not a resize filter",
        ),
        (
            serde_json::json!(["random"]),
            "`interpolation`: RandomResizedCropAndInterpolation: \"random\" is not a resize filter",
        ),
        (
            serde_json::json!([]),
            "`interpolation`: RandomResizedCropAndInterpolation: an empty list",
        ),
        (
            serde_json::Value::from(vec!["box"; 9]),
            "`interpolation`: RandomResizedCropAndInterpolation: 9 filters: at most 8",
        ),
    ];
    for placement in PLACEMENTS {
        for (interpolation, want) in &cases {
            let got = stage_pipeline::plan_error(PipelineSpec::new(ops(
                placement,
                timm_rrc(interpolation.clone()),
            )));
            assert!(got.contains(want), "{placement:?} {interpolation}: {got}");
        }
    }
    let bad_scale: OpSpec = serde_json::from_value(serde_json::json!({
        "op": "RandomResizedCropAndInterpolation", "size": 8, "scale": [1.0, 0.5],
    }))
    .expect("parses");
    let got = stage_pipeline::plan_error(PipelineSpec::new(ops(Placement::Fused, bad_scale)));
    assert!(
        got.contains("`scale`: RandomResizedCropAndInterpolation: "),
        "{got}"
    );
    let zero: OpSpec = serde_json::from_value(serde_json::json!({
        "op": "RandomResizedCropAndInterpolation", "size": [0, 8],
    }))
    .expect("parses");
    let got = stage_pipeline::plan_error(PipelineSpec::new(ops(Placement::Staged, zero)));
    assert!(
        got.contains("`size`: RandomResizedCropAndInterpolation: size 0x8"),
        "{got}"
    );
}
