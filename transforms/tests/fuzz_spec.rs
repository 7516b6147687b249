//! Property-based fuzzing of the pipeline-spec front end: arbitrary JSON values and
//! structured-random specs (torchvision ops in any order, with zero, negative, huge, NaN and
//! infinite parameters, empty and odd-length lists) through `serde_json::from_str::<PipelineSpec>`
//! and `Pipeline::new`, and every accepted spec run on a small real JPEG.
//!
//! The promises are those of `tests/support/fuzz_props.rs` (shared with the cargo-fuzz target
//! `spec`): `Ok` or an error with a message at every step, no panic, no allocation beyond the
//! bound, and an accepted spec's output no larger than its own pixel limit. The default case
//! counts keep this file to a few seconds; `PROPTEST_CASES` raises them.

use std::sync::OnceLock;

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestCaseError;
use serde_json::{json, Value};

#[path = "../../tests/support/fixtures.rs"]
mod fixtures;
#[path = "../../tests/support/fuzz_props.rs"]
mod fuzz_props;

#[global_allocator]
static ALLOC: fuzz_props::Tracking = fuzz_props::Tracking;

/// Cases per property unless `PROPTEST_CASES` says otherwise.
fn config(default_cases: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default_cases);
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// The image accepted specs run on: small, so a run costs little, and odd-sized, so crops and
/// resizes meet rounding; with an EXIF Orientation of 6, so a spec with `exif_transpose` runs
/// on the 31x33 transposed image (and region decodes map their crops back).
fn image() -> &'static [u8] {
    static IMAGE: OnceLock<Vec<u8>> = OnceLock::new();
    IMAGE.get_or_init(|| {
        fuzz_props::install_panic_hook(false);
        let jpeg = fixtures::read_fixture("decode", "jpeg_tiny_33x31_422.jpg");
        // Exif\0\0, a big-endian TIFF header, IFD0 with Orientation (SHORT) 6.
        let mut exif = b"Exif\0\0MM\0*\0\0\0\x08\0\x01".to_vec();
        exif.extend_from_slice(&[0x01, 0x12, 0, 3, 0, 0, 0, 1, 0, 6, 0, 0, 0, 0, 0, 0]);
        let mut data = jpeg[..2].to_vec();
        data.extend_from_slice(&[0xFF, 0xE1]);
        data.extend_from_slice(&(exif.len() as u16 + 2).to_be_bytes());
        data.extend_from_slice(&exif);
        data.extend_from_slice(&jpeg[2..]);
        data
    })
}

fn check(json: &str) -> Result<bool, TestCaseError> {
    fuzz_props::check_spec_json(json, image()).map_err(TestCaseError::fail)
}

/// Any JSON value, nested a few levels.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        "[a-zA-Z_]{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::from),
            prop::collection::btree_map(key(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Field names the spec knows, and a few it does not.
fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(vec![
            "op", "ops", "size", "scale", "ratio", "interpolation", "antialias", "max_size", "p",
            "mean", "std", "decoder", "output", "layout", "roi_decode", "dct_scaling",
            "execution", "max_pixels", "exif_transpose",
        ])
        .prop_map(String::from),
        1 => "[a-z_]{0,10}",
    ]
}

/// A number as hostile as the spec may meet: zero, negative, huge, fractional, and (as JSON
/// cannot spell them, through the strings serde rejects) NaN and infinity.
fn number() -> impl Strategy<Value = Value> {
    prop_oneof![
        60 => (1u32..600).prop_map(Value::from),
        1 => Just(json!(100_000)),
        1 => Just(json!(0)),
        1 => Just(json!(-1)),
        1 => Just(json!(u32::MAX)),
        1 => Just(json!(u64::MAX)),
        1 => Just(json!(i64::MIN)),
        1 => Just(json!(65536)),
        1 => Just(json!(1e300)),
        1 => Just(json!(-0.0)),
        1 => Just(json!(0.5)),
        1 => Just(json!(1.0000001)),
        1 => Just(json!("NaN")),
        1 => Just(Value::Null),
        1 => any::<f64>().prop_map(Value::from),
    ]
}

/// A size as torchvision takes it, or not: an int, a pair, or a list of another length.
/// A padding mode: torchvision's four, and one it refuses.
fn padding_mode() -> impl Strategy<Value = Value> {
    prop::sample::select(vec!["constant", "edge", "reflect", "symmetric", "wrap"])
        .prop_map(Value::from)
}

fn size() -> impl Strategy<Value = Value> {
    prop_oneof![
        5 => number(),
        5 => [number(), number()].prop_map(|[h, w]| json!([h, w])),
        1 => prop::collection::vec(number(), 0..4).prop_map(Value::from),
    ]
}

fn pair() -> impl Strategy<Value = Value> {
    prop_oneof![
        1 => [number(), number()].prop_map(|[a, b]| json!([a, b])),
        1 => (-0.5f64..3.0, -0.5f64..3.0).prop_map(|(a, b)| json!([a, b])),
        3 => (0.01f64..1.0, 1.0f64..2.0).prop_map(|(a, b)| json!([a, b])),
        1 => prop::collection::vec(number(), 0..4).prop_map(Value::from),
    ]
}

fn triple() -> impl Strategy<Value = Value> {
    prop_oneof![
        3 => [number(), number(), number()].prop_map(|t| json!(t)),
        6 => (0.0f64..1.0, 0.0f64..1.0, 0.0f64..1.0).prop_map(|(a, b, c)| json!([a, b, c])),
        1 => prop::collection::vec(number(), 0..5).prop_map(Value::from),
    ]
}

/// A field's value, or `None` to leave it out.
type Field = BoxedStrategy<Option<Value>>;

/// Present with probability `p`.
fn maybe(p: f64, value: impl Strategy<Value = Value> + 'static) -> Field {
    prop::option::weighted(p, value).boxed()
}

/// The object `{"op": op, ...fields}`.
fn object(op: &'static str, fields: Vec<(&'static str, Field)>) -> BoxedStrategy<Value> {
    let (names, values): (Vec<_>, Vec<_>) = fields.into_iter().unzip();
    values
        .prop_map(move |values| {
            let mut map = serde_json::Map::new();
            map.insert("op".into(), json!(op));
            for (name, value) in names.iter().zip(values) {
                if let Some(value) = value {
                    map.insert((*name).into(), value);
                }
            }
            Value::Object(map)
        })
        .boxed()
}

/// A warp's interpolation: Pillow's three transform filters, or a name the warps refuse.
fn warp_interpolation() -> impl Strategy<Value = Value> {
    prop_oneof![
        3 => Just(json!("nearest")),
        3 => Just(json!("bilinear")),
        3 => Just(json!("bicubic")),
        1 => Just(json!("lanczos")),
        1 => number(),
    ]
}

/// The augmentation policies' shared fields: the warps' interpolation and fill, and the API.
fn policy_fields() -> Vec<(&'static str, Field)> {
    vec![
        ("interpolation", maybe(0.6, warp_interpolation())),
        ("fill", maybe(0.3, prop_oneof![number(), triple()])),
        (
            "api",
            maybe(
                0.5,
                prop_oneof![Just(json!("v1")), Just(json!("v2")), Just(json!("v3"))],
            ),
        ),
    ]
}

/// One of timm's `AugmentOp`s for `TimmRandAugment`: a name timm has (or none of its), and hostile magnitudes, noise, bounds, fills and filters.
fn timm_augment_op() -> BoxedStrategy<Value> {
    let name = prop_oneof![
        20 => prop::sample::select(vec![
            "AutoContrast",
            "Equalize",
            "Invert",
            "Rotate",
            "Posterize",
            "PosterizeIncreasing",
            "PosterizeOriginal",
            "Solarize",
            "SolarizeIncreasing",
            "SolarizeAdd",
            "ColorIncreasing",
            "ContrastIncreasing",
            "Brightness",
            "SharpnessIncreasing",
            "ShearX",
            "ShearY",
            "TranslateX",
            "TranslateY",
            "TranslateXRel",
            "TranslateYRel",
            "Desaturate",
            "GaussianBlur",
            "GaussianBlurRand",
        ]),
        1 => Just("Cutout"),
    ]
    .prop_map(Value::from);
    let filter =
        || prop::sample::select(vec!["nearest", "bilinear", "bicubic"]).prop_map(Value::from);
    let interpolation = prop_oneof![
        6 => filter(),
        3 => prop::collection::vec(filter(), 1..4).prop_map(Value::from),
        1 => warp_interpolation(),
        1 => prop::collection::vec(warp_interpolation(), 0..5).prop_map(Value::from),
    ];
    let sane = |lo: f64, hi: f64| prop_oneof![9 => (lo..=hi).prop_map(Value::from), 1 => number()];
    let fields: Vec<(&'static str, Field)> = vec![
        ("prob", maybe(0.5, sane(0.0, 1.0))),
        ("magnitude", maybe(0.8, sane(0.0, 12.0))),
        (
            "magnitude_std",
            maybe(
                0.6,
                prop_oneof![
                    4 => (0.0f64..2.0).prop_map(Value::from),
                    2 => Just(json!("inf")),
                    1 => Just(json!("-inf")),
                    1 => number(),
                ],
            ),
        ),
        ("magnitude_max", maybe(0.2, sane(0.0, 30.0))),
        ("translate_pct", maybe(0.2, sane(-1.0, 1.0))),
        ("translate_const", maybe(0.2, sane(-300.0, 300.0))),
        (
            "fill",
            maybe(0.3, prop_oneof![3 => triple(), 1 => number()]),
        ),
        ("interpolation", maybe(0.6, interpolation)),
    ];
    let (names, values): (Vec<_>, Vec<_>) = fields.into_iter().unzip();
    (name, values)
        .prop_map(move |(name, values)| {
            let mut map = serde_json::Map::new();
            map.insert("name".into(), name);
            for (field, value) in names.iter().zip(values) {
                if let Some(value) = value {
                    map.insert((*field).into(), value);
                }
            }
            Value::Object(map)
        })
        .boxed()
}

/// The op named `name` with its fields drawn (each present or not); unknown names have none.
fn op_of(name: &'static str) -> BoxedStrategy<Value> {
    let flag = || maybe(0.5, prop::bool::weighted(0.9).prop_map(Value::from));
    match name {
        "RandomResizedCrop" => object(
            name,
            vec![
                ("size", maybe(0.95, size())),
                ("scale", maybe(0.7, pair())),
                ("ratio", maybe(0.7, pair())),
                (
                    "interpolation",
                    maybe(
                        0.3,
                        prop_oneof![
                            6 => Just(json!("bilinear")),
                            1 => Just(json!("nearest")),
                            1 => Just(json!("bicubic")),
                            1 => Just(json!("lanczos")),
                            1 => Just(json!("nearest-exact")),
                        ],
                    ),
                ),
                ("antialias", flag()),
            ],
        ),
        "RandomResizedCropAndInterpolation" => {
            let filter = || {
                prop_oneof![
                    6 => prop::sample::select(vec![
                        "nearest", "bilinear", "bicubic", "box", "hamming", "lanczos",
                    ])
                    .prop_map(Value::from),
                    1 => Just(json!("random")),
                    1 => Just(json!("nearest-exact")),
                    1 => number(),
                ]
            };
            object(
                name,
                vec![
                    ("size", maybe(0.95, size())),
                    ("scale", maybe(0.7, pair())),
                    ("ratio", maybe(0.7, pair())),
                    (
                        "interpolation",
                        maybe(
                            0.8,
                            prop_oneof![
                                3 => Just(json!("random")),
                                3 => filter(),
                                3 => prop::collection::vec(filter(), 0..10).prop_map(Value::from),
                            ],
                        ),
                    ),
                ],
            )
        }
        "ResizeKeepRatio" => {
            let filter = || {
                prop_oneof![
                    6 => prop::sample::select(vec![
                        "nearest", "bilinear", "bicubic", "box", "hamming", "lanczos",
                    ])
                    .prop_map(Value::from),
                    1 => Just(json!("random")),
                    1 => Just(json!("nearest-exact")),
                    1 => number(),
                ]
            };
            // Mostly probabilities (so that specs are accepted), sometimes hostile numbers.
            let unit = || prop_oneof![4 => (0.0f64..=1.0).prop_map(Value::from), 1 => number()];
            object(
                name,
                vec![
                    ("size", maybe(0.95, size())),
                    ("longest", maybe(0.5, unit())),
                    (
                        "interpolation",
                        maybe(
                            0.7,
                            prop_oneof![
                                3 => Just(json!("random")),
                                3 => filter(),
                                2 => prop::collection::vec(filter(), 0..10).prop_map(Value::from),
                            ],
                        ),
                    ),
                    ("random_scale_prob", maybe(0.6, unit())),
                    ("random_scale_range", maybe(0.6, pair())),
                    ("random_scale_area", flag()),
                    ("random_aspect_prob", maybe(0.6, unit())),
                    ("random_aspect_range", maybe(0.6, pair())),
                ],
            )
        }
        "CenterCropOrPad" | "RandomCropOrPad" => object(
            name,
            vec![
                ("size", maybe(0.95, size())),
                ("fill", maybe(0.3, prop_oneof![number(), triple()])),
                ("padding_mode", maybe(0.6, padding_mode())),
            ],
        ),
        "Resize" => object(
            name,
            vec![
                ("size", maybe(0.95, size())),
                ("max_size", maybe(0.2, number())),
                ("antialias", flag()),
            ],
        ),
        "CenterCrop" => object(name, vec![("size", maybe(0.95, size()))]),
        "RandomHorizontalFlip" => object(
            name,
            vec![(
                "p",
                maybe(
                    0.8,
                    prop_oneof![number(), (-0.5f64..1.5).prop_map(Value::from)],
                ),
            )],
        ),
        "Normalize" => object(
            name,
            vec![
                ("mean", maybe(0.95, triple())),
                ("std", maybe(0.95, triple())),
            ],
        ),
        "RandomVerticalFlip" => object(
            name,
            vec![(
                "p",
                maybe(
                    0.8,
                    prop_oneof![number(), (-0.5f64..1.5).prop_map(Value::from)],
                ),
            )],
        ),
        "RandomRotation" => object(
            name,
            vec![
                ("degrees", maybe(0.95, prop_oneof![number(), pair()])),
                ("interpolation", maybe(0.5, warp_interpolation())),
                ("expand", flag()),
                ("center", maybe(0.3, pair())),
                ("fill", maybe(0.4, prop_oneof![number(), triple()])),
            ],
        ),
        "RandomAffine" => object(
            name,
            vec![
                ("degrees", maybe(0.95, prop_oneof![number(), pair()])),
                ("translate", maybe(0.5, pair())),
                ("scale", maybe(0.5, pair())),
                ("shear", maybe(0.5, prop_oneof![number(), pair(), triple()])),
                ("interpolation", maybe(0.5, warp_interpolation())),
                ("fill", maybe(0.4, prop_oneof![number(), triple()])),
                ("center", maybe(0.3, pair())),
            ],
        ),
        "RandomPerspective" => object(
            name,
            vec![
                (
                    "distortion_scale",
                    maybe(
                        0.8,
                        prop_oneof![
                            3 => (0.0f64..=1.0).prop_map(Value::from),
                            1 => number(),
                        ],
                    ),
                ),
                (
                    "p",
                    maybe(
                        0.8,
                        prop_oneof![
                            3 => (0.0f64..=1.0).prop_map(Value::from),
                            1 => number(),
                        ],
                    ),
                ),
                ("interpolation", maybe(0.5, warp_interpolation())),
                ("fill", maybe(0.4, prop_oneof![number(), triple()])),
            ],
        ),
        "GaussianBlur" => object(
            name,
            vec![
                ("kernel_size", maybe(0.95, size())),
                ("sigma", maybe(0.7, prop_oneof![number(), pair()])),
            ],
        ),
        "Pad" => object(
            name,
            vec![
                (
                    "padding",
                    maybe(0.95, prop_oneof![number(), size(), triple()]),
                ),
                ("fill", maybe(0.4, prop_oneof![number(), triple()])),
                ("padding_mode", maybe(0.6, padding_mode())),
            ],
        ),
        "RandomCrop" => object(
            name,
            vec![
                ("size", maybe(0.95, size())),
                ("padding", maybe(0.5, prop_oneof![number(), size()])),
                ("pad_if_needed", flag()),
                ("fill", maybe(0.3, prop_oneof![number(), triple()])),
                (
                    "padding_mode",
                    maybe(
                        0.5,
                        prop::sample::select(vec!["constant", "edge", "reflect", "symmetric"])
                            .prop_map(Value::from),
                    ),
                ),
            ],
        ),
        "TrivialAugmentWide" => object(
            name,
            [("num_magnitude_bins", maybe(0.4, number()))]
                .into_iter()
                .chain(policy_fields())
                .collect(),
        ),
        "RandAugment" => object(
            name,
            [
                ("num_ops", maybe(0.4, number())),
                ("magnitude", maybe(0.4, number())),
                ("num_magnitude_bins", maybe(0.3, number())),
            ]
            .into_iter()
            .chain(policy_fields())
            .collect(),
        ),
        "AutoAugment" => object(
            name,
            [(
                "policy",
                maybe(
                    0.6,
                    prop::sample::select(vec!["imagenet", "cifar10", "svhn", "mnist"])
                        .prop_map(Value::from),
                ),
            )]
            .into_iter()
            .chain(policy_fields())
            .collect(),
        ),
        "ElasticTransform" => object(
            name,
            vec![
                ("alpha", maybe(0.6, pair())),
                (
                    "sigma",
                    maybe(
                        0.6,
                        prop_oneof![
                            3 => (0.0f64..3.0).prop_map(|s| json!([s, s])),
                            1 => pair(),
                            1 => Just(json!([1e9, 1e9])),
                        ],
                    ),
                ),
                ("interpolation", maybe(0.6, warp_interpolation())),
                (
                    "fill",
                    maybe(0.3, prop_oneof![number(), triple(), Just(Value::Null)]),
                ),
                (
                    "api",
                    maybe(
                        0.5,
                        prop_oneof![Just(json!("v1")), Just(json!("v2")), Just(json!("v3"))],
                    ),
                ),
            ],
        ),
        "AugMix" => object(
            name,
            [
                ("severity", maybe(0.4, number())),
                ("mixture_width", maybe(0.4, number())),
                ("chain_depth", maybe(0.4, number())),
                ("alpha", maybe(0.3, number())),
                ("all_ops", flag()),
            ]
            .into_iter()
            .chain(policy_fields())
            .collect(),
        ),
        "ToImage" => object(
            name,
            vec![(
                "api",
                maybe(
                    0.6,
                    prop_oneof![
                        4 => Just(json!("v1")),
                        4 => Just(json!("v2")),
                        1 => Just(json!("v3")),
                    ],
                ),
            )],
        ),
        "ColorJitter" => {
            let arg = || {
                maybe(
                    0.5,
                    prop_oneof![
                        number(),
                        (0.0f64..0.6).prop_map(Value::from),
                        pair(),
                        (-0.6f64..0.6, 0.0f64..0.6).prop_map(|(a, b)| json!([a, a + b])),
                    ],
                )
            };
            object(
                name,
                vec![
                    ("brightness", arg()),
                    ("contrast", arg()),
                    ("saturation", arg()),
                    ("hue", arg()),
                ],
            )
        }
        "RandomSolarize" => object(
            name,
            vec![
                (
                    "threshold",
                    maybe(
                        0.95,
                        prop_oneof![number(), (-10.0f64..300.0).prop_map(Value::from)],
                    ),
                ),
                ("p", maybe(0.5, (-0.5f64..1.5).prop_map(Value::from))),
            ],
        ),
        // Mostly valid qualities (so the round trip runs), and hostile ones: out of 1..=100,
        // reversed ranges, floats, wrong lengths.
        "JPEG" => object(
            name,
            vec![(
                "quality",
                maybe(
                    0.95,
                    prop_oneof![
                        3 => (1i64..=100).prop_map(Value::from),
                        4 => (1i64..=100, 1i64..=100).prop_map(|(a, b)| json!([a.min(b), a.max(b)])),
                        1 => (-5i64..110, -5i64..110).prop_map(|(a, b)| json!([a, b])),
                        1 => number(),
                        1 => pair(),
                    ],
                ),
            )],
        ),
        "RandomAdjustSharpness" => object(
            name,
            vec![
                (
                    "sharpness_factor",
                    maybe(
                        0.95,
                        prop_oneof![number(), (-1.0f64..4.0).prop_map(Value::from)],
                    ),
                ),
                ("p", maybe(0.5, (-0.5f64..1.5).prop_map(Value::from))),
            ],
        ),
        "TimmRandAugment" => object(
            name,
            vec![
                (
                    "ops",
                    maybe(
                        0.95,
                        prop_oneof![
                            9 => prop::collection::vec(timm_augment_op(), 1..4),
                            1 => prop::collection::vec(timm_augment_op(), 0..8),
                        ]
                        .prop_map(Value::from),
                    ),
                ),
                (
                    "num_layers",
                    maybe(
                        0.6,
                        prop_oneof![9 => (0i64..3).prop_map(Value::from), 1 => number()],
                    ),
                ),
                (
                    "choice_weights",
                    maybe(
                        0.15,
                        prop::collection::vec(
                            prop_oneof![(0.0f64..1.0).prop_map(Value::from), number()],
                            0..6,
                        )
                        .prop_map(Value::from),
                    ),
                ),
            ],
        ),
        "TimmAutoAugment" => object(
            name,
            vec![(
                "policy",
                maybe(
                    0.95,
                    prop_oneof![
                        9 => prop::collection::vec(
                            prop::collection::vec(timm_augment_op(), 0..3).prop_map(Value::from),
                            1..4,
                        ),
                        1 => prop::collection::vec(
                            prop::collection::vec(timm_augment_op(), 0..20).prop_map(Value::from),
                            0..3,
                        ),
                    ]
                    .prop_map(Value::from),
                ),
            )],
        ),
        "TimmAugMix" => object(
            name,
            vec![
                (
                    "ops",
                    maybe(
                        0.95,
                        prop_oneof![
                            9 => prop::collection::vec(timm_augment_op(), 1..4),
                            1 => prop::collection::vec(timm_augment_op(), 0..8),
                        ]
                        .prop_map(Value::from),
                    ),
                ),
                (
                    "alpha",
                    maybe(
                        0.5,
                        prop_oneof![(0.0f64..3.0).prop_map(Value::from), number()],
                    ),
                ),
                (
                    "width",
                    maybe(
                        0.5,
                        prop_oneof![9 => (0i64..6).prop_map(Value::from), 1 => number()],
                    ),
                ),
                (
                    "depth",
                    maybe(
                        0.5,
                        prop_oneof![9 => (-2i64..4).prop_map(Value::from), 1 => number()],
                    ),
                ),
                ("blended", maybe(0.5, any::<bool>().prop_map(Value::from))),
            ],
        ),
        "TimmRandomErasing" => {
            let fraction = || {
                maybe(
                    0.5,
                    prop_oneof![4 => (0.0f64..0.6).prop_map(Value::from), 1 => number()],
                )
            };
            object(
                name,
                vec![
                    (
                        "probability",
                        maybe(0.5, (-0.5f64..1.5).prop_map(Value::from)),
                    ),
                    ("min_area", fraction()),
                    ("max_area", fraction()),
                    (
                        "min_aspect",
                        maybe(
                            0.3,
                            prop_oneof![(0.0f64..4.0).prop_map(Value::from), number()],
                        ),
                    ),
                    (
                        "max_aspect",
                        maybe(
                            0.3,
                            prop_oneof![(0.0f64..4.0).prop_map(Value::from), number()],
                        ),
                    ),
                    (
                        "mode",
                        maybe(
                            0.8,
                            prop_oneof![
                                3 => prop::sample::select(vec!["const", "rand", "pixel"])
                                    .prop_map(Value::from),
                                1 => Just(json!("noise")),
                            ],
                        ),
                    ),
                    (
                        "min_count",
                        maybe(
                            0.4,
                            prop_oneof![4 => (0i64..4).prop_map(Value::from), 1 => number()],
                        ),
                    ),
                    (
                        "max_count",
                        maybe(
                            0.5,
                            prop_oneof![4 => (0i64..5).prop_map(Value::from), 1 => number()],
                        ),
                    ),
                ],
            )
        }
        "RandomPhotometricDistort" => object(
            name,
            vec![
                ("brightness", maybe(0.5, pair())),
                ("contrast", maybe(0.5, pair())),
                ("saturation", maybe(0.5, pair())),
                (
                    "hue",
                    maybe(
                        0.5,
                        prop_oneof![
                            pair(),
                            (-0.6f64..0.0, 0.0f64..0.6).prop_map(|(a, b)| json!([a, b])),
                        ],
                    ),
                ),
                (
                    "p",
                    maybe(
                        0.6,
                        prop_oneof![number(), (-0.5f64..1.5).prop_map(Value::from)],
                    ),
                ),
            ],
        ),
        "GaussianNoise" => object(
            name,
            vec![
                (
                    "mean",
                    maybe(
                        0.5,
                        prop_oneof![number(), (-0.5f64..0.5).prop_map(Value::from)],
                    ),
                ),
                (
                    "sigma",
                    maybe(
                        0.6,
                        prop_oneof![number(), (-0.1f64..1.0).prop_map(Value::from)],
                    ),
                ),
                ("clip", flag()),
            ],
        ),
        _ => Just(json!({ "op": name })).boxed(),
    }
}

/// Any op, or one torchvision has and the spec does not.
fn op() -> impl Strategy<Value = Value> {
    prop::sample::select(vec![
        "RandomResizedCrop",
        "RandomResizedCropAndInterpolation",
        "Resize",
        "CenterCrop",
        "RandomHorizontalFlip",
        "ToTensor",
        "ToDtype",
        "PILToTensor",
        "Normalize",
        "Grayscale",
        "RandomVerticalFlip",
        "RandomRotation",
        "RandomAffine",
        "RandomPerspective",
        "ElasticTransform",
        "GaussianBlur",
        "Pad",
        "RandomCrop",
        "ResizeKeepRatio",
        "CenterCropOrPad",
        "RandomCropOrPad",
        "TrivialAugmentWide",
        "RandAugment",
        "AutoAugment",
        "AugMix",
        "ToImage",
        "ColorJitter",
        "RandomSolarize",
        "RandomAdjustSharpness",
        "RandomGrayscale",
        "RandomAutocontrast",
        "RandomEqualize",
        "JPEG",
        "TimmRandAugment",
        "TimmAutoAugment",
        "TimmAugMix",
        "TimmRandomErasing",
        "RGB",
        "RandomChannelPermutation",
        "GaussianNoise",
        "RandomPhotometricDistort",
    ])
    .prop_flat_map(op_of)
}

/// One of the ops `names`, drawn like [`op`].
fn op_named(names: &'static [&'static str]) -> impl Strategy<Value = Value> {
    prop::sample::select(names).prop_flat_map(op_of)
}

/// Ops in torchvision's order (geometry, optional crop and flip, conversion, optional
/// normalization) with parameters drawn hostile, or any ops in any order.
fn ops() -> impl Strategy<Value = Vec<Value>> {
    // A `ToImage` first (torchvision's v2 recipes), or before the stage ops: those then plan
    // torch's tensor kernels.
    let ordered = (
        prop::option::weighted(0.1, op_named(&["ToImage"])),
        op_named(&[
            "RandomResizedCrop",
            "RandomResizedCropAndInterpolation",
            "Resize",
            "CenterCrop",
            "RandomCrop",
            "ResizeKeepRatio",
            "ResizeKeepRatio",
            "CenterCropOrPad",
            "RandomCropOrPad",
        ]),
        prop::option::weighted(
            0.4,
            op_named(&[
                "CenterCrop",
                "RandomCrop",
                "CenterCropOrPad",
                "RandomCropOrPad",
                "RandomResizedCrop",
                "RandomResizedCropAndInterpolation",
            ]),
        ),
        prop::option::weighted(0.5, op_named(&["RandomHorizontalFlip"])),
        prop::option::weighted(0.15, op_named(&["ToImage"])),
        prop::option::weighted(
            0.3,
            op_named(&[
                "ColorJitter",
                "RandomSolarize",
                "RandomAdjustSharpness",
                "RandomGrayscale",
                "RandomAutocontrast",
                "JPEG",
                "RGB",
                "RandomChannelPermutation",
                "RandomPhotometricDistort",
            ]),
        ),
        prop::option::weighted(
            0.4,
            op_named(&[
                "RandomVerticalFlip",
                "RandomRotation",
                "RandomAffine",
                "RandomPerspective",
                "ElasticTransform",
                "GaussianBlur",
                "Pad",
                "RandomCropOrPad",
                "TrivialAugmentWide",
                "RandAugment",
                "AutoAugment",
                "AugMix",
                "TimmRandAugment",
                "TimmAutoAugment",
                "TimmAugMix",
            ]),
        ),
        // A size fixed again after the stage op (`RandomRotation(expand=True)` needs one).
        prop::option::weighted(
            0.2,
            op_named(&["CenterCrop", "CenterCropOrPad", "RandomCropOrPad", "Resize"]),
        ),
        prop::option::weighted(0.9, op_named(&["ToTensor", "ToDtype", "PILToTensor"])),
        prop::option::weighted(0.5, op_named(&["Normalize"])),
        prop::option::weighted(0.25, op_named(&["TimmRandomErasing", "GaussianNoise"])),
    )
        .prop_map(|(m, a, b, c, t, k, g, f, d, e, r)| {
            [m, Some(a), b, c, t, k, g, f, d, e, r]
                .into_iter()
                .flatten()
                .collect()
        });
    prop_oneof![
        1 => prop::collection::vec(op(), 0..6),
        3 => ordered,
    ]
}

fn spec() -> impl Strategy<Value = Value> {
    let options = (
        prop_oneof![10 => Just(json!("turbo")), 10 => Just(json!("zune")), 1 => Just(json!("libjpeg"))],
        prop_oneof![Just(json!("float32")), Just(json!("uint8"))],
        prop_oneof![Just(json!("chw")), Just(json!("hwc"))],
        any::<bool>(),
        any::<bool>(),
        prop_oneof![Just(json!("fused")), Just(json!("op_by_op"))],
        prop_oneof![
            3 => Just(None),
            1 => Just(Some(json!(0))),
            1 => Just(Some(json!(1))),
            1 => Just(Some(json!(u64::MAX))),
            1 => (1u64..5_000_000).prop_map(|v| Some(json!(v))),
        ],
        prop::collection::vec(prop::bool::weighted(0.5), 8),
        prop_oneof![4 => any::<bool>().prop_map(|b| json!(b)), 1 => Just(json!(1))],
    );
    (ops(), options).prop_map(
        |(ops, (decoder, output, layout, roi, dct, execution, max_pixels, present, exif))| {
            let mut map = serde_json::Map::new();
            map.insert("ops".into(), Value::from(ops));
            let fields = [
                ("decoder", Some(decoder)),
                ("output", Some(output)),
                ("layout", Some(layout)),
                ("roi_decode", Some(json!(roi))),
                ("dct_scaling", Some(json!(dct))),
                ("execution", Some(execution)),
                ("max_pixels", max_pixels),
                ("exif_transpose", Some(exif)),
            ];
            for ((name, value), keep) in fields.into_iter().zip(present) {
                if let (Some(value), true) = (value, keep) {
                    map.insert(name.into(), value);
                }
            }
            Value::Object(map)
        },
    )
}

proptest! {
    #![proptest_config(config(4096))]

    /// Any JSON value, and any text, as a spec.
    #[test]
    fn arbitrary_json(value in json_value(), text in ".{0,64}") {
        check(&value.to_string())?;
        check(&text)?;
    }

    /// Structured specs: parsed, planned and, when accepted, run with every execution.
    #[test]
    fn structured_specs(spec in spec()) {
        check(&spec.to_string())?;
    }
}

/// The structured strategy reaches accepted specs (otherwise it tests only the refusals), and
/// among them warps with every filter, BICUBIC included.
#[test]
fn structured_specs_are_sometimes_accepted() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = spec();
    let accepted: Vec<Value> = (0..30000)
        .map(|_| strategy.new_tree(&mut runner).expect("a spec").current())
        .filter(|spec| check(&spec.to_string()).expect("the checks pass"))
        .collect();
    assert!(
        accepted.len() >= 150,
        "only {} of 30000 specs accepted",
        accepted.len()
    );
    let warps = ["RandomRotation", "RandomAffine", "RandomPerspective"];
    let policies = ["TrivialAugmentWide", "RandAugment", "AutoAugment"];
    let bicubic = |names: &[&str]| {
        accepted
            .iter()
            .flat_map(|spec| spec["ops"].as_array().into_iter().flatten())
            .filter(|op| names.iter().any(|n| op["op"] == *n) && op["interpolation"] == "bicubic")
            .count()
    };
    // An accepted BICUBIC warp is rare (about one spec in 10000: the warps' hostile arguments
    // and the ToImage slots refuse most), so more specs are drawn for it, and only those with
    // one are planned.
    let warped = bicubic(&warps)
        + (0..100_000)
            .map(|_| strategy.new_tree(&mut runner).expect("a spec").current())
            .filter(|spec| {
                spec["ops"].as_array().into_iter().flatten().any(|op| {
                    warps.iter().any(|n| op["op"] == *n) && op["interpolation"] == "bicubic"
                })
            })
            .find(|spec| check(&spec.to_string()).expect("the checks pass"))
            .map_or(0, |_| 1);
    let policy = bicubic(&policies);
    assert!(
        warped > 0 && policy > 0,
        "accepted bicubic warps: {warped}, policies: {policy}"
    );
    // The tensor domain is reached: a ToImage with a warp, a policy or a colour op after it.
    let tensor_ops = accepted
        .iter()
        .filter_map(|spec| spec["ops"].as_array())
        .filter(|ops| {
            ops.iter()
                .skip_while(|op| op["op"] != "ToImage")
                .skip(1)
                .any(|op| {
                    let name = op["op"].as_str().unwrap_or_default();
                    warps.contains(&name)
                        || policies.contains(&name)
                        || ["ColorJitter", "RandomSolarize", "RandomAdjustSharpness"]
                            .contains(&name)
                })
        })
        .count();
    assert!(tensor_ops > 0, "no accepted spec runs an op after ToImage");
    let timm = accepted
        .iter()
        .flat_map(|spec| spec["ops"].as_array().into_iter().flatten())
        .filter(|op| op["op"] == "TimmRandAugment")
        .count();
    assert!(timm > 0, "no TimmRandAugment accepted");
    for name in ["TimmAutoAugment", "TimmAugMix", "JPEG", "ElasticTransform"] {
        let n = accepted
            .iter()
            .flat_map(|spec| spec["ops"].as_array().into_iter().flatten())
            .filter(|op| op["op"] == name)
            .count();
        assert!(n > 0, "no {name} accepted");
    }
    let erasing = accepted
        .iter()
        .flat_map(|spec| spec["ops"].as_array().into_iter().flatten())
        .filter(|op| op["op"] == "TimmRandomErasing")
        .count();
    assert!(erasing > 0, "no TimmRandomErasing accepted");
    // timm's keep-ratio resize with its random factors, and the crop-or-pads first and later.
    let keep_ratio = accepted
        .iter()
        .filter_map(|spec| spec["ops"].as_array())
        .filter(|ops| {
            ops.first().is_some_and(|op| {
                op["op"] == "ResizeKeepRatio"
                    && op["random_scale_prob"].as_f64().is_some_and(|p| p > 0.0)
            })
        })
        .count();
    assert!(
        keep_ratio > 0,
        "no ResizeKeepRatio with a random scale accepted"
    );
    // An accepted expanding rotation is rare too (it needs a later op that fixes the size, and
    // no op between that refuses a size known per sample): drawn for as the BICUBIC warps are.
    let expands = |spec: &Value| {
        spec["ops"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|op| op["op"] == "RandomRotation" && op["expand"] == true)
    };
    let expand = accepted.iter().filter(|spec| expands(spec)).count()
        + (0..100_000)
            .map(|_| strategy.new_tree(&mut runner).expect("a spec").current())
            .filter(expands)
            .find(|spec| check(&spec.to_string()).expect("the checks pass"))
            .map_or(0, |_| 1);
    assert!(expand > 0, "no RandomRotation(expand=True) accepted");
    for name in ["CenterCropOrPad", "RandomCropOrPad"] {
        let (first, later) = accepted
            .iter()
            .filter_map(|spec| spec["ops"].as_array())
            .flat_map(|ops| ops.iter().enumerate())
            .filter(|(_, op)| op["op"] == name)
            .fold(
                (0, 0),
                |(f, l), (i, _)| if i == 0 { (f + 1, l) } else { (f, l + 1) },
            );
        assert!(
            first > 0 && later > 0,
            "{name} accepted {first} first, {later} later"
        );
    }
    // timm's crop with a choice of filters, first (its region decode) and after another op.
    let choices = |at: fn(usize) -> bool| {
        accepted
            .iter()
            .filter_map(|spec| spec["ops"].as_array())
            .flat_map(|ops| ops.iter().enumerate())
            .filter(|(i, op)| {
                at(*i)
                    && op["op"] == "RandomResizedCropAndInterpolation"
                    && (op["interpolation"] == "random"
                        || op["interpolation"].as_array().is_some_and(|l| l.len() > 1))
            })
            .count()
    };
    let (first, later) = (choices(|i| i == 0), choices(|i| i > 0));
    assert!(
        first > 0 && later > 0,
        "accepted RandomResizedCropAndInterpolation with a choice: {first} first, {later} later"
    );
}

// ---------------------------------------------------------------------------------------------
// Findings, each kept as a named regression test.

/// Found by `structured_specs`: `CenterCrop([4294967295, 1])` was accepted, an output no image
/// under the pixel limit can fill and whose batch slot `3 * h * w` can overflow; a limit of 0
/// was accepted and failed only at `new_context`.
#[test]
fn an_output_over_the_pixel_limit_is_refused_when_planned() {
    use ferroloader_transforms::spec::{OpSpec, Pipeline, PipelineSpec, Size};
    use ferroloader_transforms::Error;
    let spec = |size: [u32; 2], max_pixels: u64| {
        PipelineSpec::new(vec![
            OpSpec::CenterCrop {
                size: Size::Pair(size),
            },
            OpSpec::ToTensor,
        ])
        .max_pixels(max_pixels)
    };
    for (size, max_pixels) in [
        ([u32::MAX, 1], 178_956_970),
        ([u32::MAX, u32::MAX], u64::MAX),
        ([11, 10], 109),
    ] {
        match Pipeline::new(spec(size, max_pixels)) {
            Err(Error::InvalidArgument {
                name: "size",
                reason,
            }) => {
                let why = ["exceeds max_pixels", "cannot be addressed"];
                assert!(why.iter().any(|w| reason.contains(w)), "{reason}")
            }
            other => panic!("{size:?} under {max_pixels}: {other:?}"),
        }
    }
    assert!(matches!(
        Pipeline::new(spec([1, 1], 0)),
        Err(Error::InvalidArgument {
            name: "max_pixels",
            ..
        })
    ));
    let at_limit = Pipeline::new(spec([11, 10], 110)).expect("an output at the limit");
    assert_eq!(at_limit.sample_len(), 330);
    let json = r#"{"ops":[{"op":"CenterCrop","size":[4294967295,1]},{"op":"ToTensor"}]}"#;
    assert!(!fuzz_props::check_spec_json(json, image()).expect("the checks pass"));
}

/// Found by `structured_specs`: `Resize(65536)` then `CenterCrop(8)` planned a small output but
/// resized every image to an intermediate of its shorter side 65536 first (13.7 GB for a 33x31
/// image: the process aborted). The intermediate is now held to the pixel limit.
#[test]
fn a_resize_intermediate_over_the_pixel_limit_is_refused() {
    use ferroloader_transforms::fused::OutputSlot;
    use ferroloader_transforms::rng::sample_rng;
    use ferroloader_transforms::spec::{Execution, Pipeline, PipelineSpec};
    use ferroloader_transforms::Error;
    for execution in [Execution::Fused, Execution::OpByOp] {
        let json = r#"{"ops":[{"op":"Resize","size":65536},{"op":"CenterCrop","size":8},{"op":"ToTensor"}]}"#;
        let spec: PipelineSpec = serde_json::from_str(json).expect("a spec");
        let pipeline = Pipeline::new(spec.execution(execution)).expect("planned");
        let mut ctx = pipeline.new_context().expect("context");
        let mut out = vec![0f32; pipeline.sample_len()];
        let ran = pipeline.run(
            image(),
            &mut sample_rng(1, 0, 0),
            &mut ctx,
            OutputSlot::F32(&mut out),
            &mut (),
        );
        match ran {
            Err(Error::TooLarge {
                width: 69764,
                height: 65536,
                limit: 178_956_970,
                ..
            }) => {}
            other => panic!("{execution:?}: {other:?}"),
        }
        assert!(fuzz_props::check_spec_json(json, image()).expect("the checks pass"));
    }
}

/// Found by `structured_specs` once crops could stand in the stage: `CenterCrop([2^32 - 1, 1])`
/// then a stage `CenterCrop(1)`, accepted under `max_pixels = u64::MAX`, is refused under the
/// run's lower limit for its intermediate (geometry) size, though its output is 1x1. The
/// refusal is right (no image under that limit could be cropped so); the harness now takes
/// it as accepted and too large to run.
#[test]
fn an_intermediate_over_a_lower_limit_is_not_a_contradiction() {
    let json = r#"{"ops": [{"op": "CenterCrop", "size": [4294967295, 1]},
                           {"op": "CenterCrop", "size": 1}, {"op": "ToTensor"}],
                   "max_pixels": 18446744073709551615}"#;
    assert_eq!(check(json).ok(), Some(true));
}

/// Found by `structured_specs`: `Resize((1, 66))` then `RandomResizedCrop(1)`, op by op,
/// reported the crop it drew on the resized image as a crop of the source (`left: 32` in a
/// 33-pixel-wide image); the fused pass reports the whole source, and now so does op by op.
#[test]
fn a_crop_drawn_on_the_resized_image_is_not_reported_as_a_crop_of_the_source() {
    let json = r#"{"ops": [{"op": "Resize", "size": [1, 66]},
                           {"op": "RandomResizedCrop", "size": 1, "ratio": [0.01, 1.7678353463112195]}],
                   "output": "uint8", "execution": "op_by_op"}"#;
    assert_eq!(check(json).ok(), Some(true));
}
