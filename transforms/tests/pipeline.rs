//! The planned pipeline end to end on the decode corpus: every execution path (fused with
//! region-of-interest decode, fused with full decode, op-by-op) gives the same sample, and
//! specs written with torchvision's names parse, plan and fail as documented.

use std::path::PathBuf;

use ferroloader_transforms::decode::{DecodeContext, Decoder};
use ferroloader_transforms::fused::{OutputKind, OutputSlot};
use ferroloader_transforms::rng::sample_rng;
use ferroloader_transforms::spec::{
    Execution, Interpolation, JitterArg, Layout, Op, OpObserver, OpSpec, OutputDtype, Pipeline,
    PipelineSpec, Size, IMAGENET_MEAN, IMAGENET_STD,
};
use ferroloader_transforms::tensor::{self, Scaling};
use ferroloader_transforms::{Error, RgbImage};

use crate::fixtures;

fn fixture_dir() -> PathBuf {
    fixtures::fixture_dir("decode", "make fixtures")
}

/// Every decodable image of the corpus (JPEG and the other formats), by name.
fn corpus() -> Vec<(String, Vec<u8>)> {
    let dir = fixture_dir();
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).expect("manifest"))
            .expect("manifest is JSON");
    manifest["images"]
        .as_array()
        .expect("images list")
        .iter()
        .filter(|e| {
            e["width"].as_u64().unwrap_or(0) * e["height"].as_u64().unwrap_or(0) < 4_000_000
        })
        .map(|e| {
            let file = e["file"].as_str().expect("file name");
            (
                file.to_string(),
                std::fs::read(dir.join(file)).expect("fixture readable"),
            )
        })
        .collect()
}

fn try_run_f32(
    pipeline: &Pipeline,
    bytes: &[u8],
    seed: u64,
    index: u64,
) -> Result<(Vec<f32>, bool), Error> {
    let mut ctx = pipeline.new_context().expect("context");
    let mut out = vec![0f32; pipeline.sample_len()];
    let report = pipeline.run(
        bytes,
        &mut sample_rng(seed, 0, index),
        &mut ctx,
        OutputSlot::F32(&mut out),
        &mut (),
    )?;
    Ok((out, report.flipped))
}

fn run_f32(pipeline: &Pipeline, bytes: &[u8], seed: u64, index: u64) -> (Vec<f32>, bool) {
    try_run_f32(pipeline, bytes, seed, index).expect("runs")
}

fn run_u8(pipeline: &Pipeline, bytes: &[u8], seed: u64) -> Vec<u8> {
    let mut ctx = pipeline.new_context().expect("context");
    let mut out = vec![0u8; pipeline.sample_len()];
    pipeline
        .run(
            bytes,
            &mut sample_rng(seed, 0, 0),
            &mut ctx,
            OutputSlot::U8(&mut out),
            &mut (),
        )
        .expect("runs");
    out
}

#[test]
fn train_pipeline_paths_agree_bit_for_bit() {
    let base = PipelineSpec::imagenet_train(224);
    let paths = [
        Pipeline::new(base.clone()).expect("plans"),
        Pipeline::new(base.clone().roi_decode(false)).expect("plans"),
        Pipeline::new(base.clone().execution(Execution::OpByOp)).expect("plans"),
    ];
    let mut flips = 0;
    let mut runs = 0;
    for (name, bytes) in corpus() {
        for seed in 0..6 {
            let (reference, flipped) = run_f32(&paths[0], &bytes, seed, 7);
            flips += usize::from(flipped);
            runs += 1;
            for other in &paths[1..] {
                let (got, _) = run_f32(other, &bytes, seed, 7);
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert!(
                    bits(&got) == bits(&reference),
                    "{name} seed {seed}: {:?} differs from fused+roi",
                    other.spec().execution
                );
            }
        }
    }
    // Both branches of the flip were exercised.
    assert!(flips > 0 && flips < runs, "{flips} flips in {runs} runs");
}

#[test]
fn uint8_outputs_agree_and_match_the_float_path() {
    let spec = PipelineSpec::imagenet_train(64).output(OutputDtype::Uint8);
    let chw = Pipeline::new(spec.clone()).expect("plans");
    let chw_op = Pipeline::new(spec.clone().execution(Execution::OpByOp)).expect("plans");
    let hwc = Pipeline::new(spec.clone().layout(Layout::Hwc)).expect("plans");
    assert_eq!(
        chw.deferred_normalize(),
        Some((&IMAGENET_MEAN[..], &IMAGENET_STD[..]))
    );
    assert_eq!(hwc.sample_shape(), [64, 64, 3]);
    let unnormalized = Pipeline::new(PipelineSpec::new(vec![
        OpSpec::RandomResizedCrop {
            size: Size::Int(64),
            scale: [0.08, 1.0],
            ratio: [0.75, 4.0 / 3.0],
            interpolation: Default::default(),
            antialias: true,
        },
        OpSpec::RandomHorizontalFlip { p: 0.5 },
        OpSpec::ToTensor,
    ]))
    .expect("plans");
    assert_eq!(
        unnormalized.output_kind(),
        OutputKind::F32ChwUnnormalized {
            scaling: Scaling::Divide
        }
    );
    for (name, bytes) in corpus().into_iter().take(12) {
        let a = run_u8(&chw, &bytes, 3);
        assert_eq!(
            a,
            run_u8(&chw_op, &bytes, 3),
            "{name}: u8 fused vs op-by-op"
        );
        let packed = run_u8(&hwc, &bytes, 3);
        let plane = 64 * 64;
        for p in 0..plane {
            for c in 0..3 {
                assert_eq!(packed[3 * p + c], a[c * plane + p], "{name}: HWC vs CHW");
            }
        }
        let (float, _) = run_f32(&unnormalized, &bytes, 3, 0);
        assert!(
            a.iter()
                .zip(&float)
                .all(|(u, f)| *f == f32::from(*u) / 255.0),
            "{name}"
        );
    }
}

#[test]
fn eval_pipeline_paths_agree() {
    let fused = Pipeline::new(PipelineSpec::imagenet_eval(256, 224)).expect("plans");
    let op = Pipeline::new(PipelineSpec::imagenet_eval(256, 224).execution(Execution::OpByOp))
        .expect("plans");
    assert_eq!(fused.output_size(), (224, 224));
    let mut ran = 0;
    for (name, bytes) in corpus() {
        let (out, flipped) =
            try_run_f32(&fused, &bytes, 0, 0).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(!flipped);
        let (expected, _) = run_f32(&op, &bytes, 0, 0);
        assert_eq!(out, expected, "{name}");
        // Deterministic: no randomness in eval.
        assert_eq!(run_f32(&fused, &bytes, 9, 9).0, out, "{name}");
        ran += 1;
    }
    assert!(ran > 10, "only {ran} images ran the eval pipeline");
}

#[test]
fn a_pipeline_with_no_crop_or_resize_keeps_the_size_it_is_given() {
    // CIFAR's test transform, with a flip: the decoded image as it is, then the conversion.
    let ops = vec![
        OpSpec::RandomHorizontalFlip { p: 1.0 },
        OpSpec::ToTensor,
        OpSpec::Normalize {
            mean: IMAGENET_MEAN,
            std: IMAGENET_STD,
        },
    ];
    let mut decode = DecodeContext::new(Default::default()).expect("context");
    for (name, bytes) in corpus().into_iter().take(8) {
        let mut img = RgbImage::new();
        decode.decode(&bytes, &mut img).expect("decodes");
        let (h, w) = (img.height(), img.width());
        let mut spec = PipelineSpec::new(ops.clone());
        assert!(spec.keeps_image_size());
        spec.image_size = Some([h, w]);
        let fused = Pipeline::new(spec.clone()).expect("plans");
        let op_by_op = Pipeline::new(spec.execution(Execution::OpByOp)).expect("plans");
        assert_eq!(fused.output_size(), (h, w));
        tensor::hflip(&mut img);
        let mut want = vec![0f32; fused.sample_len()];
        tensor::to_tensor(img.view(), &mut want).expect("converts");
        tensor::normalize(&mut want, &IMAGENET_MEAN, &IMAGENET_STD).expect("normalizes");
        assert_eq!(
            run_f32(&fused, &bytes, 0, 0),
            (want.clone(), true),
            "{name}: fused"
        );
        assert_eq!(
            run_f32(&op_by_op, &bytes, 0, 0),
            (want, true),
            "{name}: op by op"
        );
        // An image of another size is that sample's error, naming both sizes.
        let mut other = PipelineSpec::new(ops.clone());
        other.image_size = Some([h + 1, w]);
        let other = Pipeline::new(other).expect("plans");
        let err = try_run_f32(&other, &bytes, 0, 0).expect_err("another size");
        let msg = err.to_string();
        assert!(
            msg.contains(&format!("the image is {w}x{h}"))
                && msg.contains(&format!("{w}x{}", h + 1)),
            "{name}: {msg}"
        );
    }
    // Without the size there is nothing to plan the batch by.
    assert!(plan_error(ops).contains("`image_size`"));
}

#[test]
fn to_dtype_multiplies_by_the_reciprocal_in_every_pass() {
    // v2's `ToDtype(torch.float32, scale=True)`: `x * float32(1 / 255)` (then Normalize's two
    // roundings), in the fused pass, op by op, and after a pixel op (the staged pass); the
    // uint8 output of the same spec gives each sample's pixels.
    let recip = (1.0f64 / 255.0) as f32;
    let head = vec![
        OpSpec::Resize {
            size: Size::Int(40),
            interpolation: Default::default(),
            max_size: None,
            antialias: true,
        },
        OpSpec::CenterCrop {
            size: Size::Int(32),
        },
    ];
    let mut checked = 0;
    for staged in [false, true] {
        for normalize in [false, true] {
            let mut ops = head.clone();
            if staged {
                ops.push(OpSpec::RandomInvert { p: 1.0 });
            }
            let mut pixels = ops.clone();
            pixels.push(OpSpec::PilToTensor);
            ops.push(OpSpec::ToDtypeFloat32);
            if normalize {
                ops.push(OpSpec::Normalize {
                    mean: IMAGENET_MEAN,
                    std: IMAGENET_STD,
                });
            }
            let u8_spec = PipelineSpec::new(pixels).output(OutputDtype::Uint8);
            let pixels = Pipeline::new(u8_spec).expect("plans");
            let fused = Pipeline::new(PipelineSpec::new(ops.clone())).expect("plans");
            let op_spec = PipelineSpec::new(ops).execution(Execution::OpByOp);
            let op_by_op = Pipeline::new(op_spec).expect("plans");
            assert_eq!(
                fused.output_kind().scaling(),
                Some(Scaling::Reciprocal),
                "{:?}",
                fused.output_kind()
            );
            for (name, bytes) in corpus().into_iter().take(6) {
                let want: Vec<f32> = run_u8(&pixels, &bytes, 0)
                    .iter()
                    .enumerate()
                    .map(|(i, &v)| {
                        let x = f32::from(v) * recip;
                        let c = i / (32 * 32);
                        match normalize {
                            true => (x - IMAGENET_MEAN[c]) / IMAGENET_STD[c],
                            false => x,
                        }
                    })
                    .collect();
                let what = format!("{name}: staged {staged}, normalize {normalize}");
                assert_eq!(run_f32(&fused, &bytes, 0, 0).0, want, "{what}: fused");
                assert_eq!(run_f32(&op_by_op, &bytes, 0, 0).0, want, "{what}: op by op");
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 24);
    // The spec's name for it, and ToTensor's JSON meaning what it meant.
    let json = r#"{"ops":[{"op":"CenterCrop","size":8},{"op":"ToDtype"}]}"#;
    let spec: PipelineSpec = serde_json::from_str(json).expect("parses");
    assert_eq!(spec.ops.last(), Some(&OpSpec::ToDtypeFloat32));
    let old = r#"{"ops":[{"op":"CenterCrop","size":8},{"op":"ToTensor"}]}"#;
    let old = Pipeline::new(serde_json::from_str(old).expect("parses")).expect("plans");
    assert_eq!(old.output_kind().scaling(), Some(Scaling::Divide));
}

#[test]
fn images_of_any_size_batch_when_a_later_op_fixes_the_size() {
    // A colour op before the crop: planned on the first image's size, but the crop makes every
    // sample 24x24, so other sizes are fine; without the crop they are the sample's error.
    let jitter = OpSpec::ColorJitter {
        brightness: JitterArg::Range([1.3, 1.3]),
        contrast: Default::default(),
        saturation: Default::default(),
        hue: Default::default(),
    };
    let crop = OpSpec::CenterCrop {
        size: Size::Int(24),
    };
    let cropped = |image_size| {
        let mut spec = PipelineSpec::new(vec![jitter.clone(), crop.clone(), OpSpec::PilToTensor]);
        spec.image_size = Some(image_size);
        spec.output = OutputDtype::Uint8;
        Pipeline::new(spec).expect("plans")
    };
    let mut decode = DecodeContext::new(Default::default()).expect("context");
    for (name, bytes) in corpus().into_iter().take(4) {
        let mut img = RgbImage::new();
        decode.decode(&bytes, &mut img).expect("decodes");
        let (h, w) = (img.height(), img.width());
        let own = cropped([h, w]);
        let other = cropped([h + 5, w + 9]);
        assert_eq!(run_u8(&other, &bytes, 0), run_u8(&own, &bytes, 0), "{name}");
        let mut uncropped = PipelineSpec::new(vec![jitter.clone(), OpSpec::ToTensor]);
        uncropped.image_size = Some([h + 5, w + 9]);
        let uncropped = Pipeline::new(uncropped).expect("plans");
        let msg = try_run_f32(&uncropped, &bytes, 0, 0)
            .expect_err("another size")
            .to_string();
        assert!(
            msg.contains(&format!("the image is {w}x{h}")),
            "{name}: {msg}"
        );
    }
}

#[test]
fn a_resize_of_the_shorter_side_alone_is_sized_by_the_first_image() {
    // CIFAR's `Resize(48)` before a model that wants larger inputs: no crop after it, so the
    // size follows the images'; each image must resize to that size.
    let ops = vec![
        OpSpec::Resize {
            size: Size::Int(48),
            max_size: None,
            interpolation: Default::default(),
            antialias: true,
        },
        OpSpec::RandomGrayscale { p: 0.0 },
        OpSpec::ToTensor,
    ];
    assert!(PipelineSpec::new(ops.clone()).needs_image_size());
    assert!(!PipelineSpec::imagenet_eval(56, 48).needs_image_size());
    assert!(plan_error(ops.clone()).contains("Resize(int) alone keeps each image's aspect ratio"));
    let mut decode = DecodeContext::new(Default::default()).expect("context");
    for (name, bytes) in corpus().into_iter().take(4) {
        let mut img = RgbImage::new();
        decode.decode(&bytes, &mut img).expect("decodes");
        let (h, w) = (img.height(), img.width());
        let mut spec = PipelineSpec::new(ops.clone());
        spec.image_size = Some([h, w]);
        let fused = Pipeline::new(spec.clone()).expect("plans");
        let (rh, rw) = if h <= w {
            (48, (48 * w / h).max(1))
        } else {
            ((48 * h / w).max(1), 48)
        };
        assert_eq!(fused.output_size(), (rh, rw), "{name}");
        let op_by_op = Pipeline::new(spec.execution(Execution::OpByOp)).expect("plans");
        assert_eq!(
            run_f32(&fused, &bytes, 0, 0),
            run_f32(&op_by_op, &bytes, 0, 0),
            "{name}"
        );
        // Planned for an image of another aspect ratio, this one is the sample's error.
        let mut other = PipelineSpec::new(ops.clone());
        other.image_size = Some([h, 2 * w + 7]);
        let other = Pipeline::new(other).expect("plans");
        let msg = try_run_f32(&other, &bytes, 0, 0)
            .expect_err("another aspect ratio")
            .to_string();
        assert!(
            msg.contains(&format!("the image is {w}x{h}, resized to {rw}x{rh}"))
                && msg.contains("add CenterCrop"),
            "{name}: {msg}"
        );
    }
}

/// `spec` with its first op (RandomResizedCrop or Resize) set to `interpolation`.
fn with_interpolation(mut spec: PipelineSpec, interpolation: Interpolation) -> PipelineSpec {
    match &mut spec.ops[0] {
        OpSpec::RandomResizedCrop {
            interpolation: i, ..
        }
        | OpSpec::Resize {
            interpolation: i, ..
        } => *i = interpolation,
        other => panic!("no interpolation in {other:?}"),
    }
    spec
}

#[test]
fn every_interpolation_runs_the_same_on_every_path() {
    // Fused (ROI and full decode), staged (a pixel op that never fires: p = 0 still draws) and
    // op-by-op runs give the same sample with each filter; and the filters differ.
    for interpolation in [Interpolation::Nearest, Interpolation::Bicubic] {
        let train = with_interpolation(PipelineSpec::imagenet_train(96), interpolation);
        let mut staged = train.clone();
        staged.ops.insert(2, OpSpec::RandomGrayscale { p: 0.0 });
        let eval = with_interpolation(PipelineSpec::imagenet_eval(110, 96), interpolation);
        let groups = [
            vec![
                train.clone(),
                train.clone().roi_decode(false),
                train.clone().execution(Execution::OpByOp),
                staged.clone(),
                staged.execution(Execution::OpByOp),
            ],
            vec![eval.clone(), eval.execution(Execution::OpByOp)],
        ];
        for specs in groups {
            let bilinear = with_interpolation(specs[0].clone(), Interpolation::Bilinear);
            let bilinear = Pipeline::new(bilinear).expect("plans");
            let paths: Vec<Pipeline> = specs
                .into_iter()
                .map(|s| Pipeline::new(s).expect("plans"))
                .collect();
            let mut differs_from_bilinear = 0;
            for (name, bytes) in corpus().into_iter().take(8) {
                for seed in 0..3 {
                    let (reference, _) = run_f32(&paths[0], &bytes, seed, 5);
                    for other in &paths[1..] {
                        let (got, _) = run_f32(other, &bytes, seed, 5);
                        assert!(
                            got.iter()
                                .zip(&reference)
                                .all(|(a, b)| a.to_bits() == b.to_bits()),
                            "{name} seed {seed} {interpolation:?}: {:?} differs",
                            other.spec().ops
                        );
                    }
                    differs_from_bilinear +=
                        usize::from(run_f32(&bilinear, &bytes, seed, 5).0 != reference);
                }
            }
            assert!(
                differs_from_bilinear > 0,
                "{interpolation:?} ran as bilinear"
            );
        }
    }
}

#[test]
fn zune_backend_runs_the_same_pipeline() {
    let turbo = Pipeline::new(PipelineSpec::imagenet_train(224)).expect("plans");
    let zune =
        Pipeline::new(PipelineSpec::imagenet_train(224).decoder(Decoder::Zune)).expect("plans");
    let (name, bytes) = corpus()
        .into_iter()
        .find(|(n, _)| n == "jpeg_420_q95.jpg")
        .expect("in corpus");
    let (a, _) = run_f32(&turbo, &bytes, 1, 1);
    let (b, _) = run_f32(&zune, &bytes, 1, 1);
    // Same crop and flip; pixels differ by the decoders' few levels at most.
    let max = a
        .iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max);
    assert!(
        max < 6.0 / 255.0 / 0.224,
        "{name}: max normalized difference {max}"
    );
}

#[derive(Default)]
struct Recorder(Vec<(bool, Op)>);

impl OpObserver for Recorder {
    fn enter(&mut self, op: Op) {
        self.0.push((true, op));
    }
    fn exit(&mut self, op: Op) {
        self.0.push((false, op));
    }
}

#[test]
fn observer_sees_balanced_op_spans() {
    let (_, bytes) = corpus().into_iter().next().expect("corpus");
    for (execution, expected) in [
        (
            Execution::Fused,
            // The crop is drawn between reading the header and decoding the region, inside
            // the one decode span.
            vec![Op::Decode, Op::CropParams, Op::Fused],
        ),
        (
            Execution::OpByOp,
            vec![
                Op::Decode,
                Op::CropParams,
                Op::Crop,
                Op::Resize,
                Op::ToTensor,
                Op::Normalize,
            ],
        ),
    ] {
        // p = 0: never flips, so the op list is fixed.
        let mut spec = PipelineSpec::imagenet_train(32).execution(execution);
        spec.ops[1] = OpSpec::RandomHorizontalFlip { p: 0.0 };
        let pipeline = Pipeline::new(spec).expect("plans");
        let mut ctx = pipeline.new_context().expect("context");
        let mut out = vec![0f32; pipeline.sample_len()];
        let mut rec = Recorder::default();
        pipeline
            .run(
                &bytes,
                &mut sample_rng(0, 0, 0),
                &mut ctx,
                OutputSlot::F32(&mut out),
                &mut rec,
            )
            .expect("runs");
        let entered: Vec<Op> = rec
            .0
            .iter()
            .filter(|(e, _)| *e)
            .map(|(_, op)| *op)
            .collect();
        assert_eq!(entered, expected, "{execution:?}");
        // Every exit closes the innermost open span, and all are closed.
        let mut open = Vec::new();
        for &(enter, op) in &rec.0 {
            if enter {
                open.push(op);
            } else {
                assert_eq!(open.pop(), Some(op), "{execution:?}: spans nest");
            }
        }
        assert!(open.is_empty(), "{execution:?}: {open:?} left open");
    }
}

#[test]
fn spec_parses_torchvision_names_and_round_trips() {
    let json = r#"{
        "ops": [
            {"op": "RandomResizedCrop", "size": 224, "scale": [0.25, 1.0]},
            {"op": "RandomHorizontalFlip"},
            {"op": "ToTensor"},
            {"op": "Normalize", "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}
        ],
        "decoder": "zune",
        "output": "float32"
    }"#;
    let spec: PipelineSpec = serde_json::from_str(json).expect("parses");
    assert_eq!(spec.decoder, Decoder::Zune);
    assert!(spec.roi_decode, "roi_decode defaults to true");
    assert_eq!(spec.ops[1], OpSpec::RandomHorizontalFlip { p: 0.5 });
    match &spec.ops[0] {
        OpSpec::RandomResizedCrop {
            size, scale, ratio, ..
        } => {
            assert_eq!(*size, Size::Int(224));
            assert_eq!(*scale, [0.25, 1.0]);
            assert_eq!(*ratio, [0.75, 4.0 / 3.0]);
        }
        other => panic!("parsed as {other:?}"),
    }
    let back: PipelineSpec =
        serde_json::from_str(&serde_json::to_string(&spec).expect("serializes")).expect("parses");
    assert_eq!(back, spec);
    let planned = Pipeline::new(spec).expect("plans");
    assert_eq!(planned.sample_shape(), [3, 224, 224]);

    let eval: PipelineSpec = serde_json::from_str(
        r#"{"ops": [{"op": "Resize", "size": 256}, {"op": "CenterCrop", "size": [224, 200]},
                    {"op": "PILToTensor"}], "output": "uint8"}"#,
    )
    .expect("parses");
    assert_eq!(
        Pipeline::new(eval).expect("plans").sample_shape(),
        [3, 224, 200]
    );

    for (name, mode) in [
        ("nearest", Interpolation::Nearest),
        ("bilinear", Interpolation::Bilinear),
        ("bicubic", Interpolation::Bicubic),
        ("box", Interpolation::Box),
        ("hamming", Interpolation::Hamming),
        ("lanczos", Interpolation::Lanczos),
    ] {
        let json = format!(
            r#"{{"ops": [{{"op": "Resize", "size": 256, "interpolation": "{name}"}},
                        {{"op": "CenterCrop", "size": 224}}, {{"op": "ToTensor"}}]}}"#
        );
        let spec: PipelineSpec = serde_json::from_str(&json).expect("parses");
        assert!(
            matches!(spec.ops[0], OpSpec::Resize { interpolation, .. } if interpolation == mode)
        );
        Pipeline::new(spec).expect("plans");
    }
    // torchvision's tensor-only mode: no Pillow filter to be exact with.
    let refused = r#"{"ops": [{"op": "Resize", "size": 8, "interpolation": "nearest-exact"}]}"#;
    let err = serde_json::from_str::<PipelineSpec>(refused).expect_err("nearest-exact refused");
    assert!(err.to_string().contains("nearest-exact"), "{err}");
    for bad in [
        r#"{"ops": [{"op": "ElasticTransform", "alpha": 50.0}]}"#,
        r#"{"ops": [{"op": "RandomResizedCrop", "size": 224, "interpolation": "lanczos3"}]}"#,
        r#"{"ops": [{"op": "RandomResizedCrop", "size": 224, "sizes": 3}]}"#,
    ] {
        assert!(
            serde_json::from_str::<PipelineSpec>(bad).is_err(),
            "{bad} parsed"
        );
    }
}

fn plan_error(ops: Vec<OpSpec>) -> String {
    match Pipeline::new(PipelineSpec::new(ops)) {
        Err(err @ Error::InvalidArgument { .. }) => err.to_string(),
        Err(other) => panic!("wrong error kind: {other}"),
        Ok(_) => panic!("planned"),
    }
}

#[test]
fn bad_specs_are_invalid_arguments_naming_the_problem() {
    let rrc = || OpSpec::RandomResizedCrop {
        size: Size::Int(224),
        scale: [0.08, 1.0],
        ratio: [0.75, 4.0 / 3.0],
        interpolation: Default::default(),
        antialias: true,
    };
    assert!(plan_error(vec![OpSpec::ToTensor]).contains("`image_size`"));
    assert!(plan_error(vec![
        OpSpec::Resize {
            size: Size::Int(256),
            max_size: None,
            interpolation: Default::default(),
            antialias: true
        },
        OpSpec::ToTensor
    ])
    .contains("Resize(int) alone keeps each image's aspect ratio"));
    assert!(plan_error(vec![
        rrc(),
        OpSpec::ToTensor,
        OpSpec::Normalize {
            mean: [0.5; 3],
            std: [0.5, 0.0, 0.5]
        }
    ])
    .contains("`std`"));
    assert!(plan_error(vec![
        rrc(),
        OpSpec::RandomHorizontalFlip { p: 1.5 },
        OpSpec::ToTensor
    ])
    .contains("`p`"));
    assert!(plan_error(vec![
        rrc(),
        OpSpec::Normalize {
            mean: [0.5; 3],
            std: [0.5; 3]
        }
    ])
    .contains("after the geometric"));
    assert!(plan_error(vec![rrc(), OpSpec::ToTensor, OpSpec::ToTensor]).contains("after"));
    assert!(
        plan_error(vec![rrc()]).contains("`output`"),
        "float32 needs ToTensor"
    );
    let mut bad_scale = rrc();
    if let OpSpec::RandomResizedCrop { scale, .. } = &mut bad_scale {
        *scale = [1.0, 0.5];
    }
    assert!(plan_error(vec![bad_scale, OpSpec::ToTensor]).contains("scale"));

    let pipeline = Pipeline::new(PipelineSpec::imagenet_train(8)).expect("plans");
    let mut ctx = pipeline.new_context().expect("context");
    let (_, bytes) = corpus().into_iter().next().expect("corpus");
    let mut short = vec![0f32; 10];
    let err = pipeline
        .run(
            &bytes,
            &mut sample_rng(0, 0, 0),
            &mut ctx,
            OutputSlot::F32(&mut short),
            &mut (),
        )
        .expect_err("slot too short");
    assert!(err.to_string().contains("`out`"), "{err}");
    let mut wrong_type = vec![0u8; pipeline.sample_len()];
    assert!(pipeline
        .run(
            &bytes,
            &mut sample_rng(0, 0, 0),
            &mut ctx,
            OutputSlot::U8(&mut wrong_type),
            &mut ()
        )
        .is_err());
    // Garbage bytes are a decode error, not a panic.
    assert!(pipeline
        .run(
            b"<html>",
            &mut sample_rng(0, 0, 0),
            &mut ctx,
            OutputSlot::F32(&mut vec![0f32; pipeline.sample_len()]),
            &mut ()
        )
        .is_err());
}
