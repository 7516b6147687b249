//! The resize with each filter torchvision has for PIL images (bilinear, bicubic, nearest, box,
//! hamming, lanczos), single thread, on the bench corpus (`make bench` generates it under
//! target/fixtures/bench): RandomResizedCrop's crop + resize to 224 and the eval recipe's
//! `Resize(232)` of the whole image, the resize alone (decoded beforehand), at the default kernel
//! level; and the whole train and eval pipelines per filter.
//!
//! Compare filters within one run (ratios), not absolute times across runs.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ferroloader::transforms::augment::policy::Api;
use ferroloader::transforms::crop::{resize_shorter_side, RandomResizedCrop};
use ferroloader::transforms::decode::{DecodeContext, DecodeOptions};
use ferroloader::transforms::fused::OutputSlot;
use ferroloader::transforms::resize::{Filter, Resizer, SimdLevel};
use ferroloader::transforms::rng::sample_rng;
use ferroloader::transforms::spec::{Interpolation, OpSpec, Pipeline, PipelineSpec};
use ferroloader::transforms::{CropRect, RgbImage};

#[path = "../tests/support/fixtures.rs"]
mod fixtures;

const FILTERS: [(&str, Filter, Interpolation); 6] = [
    ("bilinear", Filter::Bilinear, Interpolation::Bilinear),
    ("bicubic", Filter::Bicubic, Interpolation::Bicubic),
    ("nearest", Filter::Nearest, Interpolation::Nearest),
    ("box", Filter::Box, Interpolation::Box),
    ("hamming", Filter::Hamming, Interpolation::Hamming),
    ("lanczos", Filter::Lanczos, Interpolation::Lanczos),
];

fn bench_resize(c: &mut Criterion) {
    let files = fixtures::bench_corpus();
    let mut ctx = DecodeContext::new(DecodeOptions::default()).expect("ctx");
    let decoded: Vec<RgbImage> = files
        .iter()
        .map(|f| {
            let mut img = RgbImage::new();
            ctx.decode(f, &mut img).expect("corpus decodes");
            img
        })
        .collect();
    let rrc =
        RandomResizedCrop::new((224, 224), (0.08, 1.0), (3.0 / 4.0, 4.0 / 3.0)).expect("valid");
    let rects: Vec<CropRect> = decoded
        .iter()
        .enumerate()
        .map(|(i, img)| rrc.get_params(img.width(), img.height(), &mut sample_rng(0, 0, i as u64)))
        .collect();
    let mut g = c.benchmark_group("resize_filters");
    g.throughput(Throughput::Elements(decoded.len() as u64));
    for (name, filter, _) in FILTERS {
        let mut resizer = Resizer::new();
        resizer.set_filter(filter);
        let mut out = RgbImage::new();
        g.bench_function(format!("rrc_crop_to_224/{name}"), |b| {
            b.iter(|| {
                for (img, rect) in decoded.iter().zip(&rects) {
                    let view = img.crop_view(*rect).expect("crop fits");
                    resizer
                        .resize(black_box(view), 224, 224, &mut out)
                        .expect("resizes");
                }
            })
        });
        g.bench_function(format!("eval_resize_232/{name}"), |b| {
            b.iter(|| {
                for img in &decoded {
                    let (h, w) = resize_shorter_side(img.width(), img.height(), 232, None)
                        .expect("valid size");
                    resizer
                        .resize(black_box(img.view()), h, w, &mut out)
                        .expect("resizes");
                }
            })
        });
    }
    g.finish();
}

/// `RandomResizedCrop(224, interpolation)` + flip + to-tensor + normalize, and
/// `Resize(232, interpolation)` + `CenterCrop(224)` + the same, from JPEG bytes.
fn bench_pipelines(c: &mut Criterion) {
    let files = fixtures::bench_corpus();
    let mut g = c.benchmark_group("filter_pipelines");
    g.throughput(Throughput::Elements(files.len() as u64));
    for (name, _, interpolation) in FILTERS {
        let mut train = PipelineSpec::imagenet_train(224);
        let mut eval = PipelineSpec::imagenet_eval(232, 224);
        for spec in [&mut train, &mut eval] {
            match &mut spec.ops[0] {
                OpSpec::RandomResizedCrop {
                    interpolation: i, ..
                }
                | OpSpec::Resize {
                    interpolation: i, ..
                } => *i = interpolation,
                other => panic!("unexpected first op {other:?}"),
            }
        }
        for (kind, spec) in [("train", train), ("eval", eval)] {
            let pipeline = Pipeline::new(spec).expect("valid spec");
            let mut ctx = pipeline.new_context().expect("ctx");
            let mut slot = vec![0f32; pipeline.sample_len()];
            g.bench_function(format!("{kind}/{name}"), |b| {
                b.iter(|| {
                    for (i, f) in files.iter().enumerate() {
                        let mut rng = sample_rng(0, 0, i as u64);
                        pipeline
                            .run(
                                black_box(f),
                                &mut rng,
                                &mut ctx,
                                OutputSlot::F32(&mut slot),
                                &mut (),
                            )
                            .expect("runs");
                    }
                })
            });
        }
    }
    g.finish();
}

/// `Resize((224, 224))` (a crop's resize) and `Resize(232)` (to 309x232) of a 500x375
/// photo-like image after `ToImage`: torch's tensor resize (v1's float32, v2's uint8 kernel)
/// next to Pillow's (a PIL image), bilinear and bicubic.
fn bench_tensor_resize(c: &mut Criterion) {
    // A smooth gradient with noise, decoded from nothing: the resize's cost does not depend on
    // the values.
    let mut img = RgbImage::new();
    let data = img.reset(500, 375);
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for (i, v) in data.iter_mut().enumerate() {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let (x, y) = ((i / 3) % 500, (i / 3) / 500);
        *v = ((x + 2 * y) / 4 + (state >> 60) as usize) as u8;
    }
    let mut g = c.benchmark_group("tensor_resize");
    let mut out = RgbImage::new();
    for (name, filter) in [("bilinear", Filter::Bilinear), ("bicubic", Filter::Bicubic)] {
        // The default kernels (AVX-512 where present), and AVX2's (`_avx2`) for CPUs without.
        for (arith, api, level) in [
            ("pillow", None, SimdLevel::Avx512),
            ("torch_v1_f32", Some(Api::V1), SimdLevel::Avx512),
            ("torch_v2", Some(Api::V2), SimdLevel::Avx512),
            ("pillow_avx2", None, SimdLevel::Avx2),
            ("torch_v1_f32_avx2", Some(Api::V1), SimdLevel::Avx2),
        ] {
            let mut resizer = Resizer::new();
            resizer.set_filter(filter);
            resizer.set_tensor_api(api);
            resizer.set_simd_limit(level);
            g.bench_function(format!("500x375_to_224/{name}/{arith}"), |b| {
                b.iter(|| {
                    resizer
                        .resize(black_box(img.view()), 224, 224, &mut out)
                        .expect("resizes")
                })
            });
            g.bench_function(format!("500x375_resize232/{name}/{arith}"), |b| {
                b.iter(|| {
                    resizer
                        .resize(black_box(img.view()), 232, 309, &mut out)
                        .expect("resizes")
                })
            });
        }
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).warm_up_time(std::time::Duration::from_secs(1)).measurement_time(std::time::Duration::from_secs(4));
    targets = bench_resize, bench_pipelines, bench_tensor_resize
}
criterion_main!(benches);
