//! timm's `ResizeKeepRatio` followed by a crop that fixes the size (`CenterCropOrPad`,
//! `RandomCropOrPad`, `CenterCrop`, `RandomCrop`), the crop-or-pads standing first or
//! among the stage ops, and `RandomRotation(expand=True)` fixed by a later stage op, in planned pipelines on the decode corpus: the fused pass, the staged
//! pass (a pixel op after the crop) and the op-by-op execution give the same samples bit for
//! bit; no allocation once warm; refusals name the op and the argument. Pixels against timm's
//! own objects: python-bindings/tests/test_timm_rkr.py.

use ferroloader_transforms::crop::KeepRatioResize;
use ferroloader_transforms::crop::{crop_or_pad, random_crop_or_pad_offsets, FilterChoice};
use ferroloader_transforms::resize::Filter;
use ferroloader_transforms::rng::sample_rng;
use ferroloader_transforms::spec::{Execution, Op, OpSpec, Pipeline, PipelineSpec};

use crate::stage_pipeline;
use stage_pipeline::{allocations_over, bits, flip, normalize};

use crate::counting_alloc;
use counting_alloc::allocations;

const SEED: u64 = 17;

fn op(json: serde_json::Value) -> OpSpec {
    serde_json::from_value(json).expect("an op")
}

/// timm's rkr training geometry and its variants: each keep-ratio resize with each crop.
fn geometries() -> Vec<Vec<OpSpec>> {
    let resizes = [
        serde_json::json!({"op": "ResizeKeepRatio", "size": [40, 56]}),
        serde_json::json!({"op": "ResizeKeepRatio", "size": [40, 56], "longest": 1.0,
            "interpolation": "bicubic"}),
        serde_json::json!({"op": "ResizeKeepRatio", "size": 48, "interpolation": "random",
            "random_scale_prob": 0.5, "random_scale_range": [0.3, 1.0], "random_scale_area": true,
            "random_aspect_prob": 0.5, "random_aspect_range": [0.6, 1.6667]}),
        serde_json::json!({"op": "ResizeKeepRatio", "size": [48, 40], "longest": 0.4,
            "interpolation": ["lanczos", "nearest", "box"], "random_scale_prob": 1.0,
            "random_scale_range": [0.2, 2.5]}),
    ];
    let crops = [
        serde_json::json!({"op": "CenterCropOrPad", "size": [40, 48], "padding_mode": "reflect"}),
        serde_json::json!({"op": "RandomCropOrPad", "size": [40, 48], "fill": [10, 20, 30]}),
        serde_json::json!({"op": "RandomCropOrPad", "size": 44, "padding_mode": "symmetric"}),
        serde_json::json!({"op": "CenterCrop", "size": [40, 48]}),
        serde_json::json!({"op": "RandomCrop", "size": 40, "pad_if_needed": true,
            "padding_mode": "edge"}),
    ];
    let mut out = Vec::new();
    for resize in &resizes {
        for crop in &crops {
            out.push(vec![op(resize.clone()), op(crop.clone())]);
        }
    }
    // The crop-or-pads first, and one as a stage op after a resize.
    out.push(vec![op(
        serde_json::json!({"op": "RandomCropOrPad", "size": [300, 200], "padding_mode": "edge"}),
    )]);
    out.push(vec![op(
        serde_json::json!({"op": "CenterCropOrPad", "size": [120, 500]}),
    )]);
    // `RandomRotation(expand=True)`: a size per angle among the stage ops, fixed by the crop.
    out.push(vec![
        op(serde_json::json!({"op": "CenterCrop", "size": 40})),
        op(serde_json::json!({"op": "RandomRotation", "degrees": 40, "expand": true,
            "interpolation": "bilinear"})),
        op(serde_json::json!({"op": "RandomCropOrPad", "size": [44, 52], "padding_mode": "reflect"})),
    ]);
    out.push(vec![
        op(serde_json::json!({"op": "Resize", "size": [50, 60]})),
        op(serde_json::json!({"op": "Grayscale", "num_output_channels": 3})),
        op(serde_json::json!({"op": "RandomCropOrPad", "size": [64, 40], "padding_mode": "reflect"})),
    ]);
    out
}

fn pipeline(geometry: &[OpSpec], middle: &[OpSpec], execution: Execution) -> Pipeline {
    let mut ops = geometry.to_vec();
    ops.push(flip(0.5));
    ops.extend_from_slice(middle);
    ops.extend([OpSpec::ToTensor, normalize()]);
    Pipeline::new(PipelineSpec::new(ops).execution(execution)).expect("plans")
}

#[test]
fn fused_staged_and_op_by_op_agree() {
    let corpus = stage_pipeline::corpus(6);
    // A pixel op that changes nothing but sends the sample through the stage.
    let staged = [op(serde_json::json!({"op": "RandomInvert", "p": 0.0}))];
    for geometry in geometries() {
        let runs = [
            pipeline(&geometry, &[], Execution::Fused),
            pipeline(&geometry, &[], Execution::OpByOp),
        ];
        let stage_runs = [
            pipeline(&geometry, &staged, Execution::Fused),
            pipeline(&geometry, &staged, Execution::OpByOp),
        ];
        for (name, bytes) in &corpus {
            for index in 0..4 {
                let want = bits(&stage_pipeline::run_f32(&runs[0], bytes, SEED, index));
                for p in runs.iter().skip(1).chain(&stage_runs) {
                    let got = bits(&stage_pipeline::run_f32(p, bytes, SEED, index));
                    assert!(got == want, "{geometry:?} {name} #{index}");
                }
            }
        }
    }
}

#[test]
fn the_keep_ratio_geometry_allocates_nothing_once_warm() {
    let corpus = stage_pipeline::corpus(6);
    for geometry in geometries() {
        for execution in [Execution::Fused, Execution::OpByOp] {
            let p = pipeline(&geometry, &[], execution);
            let mut ctx = p.new_context().expect("context");
            let mut out = vec![0f32; p.sample_len()];
            let mut pass =
                || allocations_over(&p, &mut ctx, &mut out, &corpus, SEED, 0..8, allocations);
            // One pass warms the buffers to the largest size these samples resize to (each
            // sample's size is drawn, the same again for the same sample); the next allocates
            // nothing.
            pass();
            assert_eq!(pass(), 0, "{geometry:?} {execution:?}");
        }
    }
}

#[test]
fn refusals_name_the_op_and_the_argument() {
    let error = |ops: Vec<serde_json::Value>| {
        let mut ops: Vec<OpSpec> = ops.into_iter().map(op).collect();
        ops.push(OpSpec::ToTensor);
        stage_pipeline::plan_error(PipelineSpec::new(ops))
    };
    let crop = serde_json::json!({"op": "CenterCropOrPad", "size": 8});
    let cases = [
        (
            vec![serde_json::json!({"op": "ResizeKeepRatio", "size": 8})],
            "ResizeKeepRatio's size follows each image and draw",
        ),
        (
            vec![
                serde_json::json!({"op": "ResizeKeepRatio", "size": 8, "longest": 2}),
                crop.clone(),
            ],
            "`longest`: ResizeKeepRatio: 2 must lie in [0, 1]",
        ),
        (
            vec![
                serde_json::json!({"op": "ResizeKeepRatio", "size": 8, "random_aspect_range": [0, 1]}),
                crop.clone(),
            ],
            "`random_aspect_range`: ResizeKeepRatio",
        ),
        (
            vec![
                serde_json::json!({"op": "ResizeKeepRatio", "size": 8, "random_scale_area": true,
                    "random_scale_range": [-1, 1]}),
                crop.clone(),
            ],
            "`random_scale_range`: ResizeKeepRatio",
        ),
        (
            vec![
                serde_json::json!({"op": "ResizeKeepRatio", "size": 8, "interpolation": ["cubic"]}),
                crop.clone(),
            ],
            "`interpolation`: ResizeKeepRatio",
        ),
        (
            vec![serde_json::json!({"op": "RandomCropOrPad", "size": [0, 3]})],
            "`size`: RandomCropOrPad",
        ),
        (
            vec![serde_json::json!({"op": "CenterCropOrPad", "size": 4, "fill": [1, 2]})],
            "CenterCropOrPad",
        ),
    ];
    for (ops, want) in cases {
        let got = error(ops);
        assert!(got.contains(want), "{got:?} lacks {want:?}");
    }
}

#[test]
fn an_expanding_rotation_needs_a_fixed_size_after_it_within_the_pixel_limit() {
    let ops = |middle: serde_json::Value| -> Vec<OpSpec> {
        vec![
            op(serde_json::json!({"op": "CenterCrop", "size": 100})),
            op(serde_json::json!({"op": "RandomRotation", "degrees": 30, "expand": true})),
            op(middle),
            op(serde_json::json!({"op": "CenterCrop", "size": 10})),
            OpSpec::ToTensor,
        ]
    };
    let flip = serde_json::json!({"op": "RandomVerticalFlip"});
    // 100x100 can expand to at most 202x202 pixels.
    assert!(Pipeline::new(PipelineSpec::new(ops(flip.clone())).max_pixels(202 * 202)).is_ok());
    let err = stage_pipeline::plan_error(PipelineSpec::new(ops(flip)).max_pixels(202 * 202 - 1));
    assert!(err.contains("can make a 202x202 one"), "{err}");
    for (middle, want) in [
        (
            serde_json::json!({"op": "Pad", "padding": 2}),
            "Pad after RandomRotation(expand=True)",
        ),
        (
            serde_json::json!({"op": "Resize", "size": 8}),
            "Resize(int) after RandomRotation(expand=True)",
        ),
        (
            serde_json::json!({"op": "GaussianBlur", "kernel_size": 3}),
            "GaussianBlur after RandomRotation(expand=True)",
        ),
    ] {
        let err = stage_pipeline::plan_error(PipelineSpec::new(ops(middle)));
        assert!(err.contains(want), "{err}");
    }
    let alone = vec![
        op(serde_json::json!({"op": "CenterCrop", "size": 100})),
        op(serde_json::json!({"op": "RandomRotation", "degrees": 30, "expand": true})),
        OpSpec::ToTensor,
    ];
    let err = stage_pipeline::plan_error(PipelineSpec::new(alone));
    assert!(err.contains("its size follows each angle"), "{err}");
}

#[test]
fn crop_or_pad_geometry_is_timms() {
    // A shorter side: the offset is at most 0; an offset of 0 pads all after (timm's -0.0).
    let c = crop_or_pad(10, 5, 8, 4, 0, 3).expect("fits");
    assert_eq!(c.padding, [0, 0, 0, 3]);
    assert_eq!(
        (c.rect.top, c.rect.left, c.rect.height, c.rect.width),
        (0, 3, 8, 4)
    );
    let c = crop_or_pad(10, 5, 8, 14, -2, -4).expect("fits");
    assert_eq!(c.padding, [4, 2, 0, 1]);
    assert_eq!((c.rect.top, c.rect.left), (0, 0));
    assert!(crop_or_pad(10, 5, 8, 4, 1, 0).is_err());
    assert!(crop_or_pad(10, 5, 8, 4, -4, 0).is_err());
    assert!(crop_or_pad(10, 5, 8, 4, 0, 7).is_err());
    assert!(crop_or_pad(0, 5, 8, 4, 0, 0).is_err());
    // The offsets stay in reach, signed as the delta, for every size down to 1x1.
    for (w, h, oh, ow) in [(1, 1, 5, 7), (1, 200, 3, 3), (u32::MAX, 1, 1, u32::MAX)] {
        let mut rng = sample_rng(1, 0, 0);
        for _ in 0..50 {
            let (top, left) = random_crop_or_pad_offsets(w, h, oh, ow, &mut rng);
            crop_or_pad(w, h, oh, ow, top, left).expect("in reach");
        }
    }
}

#[test]
fn keep_ratio_sizes_saturate_and_never_panic() {
    let keep = KeepRatioResize::new(
        (1, 1),
        1.0,
        FilterChoice::one(Filter::Bilinear),
        1.0,
        (1e-300, 1e-300),
        true,
        1.0,
        (1e-300, 1e300),
    )
    .expect("valid");
    let mut rng = sample_rng(2, 0, 0);
    for (w, h) in [(1, 1), (u32::MAX, 1), (1, u32::MAX), (u32::MAX, u32::MAX)] {
        let ((rh, rw), index) = keep.draw(w, h, &mut rng);
        assert_eq!(index, 0);
        let _ = (rh, rw);
    }
}

#[test]
fn the_draws_resize_and_padded_crops_have_their_spans() {
    let corpus = stage_pipeline::corpus(1);
    let bytes = &corpus[0].1;
    let border = vec![
        op(serde_json::json!({"op": "ResizeKeepRatio", "size": [40, 56], "longest": 1.0})),
        op(serde_json::json!({"op": "CenterCropOrPad", "size": [40, 56]})),
        OpSpec::ToTensor,
    ];
    let stage = vec![
        op(serde_json::json!({"op": "Resize", "size": [20, 30]})),
        op(serde_json::json!({"op": "Grayscale", "num_output_channels": 3})),
        op(serde_json::json!({"op": "RandomCropOrPad", "size": [40, 56]})),
        OpSpec::ToTensor,
    ];
    for (ops, want) in [
        (
            border,
            [Op::CropParams, Op::Resize, Op::CenterCropOrPad].as_slice(),
        ),
        (stage, [Op::RandomCropOrPad].as_slice()),
    ] {
        for execution in [Execution::Fused, Execution::OpByOp] {
            let p =
                Pipeline::new(PipelineSpec::new(ops.clone()).execution(execution)).expect("plans");
            let entered: Vec<Op> = stage_pipeline::spans(&p, bytes, SEED)
                .into_iter()
                .filter_map(|(enter, op)| enter.then_some(op))
                .collect();
            for op in want {
                assert!(
                    entered.contains(op),
                    "{execution:?}: {op:?} not in {entered:?}"
                );
            }
            assert!(!entered.contains(&Op::RandomCrop), "{entered:?}");
        }
    }
}
