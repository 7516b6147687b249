//! Random compositions (`RandomApply`, `RandomChoice`, `RandomOrder`, nested in each other, with
//! `Compose`) in the stage, and `RandomErasing` on the float32 slot, on the decode corpus.
//!
//! The reference for every sample is built from independent parts: the op-by-op pipeline
//! without the composition (uint8 HWC: crop, resize, flip), then the policy's draws for the
//! composition (`draw_apply`, `RandomChoice::draw`, `RandomOrder::draw`) and the colour kernels,
//! continued on the same sample generator in torchvision's order, then `to_tensor` +
//! `normalize`; for erasing, the pipeline without it, then `RandomErasing::draw`, the normals
//! and the `erase` kernel (before `normalize` when it is written there). Fused, staged and
//! op-by-op runs must equal it bit for bit. Also: spans, top-level `Compose` flattened, no
//! allocation once warm, refusals naming op and argument, JSON names and defaults.

use ferroloader_transforms::augment::color;
use ferroloader_transforms::augment::geometry::{erase, EraseValue as Fill};
use ferroloader_transforms::augment::policy::{
    draw_apply, draw_p_item, EraseValue, RandomChoice, RandomErasing, RandomOrder,
};
use ferroloader_transforms::image::CropRect;
use ferroloader_transforms::rng::{sample_rng, SampleRng, TorchDraws};
use ferroloader_transforms::spec::{
    EraseFill, Execution, Op, OpSpec, OutputDtype, Pipeline, PipelineSpec, IMAGENET_MEAN,
    IMAGENET_STD,
};
use ferroloader_transforms::{tensor, RgbImage};

use crate::stage_pipeline;
use stage_pipeline::{bits, flip, normalize, plan_error, steady_state_allocations, to_normalized};

use crate::counting_alloc;
use counting_alloc::allocations;

const SIZE: u32 = 40;
const SEED: u64 = 21;

fn corpus() -> Vec<(String, Vec<u8>)> {
    stage_pipeline::corpus(6)
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

/// One float32 sample of `pipeline` for `index`, and the generator after its draws.
fn run_f32_rng(pipeline: &Pipeline, bytes: &[u8], index: u64) -> (Vec<f32>, SampleRng) {
    stage_pipeline::try_run_f32(pipeline, bytes, SEED, index).expect("runs")
}

/// The op-by-op uint8 HWC run of `[RandomResizedCrop, flip(0.5)]` on `rng`: what the stage ops
/// see. Leaves `rng` after the crop and flip draws.
fn stage_image(bytes: &[u8], rng: &mut SampleRng) -> RgbImage {
    stage_pipeline::stage_image(vec![rrc(), flip(0.5)], bytes, rng)
}

fn invert(p: f64) -> OpSpec {
    OpSpec::RandomInvert { p }
}

fn posterize(bits: i64, p: f64) -> OpSpec {
    OpSpec::RandomPosterize { bits, p }
}

fn solarize(p: f64) -> OpSpec {
    OpSpec::RandomSolarize {
        threshold: 100.0,
        p,
    }
}

fn equalize(p: f64) -> OpSpec {
    OpSpec::RandomEqualize { p }
}

fn apply(transforms: Vec<OpSpec>, p: f64) -> OpSpec {
    OpSpec::RandomApply { transforms, p }
}

fn choice(transforms: Vec<OpSpec>, p: Option<Vec<f64>>) -> OpSpec {
    OpSpec::RandomChoice { transforms, p }
}

fn order(transforms: Vec<OpSpec>) -> OpSpec {
    OpSpec::RandomOrder { transforms }
}

fn compose(transforms: Vec<OpSpec>) -> OpSpec {
    OpSpec::Compose { transforms }
}

fn erasing(p: f64, value: EraseFill) -> OpSpec {
    OpSpec::RandomErasing {
        p,
        scale: [0.02, 0.33],
        ratio: [0.3, 3.3],
        value,
        inplace: false,
    }
}

fn plan_with(ops: Vec<OpSpec>, execution: Execution) -> Pipeline {
    Pipeline::new(PipelineSpec::new(ops).execution(execution)).expect("plans")
}

/// What happened in a reference run, to check both outcomes of each draw occur.
#[derive(Default, Debug)]
struct Seen {
    applied: usize,
    skipped: usize,
    chosen: [usize; 4],
    orders: std::collections::BTreeSet<Vec<u8>>,
}

/// Draws and applies `op` as torchvision would, from the policy draws and the kernels.
fn reference_op(op: &OpSpec, img: &mut RgbImage, rng: &mut SampleRng, seen: &mut Seen) {
    match op {
        OpSpec::RandomInvert { p } => {
            if draw_p_item(rng, *p) {
                color::invert(img);
            }
        }
        OpSpec::RandomPosterize { bits, p } => {
            if draw_p_item(rng, *p) {
                color::posterize(img, *bits as u8).expect("posterize");
            }
        }
        OpSpec::RandomSolarize { threshold, p } => {
            if draw_p_item(rng, *p) {
                color::solarize(img, *threshold);
            }
        }
        OpSpec::RandomEqualize { p } => {
            if draw_p_item(rng, *p) {
                color::equalize(img);
            }
        }
        OpSpec::RandomHorizontalFlip { p } => {
            if *p > 0.0 && tensor::draw_flip(rng, *p) {
                tensor::hflip(img);
            }
        }
        OpSpec::Compose { transforms } => {
            for t in transforms {
                reference_op(t, img, rng, seen);
            }
        }
        OpSpec::RandomApply { transforms, p } => {
            if draw_apply(rng, *p) {
                seen.applied += 1;
                for t in transforms {
                    reference_op(t, img, rng, seen);
                }
            } else {
                seen.skipped += 1;
            }
        }
        OpSpec::RandomChoice { transforms, p } => {
            let i = RandomChoice::new(transforms.len(), p.as_deref())
                .expect("choice")
                .draw(rng);
            seen.chosen[i.min(3)] += 1;
            reference_op(&transforms[i], img, rng, seen);
        }
        OpSpec::RandomOrder { transforms } => {
            let perm = RandomOrder::new(transforms.len()).expect("order").draw(rng);
            seen.orders.insert(perm.as_slice().to_vec());
            for &i in perm.as_slice() {
                reference_op(&transforms[usize::from(i)], img, rng, seen);
            }
        }
        other => panic!("no reference for {other:?}"),
    }
}

fn reference(middle: &[OpSpec], bytes: &[u8], index: u64, seen: &mut Seen) -> Vec<f32> {
    let mut rng = sample_rng(SEED, 0, index);
    let mut img = stage_image(bytes, &mut rng);
    for op in middle {
        reference_op(op, &mut img, &mut rng, seen);
    }
    to_normalized(&img)
}

/// Checks fused (staged) and op-by-op runs of `train_with(middle)` against the reference over
/// the corpus; returns what the draws did.
fn check_against_reference(middle: Vec<OpSpec>, samples: u64) -> Seen {
    let fused = plan_with(train_with(middle.clone()), Execution::Fused);
    let op_by_op = plan_with(train_with(middle.clone()), Execution::OpByOp);
    let mut seen = Seen::default();
    for (name, bytes) in &corpus() {
        for index in 0..samples {
            let want = reference(&middle, bytes, index, &mut seen);
            assert!(
                bits(&run_f32(&fused, bytes, index)) == bits(&want),
                "{middle:?} on {name} #{index}: staged differs from the reference"
            );
            assert!(
                bits(&run_f32(&op_by_op, bytes, index)) == bits(&want),
                "{middle:?} on {name} #{index}: op-by-op differs from the reference"
            );
        }
    }
    seen
}

// ---------------------------------------------------------------- compositions

#[test]
fn random_apply_runs_its_ops_or_none_by_one_coin() {
    let seen = check_against_reference(
        vec![
            apply(vec![invert(1.0), posterize(3, 0.5)], 0.5),
            solarize(0.5),
        ],
        6,
    );
    assert!(seen.applied > 0 && seen.skipped > 0, "{seen:?}");
    // p = 1 always, p = 0 (v1: a draw of exactly 0 still applies) all but never.
    let seen = check_against_reference(vec![apply(vec![equalize(1.0)], 1.0)], 3);
    assert_eq!(seen.skipped, 0);
    let seen = check_against_reference(vec![apply(vec![equalize(1.0)], 0.0)], 3);
    assert_eq!(seen.applied, 0);
}

#[test]
fn random_apply_at_p_one_is_its_ops_and_at_p_zero_the_identity_plus_a_draw() {
    let corpus = corpus();
    let inner = vec![invert(1.0), posterize(2, 1.0)];
    let with = plan_with(
        train_with(vec![apply(inner.clone(), 1.0)]),
        Execution::Fused,
    );
    let without = plan_with(
        train_with(vec![apply(inner.clone(), 0.0)]),
        Execution::Fused,
    );
    let bare = plan_with(train_with(inner), Execution::Fused);
    let plain = plan_with(train_with(vec![]), Execution::Fused);
    for (name, bytes) in corpus.iter().take(3) {
        // The coin is drawn after the flip and nothing draws after it: the pixels are the
        // inner ops' (p = 1) or untouched (p = 0).
        assert!(
            bits(&run_f32(&with, bytes, 1)) == bits(&run_f32(&bare, bytes, 1)),
            "{name}"
        );
        assert!(
            bits(&run_f32(&without, bytes, 1)) == bits(&run_f32(&plain, bytes, 1)),
            "{name}"
        );
    }
}

#[test]
fn random_choice_runs_the_drawn_choice_weighted_or_not() {
    let choices = vec![
        invert(1.0),
        compose(vec![posterize(2, 1.0), flip(1.0)]),
        equalize(1.0),
    ];
    let seen = check_against_reference(vec![choice(choices.clone(), None)], 6);
    assert!(seen.chosen[..3].iter().all(|&n| n > 0), "{seen:?}");
    let seen = check_against_reference(vec![choice(choices, Some(vec![0.0, 3.0, 1.0]))], 6);
    assert_eq!(seen.chosen[0], 0, "a zero weight was chosen: {seen:?}");
    assert!(seen.chosen[1] > 0, "{seen:?}");
}

#[test]
fn random_order_runs_every_item_in_the_drawn_order() {
    let items = vec![
        invert(1.0),
        compose(vec![posterize(3, 1.0), solarize(0.5)]),
        equalize(1.0),
    ];
    let seen = check_against_reference(vec![order(items)], 8);
    assert!(seen.orders.len() >= 3, "{seen:?}");
}

#[test]
fn compositions_nest_in_each_other() {
    let nested = vec![
        flip(0.5),
        apply(
            vec![
                choice(
                    vec![
                        order(vec![invert(1.0), posterize(2, 1.0)]),
                        compose(vec![apply(vec![equalize(1.0)], 0.5), solarize(1.0)]),
                    ],
                    None,
                ),
                flip(0.5),
            ],
            0.7,
        ),
        order(vec![solarize(0.5), apply(vec![invert(1.0)], 0.5)]),
        flip(0.5),
    ];
    let seen = check_against_reference(nested, 8);
    assert!(seen.applied > 0 && seen.skipped > 0, "{seen:?}");
}

#[test]
fn compose_at_the_top_level_is_flattened_where_it_stands() {
    let flat = plan_with(
        vec![
            rrc(),
            flip(0.5),
            invert(0.5),
            posterize(2, 0.5),
            OpSpec::ToTensor,
            normalize(),
        ],
        Execution::Fused,
    );
    let nested = plan_with(
        vec![
            compose(vec![rrc(), flip(0.5)]),
            compose(vec![invert(0.5), compose(vec![posterize(2, 0.5)])]),
            compose(vec![OpSpec::ToTensor, normalize()]),
        ],
        Execution::Fused,
    );
    assert_eq!(nested.output_size(), (SIZE, SIZE));
    for (name, bytes) in corpus().iter().take(3) {
        for index in 0..3 {
            assert!(
                bits(&run_f32(&flat, bytes, index)) == bits(&run_f32(&nested, bytes, index)),
                "{name} #{index}"
            );
        }
    }
}

// ---------------------------------------------------------------- erasing

/// The reference of `[RandomResizedCrop, flip, ToTensor, (erasing,) Normalize, (erasing)]`:
/// the pipeline without erasing, then the draw and the kernel on the same generator.
fn erased_reference(
    value: &EraseFill,
    before_normalize: bool,
    staged: bool,
    bytes: &[u8],
    index: u64,
) -> (Vec<f32>, bool) {
    let tail = if before_normalize {
        vec![rrc(), flip(0.5), OpSpec::ToTensor]
    } else {
        vec![rrc(), flip(0.5), OpSpec::ToTensor, normalize()]
    };
    let (mut out, mut rng) = run_f32_rng(&plan_with(tail, Execution::OpByOp), bytes, index);
    if staged {
        // The coin of the staged pipelines' `RandomInvert(p=0)`, which changes no pixel.
        assert!(!draw_p_item(&mut rng, 0.0));
    }
    let fill = match value {
        EraseFill::Number(v) => EraseValue::Constant(*v as f32),
        EraseFill::Values(v) => EraseValue::PerChannel([v[0] as f32, v[1] as f32, v[2] as f32]),
        EraseFill::Word(_) => EraseValue::Random,
    };
    let policy = RandomErasing::new(0.5, (0.02, 0.33), (0.3, 3.3), fill).expect("erasing");
    let rect = policy.draw(SIZE, SIZE, &mut rng);
    if let Some(r) = rect {
        let crop = CropRect {
            top: r.top,
            left: r.left,
            height: r.height,
            width: r.width,
        };
        let n = SIZE as usize;
        match fill {
            EraseValue::Constant(v) => erase(&mut out, 3, n, n, crop, Fill::PerChannel(&[v])),
            EraseValue::PerChannel(v) => erase(&mut out, 3, n, n, crop, Fill::PerChannel(&v)),
            EraseValue::Random => {
                let mut normals = vec![0f32; 3 * (r.height * r.width) as usize];
                rng.fill_standard_normal(&mut normals);
                erase(&mut out, 3, n, n, crop, Fill::Source(&normals))
            }
        }
        .expect("erases");
    }
    if before_normalize {
        tensor::normalize(&mut out, &IMAGENET_MEAN, &IMAGENET_STD).expect("normalize");
    }
    (out, rect.is_some())
}

#[test]
fn random_erasing_equals_the_draw_and_kernel_before_or_after_normalize() {
    let corpus = corpus();
    for value in [
        EraseFill::Number(0.0),
        EraseFill::Values(vec![0.5, -1.0, 2.0]),
        EraseFill::Word("random".into()),
    ] {
        for before_normalize in [false, true] {
            let mut ops = vec![rrc(), flip(0.5), OpSpec::ToTensor, normalize()];
            let at = if before_normalize { 3 } else { 4 };
            ops.insert(at, erasing(0.5, value.clone()));
            // A pixel op in front runs the staged path; its p = 0 coin draws and changes
            // nothing.
            let mut staged_ops = ops.clone();
            staged_ops.insert(2, invert(0.0));
            let pipelines = [
                plan_with(ops.clone(), Execution::Fused),
                plan_with(staged_ops.clone(), Execution::Fused),
                plan_with(ops, Execution::OpByOp),
                plan_with(staged_ops, Execution::OpByOp),
            ];
            let mut erased = [0usize; 2];
            for (name, bytes) in &corpus {
                for index in 0..6 {
                    for (k, pipeline) in pipelines.iter().enumerate() {
                        let staged = k % 2 == 1;
                        let (want, did) =
                            erased_reference(&value, before_normalize, staged, bytes, index);
                        erased[usize::from(did)] += 1;
                        let got = run_f32(pipeline, bytes, index);
                        assert!(
                            bits(&got) == bits(&want),
                            "{value:?} before normalize {before_normalize}, pipeline {k}, \
                             {name} #{index}"
                        );
                    }
                }
            }
            assert!(erased.iter().all(|&n| n > 0), "{value:?}: {erased:?}");
        }
    }
}

#[test]
fn erasing_at_p_zero_leaves_the_fused_sample_and_two_erasings_draw_in_order() {
    let corpus = corpus();
    let plain = plan_with(train_with(vec![]), Execution::Fused);
    let mut ops = train_with(vec![]);
    ops.push(erasing(0.0, EraseFill::Number(0.0)));
    let never = plan_with(ops, Execution::Fused);
    let mut twice = vec![rrc(), flip(0.5), OpSpec::ToTensor];
    twice.push(erasing(1.0, EraseFill::Number(1.0)));
    twice.push(normalize());
    twice.push(erasing(1.0, EraseFill::Word("random".into())));
    let fused = plan_with(twice.clone(), Execution::Fused);
    let op_by_op = plan_with(twice, Execution::OpByOp);
    for (name, bytes) in corpus.iter().take(3) {
        for index in 0..3 {
            assert!(
                bits(&run_f32(&never, bytes, index)) == bits(&run_f32(&plain, bytes, index)),
                "{name} #{index}"
            );
            let got = run_f32(&fused, bytes, index);
            assert!(
                bits(&got) == bits(&run_f32(&op_by_op, bytes, index)),
                "{name} #{index}"
            );
            assert!(bits(&got) != bits(&run_f32(&plain, bytes, index)));
        }
    }
}

// ---------------------------------------------------------------- spans, allocation

fn spans(pipeline: &Pipeline, bytes: &[u8]) -> Vec<(bool, Op)> {
    stage_pipeline::spans(pipeline, bytes, SEED)
}

#[test]
fn compositions_and_erasing_have_their_spans() {
    let (_, bytes) = corpus().into_iter().next().expect("corpus");
    let mut ops = train_with(vec![
        apply(vec![invert(1.0), choice(vec![equalize(1.0)], None)], 1.0),
        order(vec![posterize(4, 1.0)]),
    ]);
    ops.push(erasing(1.0, EraseFill::Number(0.0)));
    let got = spans(&plan_with(ops.clone(), Execution::Fused), &bytes);
    let head = [
        (true, Op::Decode),
        (true, Op::CropParams),
        (false, Op::CropParams),
        (false, Op::Decode),
        (true, Op::Resize),
        (false, Op::Resize),
    ];
    let mut want = head.to_vec();
    want.extend([
        (true, Op::RandomApply),
        (true, Op::RandomInvert),
        (false, Op::RandomInvert),
        (true, Op::RandomChoice),
        (true, Op::RandomEqualize),
        (false, Op::RandomEqualize),
        (false, Op::RandomChoice),
        (false, Op::RandomApply),
        (true, Op::RandomOrder),
        (true, Op::RandomPosterize),
        (false, Op::RandomPosterize),
        (false, Op::RandomOrder),
        (true, Op::ToTensor),
        (false, Op::ToTensor),
        (true, Op::RandomErasing),
        (false, Op::RandomErasing),
    ]);
    assert_eq!(got, want);

    // Erasing alone keeps the single fused pass, then its own span.
    let mut ops = train_with(vec![]);
    ops.push(erasing(0.5, EraseFill::Number(0.0)));
    let got = spans(&plan_with(ops, Execution::Fused), &bytes);
    let mut want = head[..4].to_vec();
    want.extend([
        (true, Op::Fused),
        (false, Op::Fused),
        (true, Op::RandomErasing),
        (false, Op::RandomErasing),
    ]);
    assert_eq!(got, want);

    // Op by op, an erasing before Normalize runs there.
    let ops = vec![
        rrc(),
        OpSpec::ToTensor,
        erasing(0.5, EraseFill::Number(0.0)),
        normalize(),
    ];
    let got = spans(&plan_with(ops, Execution::OpByOp), &bytes);
    let tail = &got[got.len() - 6..];
    assert_eq!(
        tail,
        [
            (true, Op::ToTensor),
            (false, Op::ToTensor),
            (true, Op::RandomErasing),
            (false, Op::RandomErasing),
            (true, Op::Normalize),
            (false, Op::Normalize),
        ]
    );
}

#[test]
fn compositions_and_erasing_allocate_nothing_once_warm() {
    let corpus = corpus();
    let mut ops = train_with(vec![
        apply(vec![invert(0.5), flip(0.5)], 0.5),
        choice(vec![equalize(1.0), compose(vec![solarize(0.5)])], None),
        order(vec![posterize(3, 0.5), invert(0.5), flip(0.5)]),
    ]);
    ops.push(erasing(1.0, EraseFill::Word("random".into())));
    ops.push(erasing(0.5, EraseFill::Values(vec![1.0, 2.0, 3.0])));
    for execution in [Execution::Fused, Execution::OpByOp] {
        let pipeline = plan_with(ops.clone(), execution);
        assert_eq!(
            steady_state_allocations(&pipeline, &corpus, SEED, allocations),
            0,
            "{execution:?}: steady state allocated"
        );
    }
}

// ---------------------------------------------------------------- refusals, names

#[test]
fn invalid_compositions_and_erasings_are_refused_naming_op_and_argument() {
    let middle_cases: Vec<(OpSpec, &str, &str)> = vec![
        (apply(vec![invert(0.5)], 1.5), "RandomApply", "`p`"),
        (
            apply(vec![OpSpec::ToTensor], 0.5),
            "transforms[0] is ToTensor",
            "`transforms`",
        ),
        (
            apply(vec![invert(2.0)], 0.5),
            "RandomApply: RandomInvert",
            "`p`",
        ),
        (choice(vec![], None), "RandomChoice", "`transforms`"),
        (
            choice(vec![invert(0.5)], Some(vec![0.5, 0.5])),
            "RandomChoice",
            "`p`",
        ),
        (
            choice(vec![invert(0.5), equalize(0.5)], Some(vec![0.0, 0.0])),
            "RandomChoice",
            "`p`",
        ),
        (
            choice(vec![compose(vec![OpSpec::ToTensor])], None),
            "transforms[0] is ToTensor",
            "`transforms`",
        ),
        (order(vec![invert(0.5); 17]), "RandomOrder", "`transforms`"),
    ];
    for (op, text, arg) in middle_cases {
        let msg = plan_error(PipelineSpec::new(train_with(vec![op.clone()])));
        assert!(msg.contains(text) && msg.contains(arg), "{op:?}: {msg}");
    }
    let erase_with = |op: OpSpec| {
        let mut ops = train_with(vec![]);
        ops.push(op);
        PipelineSpec::new(ops)
    };
    let bad_erasings: Vec<(OpSpec, &str)> = vec![
        (erasing(1.5, EraseFill::Number(0.0)), "`p`"),
        (
            OpSpec::RandomErasing {
                p: 0.5,
                scale: [0.5, 0.1],
                ratio: [0.3, 3.3],
                value: EraseFill::Number(0.0),
                inplace: false,
            },
            "`scale`",
        ),
        (
            OpSpec::RandomErasing {
                p: 0.5,
                scale: [0.02, 0.33],
                ratio: [0.0, 3.3],
                value: EraseFill::Number(0.0),
                inplace: false,
            },
            "`ratio`",
        ),
        (erasing(0.5, EraseFill::Word("noise".into())), "`value`"),
        (erasing(0.5, EraseFill::Values(vec![1.0, 2.0])), "`value`"),
    ];
    for (op, arg) in bad_erasings {
        let msg = plan_error(erase_with(op.clone()));
        assert!(
            msg.contains("RandomErasing") && msg.contains(arg),
            "{op:?}: {msg}"
        );
    }
    // uint8 output holds pixels; PILToTensor gives no float tensor; before the conversion
    // erasing is out of place.
    let msg =
        plan_error(erase_with(erasing(0.5, EraseFill::Number(0.0))).output(OutputDtype::Uint8));
    assert!(msg.contains("`output`") && msg.contains("uint8"), "{msg}");
    let msg = plan_error(
        PipelineSpec::new(vec![
            rrc(),
            OpSpec::PilToTensor,
            erasing(0.5, EraseFill::Number(0.0)),
        ])
        .output(OutputDtype::Uint8),
    );
    assert!(msg.contains("ToTensor"), "{msg}");
    let msg = plan_error(PipelineSpec::new(vec![
        rrc(),
        erasing(0.5, EraseFill::Number(0.0)),
        OpSpec::ToTensor,
    ]));
    assert!(msg.contains("ToTensor") && msg.contains("`ops`"), "{msg}");
    let msg = plan_error(PipelineSpec::new(vec![
        rrc(),
        OpSpec::ToTensor,
        normalize(),
        invert(0.5),
    ]));
    assert!(
        msg.contains("RandomErasing") && msg.contains("`ops`"),
        "{msg}"
    );
}

#[test]
fn specs_parse_with_torchvision_names_and_defaults() {
    let json = r#"{"ops": [
        {"op": "Compose", "transforms": [{"op": "RandomResizedCrop", "size": 40}]},
        {"op": "RandomApply", "transforms": [{"op": "RandomInvert"}]},
        {"op": "RandomChoice", "transforms": [
            {"op": "RandomEqualize"},
            {"op": "Compose", "transforms": [{"op": "RandomInvert", "p": 1.0}]}
        ]},
        {"op": "RandomChoice", "transforms": [{"op": "RandomEqualize"}], "p": [2.0]},
        {"op": "RandomOrder", "transforms": [{"op": "RandomInvert"}, {"op": "RandomEqualize"}]},
        {"op": "ToTensor"},
        {"op": "Normalize", "mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5]},
        {"op": "RandomErasing"},
        {"op": "RandomErasing", "value": "random", "inplace": true},
        {"op": "RandomErasing", "value": [1, 2, 3], "p": 1, "scale": [0.1, 0.2]}
    ]}"#;
    let spec: PipelineSpec = serde_json::from_str(json).expect("parses");
    assert_eq!(
        spec.ops[1],
        apply(vec![invert(0.5)], 0.5),
        "RandomApply's p defaults to 0.5"
    );
    assert_eq!(spec.ops[3], choice(vec![equalize(0.5)], Some(vec![2.0])));
    assert_eq!(spec.ops[7], erasing(0.5, EraseFill::Number(0.0)));
    assert_eq!(
        spec.ops[8],
        OpSpec::RandomErasing {
            p: 0.5,
            scale: [0.02, 0.33],
            ratio: [0.3, 3.3],
            value: EraseFill::Word("random".into()),
            inplace: true,
        }
    );
    assert_eq!(
        spec.ops[9],
        OpSpec::RandomErasing {
            p: 1.0,
            scale: [0.1, 0.2],
            ratio: [0.3, 3.3],
            value: EraseFill::Values(vec![1.0, 2.0, 3.0]),
            inplace: false,
        }
    );
    let pipeline = Pipeline::new(spec.clone()).expect("plans");
    assert_eq!(pipeline.output_size(), (SIZE, SIZE));
    let back: PipelineSpec =
        serde_json::from_str(&serde_json::to_string(&spec).expect("serializes")).expect("parses");
    assert_eq!(back, spec);
    for bad in [
        r#"{"op": "RandomApply"}"#,
        r#"{"op": "RandomOrder", "transforms": [], "p": 0.5}"#,
        r#"{"op": "RandomErasing", "value": {"x": 1}}"#,
    ] {
        assert!(serde_json::from_str::<OpSpec>(bad).is_err(), "{bad} parsed");
    }
}
