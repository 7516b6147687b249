//! timm's `RandomErasing` (`TimmRandomErasing`) on the float32 slot, on the decode corpus.
//!
//! The reference for every sample is built from independent parts: the op-by-op pipeline
//! without the erasing, then the policy's draws (`TimmRandomErasing::draw_count`,
//! `draw_block`), the normals (`fill_standard_normal`) and the `erase` kernel, continued on
//! the same sample generator (before `normalize` when the erasing is written there). Fused,
//! staged and op-by-op runs must equal it bit for bit, in every mode and with several blocks.
//! Also: its span, no allocation once warm, refusals naming op and argument, JSON names and
//! defaults, and `apply_timm_random_erasing` (the debug hook's entry) running what the
//! pipeline runs.

use ferroloader_transforms::augment::geometry::{erase, EraseValue as Fill};
use ferroloader_transforms::augment::policy::{
    draw_p_item, EraseRect, TimmEraseMode, TimmRandomErasing,
};
use ferroloader_transforms::image::CropRect;
use ferroloader_transforms::rng::{SampleRng, TorchDraws};
use ferroloader_transforms::spec::{
    apply_timm_random_erasing, plan_timm_random_erasing, Execution, Op, OpSpec, OutputDtype,
    Pipeline, PipelineSpec, IMAGENET_MEAN, IMAGENET_STD,
};
use ferroloader_transforms::tensor;

use crate::stage_pipeline;
use stage_pipeline::{bits, flip, normalize, plan_error, steady_state_allocations};

use crate::counting_alloc;
use counting_alloc::allocations;

const SIZE: u32 = 40;
const SEED: u64 = 5;

fn corpus() -> Vec<(String, Vec<u8>)> {
    stage_pipeline::corpus(5)
}

fn rrc() -> OpSpec {
    stage_pipeline::rrc(SIZE)
}

fn timm(probability: f64, mode: TimmEraseMode, counts: (i64, Option<i64>)) -> OpSpec {
    OpSpec::TimmRandomErasing {
        probability,
        min_area: 0.02,
        max_area: 1.0 / 3.0,
        min_aspect: 0.3,
        max_aspect: None,
        mode,
        min_count: counts.0,
        max_count: counts.1,
    }
}

fn plan_with(ops: Vec<OpSpec>, execution: Execution) -> Pipeline {
    Pipeline::new(PipelineSpec::new(ops).execution(execution)).expect("plans")
}

fn run_f32_rng(pipeline: &Pipeline, bytes: &[u8], index: u64) -> (Vec<f32>, SampleRng) {
    stage_pipeline::try_run_f32(pipeline, bytes, SEED, index).expect("runs")
}

/// The reference of `[RandomResizedCrop, flip, ToTensor, (erasing,) Normalize, (erasing)]`:
/// the pipeline without erasing, then the draws and the kernel on the same generator. Returns
/// the sample and the blocks erased.
fn reference(
    erasing: &TimmRandomErasing,
    before_normalize: bool,
    staged: bool,
    bytes: &[u8],
    index: u64,
) -> (Vec<f32>, usize) {
    let ops = if before_normalize {
        vec![rrc(), flip(0.5), OpSpec::ToTensor]
    } else {
        vec![rrc(), flip(0.5), OpSpec::ToTensor, normalize()]
    };
    let (mut out, mut rng) = run_f32_rng(&plan_with(ops, Execution::OpByOp), bytes, index);
    if staged {
        // The coin of the staged pipelines' `RandomInvert(p=0)`, which changes no pixel.
        assert!(!draw_p_item(&mut rng, 0.0));
    }
    let n = SIZE as usize;
    let count = erasing.draw_count(&mut rng);
    let mut blocks = 0;
    for _ in 0..count {
        let Some(r) = erasing.draw_block(SIZE, SIZE, count, &mut rng) else {
            continue;
        };
        blocks += 1;
        let crop = CropRect {
            top: r.top,
            left: r.left,
            height: r.height,
            width: r.width,
        };
        let plane = (r.height * r.width) as usize;
        let values = match erasing.mode() {
            TimmEraseMode::Const => vec![0.0f32; 3],
            TimmEraseMode::Rand => {
                let mut v = vec![0f32; 3];
                rng.fill_standard_normal(&mut v);
                v
            }
            TimmEraseMode::Pixel => {
                let mut v = vec![0f32; 3 * plane];
                rng.fill_standard_normal(&mut v);
                v
            }
        };
        let fill = if erasing.mode() == TimmEraseMode::Pixel {
            Fill::Source(&values)
        } else {
            Fill::PerChannel(&values)
        };
        erase(&mut out, 3, n, n, crop, fill).expect("erases");
    }
    if before_normalize {
        tensor::normalize(&mut out, &IMAGENET_MEAN, &IMAGENET_STD).expect("normalize");
    }
    (out, blocks)
}

#[test]
fn timm_erasing_equals_the_draws_and_kernel_in_every_mode_before_or_after_normalize() {
    let corpus = corpus();
    for mode in [
        TimmEraseMode::Const,
        TimmEraseMode::Rand,
        TimmEraseMode::Pixel,
    ] {
        for counts in [(1, None), (1, Some(3))] {
            for before_normalize in [false, true] {
                let op = timm(0.7, mode, counts);
                let erasing = plan_timm_random_erasing(&op)
                    .expect("valid")
                    .expect("a timm erasing");
                let mut ops = vec![rrc(), flip(0.5), OpSpec::ToTensor, normalize()];
                ops.insert(if before_normalize { 3 } else { 4 }, op);
                let mut staged_ops = ops.clone();
                staged_ops.insert(2, OpSpec::RandomInvert { p: 0.0 });
                let pipelines = [
                    plan_with(ops.clone(), Execution::Fused),
                    plan_with(staged_ops.clone(), Execution::Fused),
                    plan_with(ops, Execution::OpByOp),
                    plan_with(staged_ops, Execution::OpByOp),
                ];
                let mut blocks_seen = [0usize; 4];
                for (name, bytes) in &corpus {
                    for index in 0..6 {
                        for (k, pipeline) in pipelines.iter().enumerate() {
                            let (want, blocks) =
                                reference(&erasing, before_normalize, k % 2 == 1, bytes, index);
                            blocks_seen[blocks.min(3)] += 1;
                            let got = run_f32_rng(pipeline, bytes, index).0;
                            assert!(
                                bits(&got) == bits(&want),
                                "{mode:?} {counts:?} before normalize {before_normalize}, \
                                 pipeline {k}, {name} #{index}"
                            );
                        }
                    }
                }
                assert!(blocks_seen[0] > 0 && blocks_seen[1] > 0, "{blocks_seen:?}");
                if counts.1.is_some() {
                    assert!(blocks_seen[2] + blocks_seen[3] > 0, "{blocks_seen:?}");
                }
            }
        }
    }
}

#[test]
fn the_hook_runs_what_the_pipeline_runs() {
    let (_, bytes) = corpus().into_iter().next().expect("corpus");
    for mode in [
        TimmEraseMode::Const,
        TimmEraseMode::Rand,
        TimmEraseMode::Pixel,
    ] {
        let op = timm(1.0, mode, (2, Some(3)));
        let erasing = plan_timm_random_erasing(&op).expect("valid").expect("timm");
        let plain = plan_with(
            vec![rrc(), flip(0.5), OpSpec::ToTensor, normalize()],
            Execution::Fused,
        );
        let erased = plan_with(
            vec![rrc(), flip(0.5), OpSpec::ToTensor, normalize(), op],
            Execution::Fused,
        );
        for index in 0..4 {
            let (mut out, mut rng) = run_f32_rng(&plain, &bytes, index);
            let mut values = Vec::new();
            let mut blocks: Vec<(EraseRect, usize)> = Vec::new();
            apply_timm_random_erasing(
                &erasing,
                &mut out,
                (SIZE, SIZE),
                &mut rng,
                &mut values,
                &mut |rect, fill| blocks.push((rect, fill.len())),
            )
            .expect("erases");
            assert!(bits(&out) == bits(&run_f32_rng(&erased, &bytes, index).0));
            // p = 1 and 2 or 3 blocks, each of which may fail its ten attempts.
            assert!(blocks.len() <= 3, "{blocks:?}");
            for (rect, len) in blocks {
                let want = match mode {
                    TimmEraseMode::Const => 0,
                    TimmEraseMode::Rand => 3,
                    TimmEraseMode::Pixel => 3 * (rect.height * rect.width) as usize,
                };
                assert_eq!(len, want, "{mode:?}");
            }
        }
    }
}

#[test]
fn timm_erasing_has_its_span_and_allocates_nothing_once_warm() {
    let corpus = corpus();
    let mut ops = vec![rrc(), flip(0.5), OpSpec::ToTensor, normalize()];
    ops.push(timm(1.0, TimmEraseMode::Pixel, (1, Some(3))));
    let got = stage_pipeline::spans(
        &plan_with(ops.clone(), Execution::Fused),
        &corpus[0].1,
        SEED,
    );
    assert_eq!(
        got[got.len() - 4..],
        [
            (true, Op::Fused),
            (false, Op::Fused),
            (true, Op::TimmRandomErasing),
            (false, Op::TimmRandomErasing),
        ]
    );
    ops.push(timm(1.0, TimmEraseMode::Rand, (2, None)));
    for execution in [Execution::Fused, Execution::OpByOp] {
        let pipeline = plan_with(ops.clone(), execution);
        assert_eq!(
            steady_state_allocations(&pipeline, &corpus, SEED, allocations),
            0,
            "{execution:?}: steady state allocated"
        );
    }
}

#[test]
fn bad_timm_erasings_are_refused_naming_op_and_argument() {
    let with = |op: OpSpec| PipelineSpec::new(vec![rrc(), OpSpec::ToTensor, normalize(), op]);
    let base = timm(0.5, TimmEraseMode::Const, (1, None));
    let set = |f: &dyn Fn(&mut OpSpec)| {
        let mut op = base.clone();
        f(&mut op);
        op
    };
    let cases: Vec<(OpSpec, &str)> = vec![
        (timm(1.5, TimmEraseMode::Const, (1, None)), "`probability`"),
        (timm(0.5, TimmEraseMode::Const, (3, Some(2))), "`min_count`"),
        (
            timm(0.5, TimmEraseMode::Const, (1, Some(65))),
            "`max_count`",
        ),
        (
            set(&|op| {
                if let OpSpec::TimmRandomErasing { min_area, .. } = op {
                    *min_area = -0.5;
                }
            }),
            "`min_area`",
        ),
        (
            set(&|op| {
                if let OpSpec::TimmRandomErasing { min_aspect, .. } = op {
                    *min_aspect = 0.0;
                }
            }),
            "`min_aspect`",
        ),
        (
            set(&|op| {
                if let OpSpec::TimmRandomErasing { max_aspect, .. } = op {
                    *max_aspect = Some(f64::INFINITY);
                }
            }),
            "`max_aspect`",
        ),
    ];
    for (op, arg) in cases {
        let msg = plan_error(with(op.clone()));
        assert!(
            msg.contains("TimmRandomErasing") && msg.contains(arg),
            "{op:?}: {msg}"
        );
    }
    let msg = plan_error(with(base.clone()).output(OutputDtype::Uint8));
    assert!(msg.contains("`output`") && msg.contains("uint8"), "{msg}");
    let msg = plan_error(PipelineSpec::new(vec![
        rrc(),
        base.clone(),
        OpSpec::ToTensor,
    ]));
    assert!(msg.contains("ToTensor") && msg.contains("`ops`"), "{msg}");
    let msg = plan_error(
        PipelineSpec::new(vec![rrc(), OpSpec::PilToTensor, base]).output(OutputDtype::Uint8),
    );
    assert!(
        msg.contains("TimmRandomErasing") && msg.contains("ToTensor"),
        "{msg}"
    );
}

#[test]
fn specs_parse_with_timms_names_and_defaults() {
    let json = r#"{"ops": [
        {"op": "RandomResizedCrop", "size": 40},
        {"op": "ToTensor"},
        {"op": "Normalize", "mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5]},
        {"op": "TimmRandomErasing"},
        {"op": "TimmRandomErasing", "probability": 0.25, "mode": "pixel", "max_count": 3,
         "min_area": 0.1, "max_area": 0.4, "min_aspect": 0.5, "max_aspect": 3.0}
    ]}"#;
    let spec: PipelineSpec = serde_json::from_str(json).expect("parses");
    assert_eq!(spec.ops[3], timm(0.5, TimmEraseMode::Const, (1, None)));
    assert_eq!(
        spec.ops[4],
        OpSpec::TimmRandomErasing {
            probability: 0.25,
            min_area: 0.1,
            max_area: 0.4,
            min_aspect: 0.5,
            max_aspect: Some(3.0),
            mode: TimmEraseMode::Pixel,
            min_count: 1,
            max_count: Some(3),
        }
    );
    Pipeline::new(spec.clone()).expect("plans");
    let back: PipelineSpec =
        serde_json::from_str(&serde_json::to_string(&spec).expect("serializes")).expect("parses");
    assert_eq!(back, spec);
    for bad in [
        r#"{"op": "TimmRandomErasing", "mode": "noise"}"#,
        r#"{"op": "TimmRandomErasing", "max_count": 1.5}"#,
    ] {
        assert!(serde_json::from_str::<OpSpec>(bad).is_err(), "{bad} parsed");
    }
}
