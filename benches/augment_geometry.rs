//! Benches of the geometric augmentation kernels on one 224x224 image generated here (no
//! corpus needed), single thread: the affine engines Pillow picks between (NEAREST scale, fixed
//! point, BILINEAR, BICUBIC), Pillow's rotate fast path, RandomPerspective (its solve and
//! Pillow's perspective transform, NEAREST, BILINEAR and BICUBIC), vflip, pad and RandomCrop's padding, Gaussian
//! blur at several kernel sizes, and erasing on a normalized CHW slot; the BICUBIC warps also at
//! each vector level this CPU runs (`.../bicubic/avx2`: four pixels a step, `.../avx512`:
//! eight; the names without a level run the default one); under `affine/tensor/`,
//! torch's `grid_sample` warps that run after `ToImage` (rotation about a point, perspective);
//! under `elastic/`, `ElasticTransform` (its field and its warp, together and apart).
//!
//! Compare ratios within one run, not absolute times (shared 2-core machines).

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use ferroloader::transforms::augment::geometry::{
    erase, image_corners, perspective_coeffs, perspective_warp_simd, vflip, AffineWarp, EraseValue,
    GaussianBlur, Interpolation, Padder, Padding, PaddingMode, RandomCropSpec,
};
use ferroloader::transforms::augment::grid_sample::GridSampler;
use ferroloader::transforms::augment::policy::Api;
use ferroloader::transforms::fused::default_simd;
use ferroloader::transforms::resize::SimdLevel;
use ferroloader::transforms::{CropRect, RgbImage};

const SIZE: u32 = 224;

/// A photo-like 224x224 image: gradients, flat discs, a fine texture and hash noise, so that no
/// kernel sees a constant input.
fn photo_like() -> RgbImage {
    let mut data = Vec::with_capacity(3 * (SIZE * SIZE) as usize);
    let mut state = 0x2545_f491_4f6c_dd1du64;
    for y in 0..SIZE {
        for x in 0..SIZE {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let noise = (state % 7) as i32 - 3;
            let (fx, fy) = (x as f32 / SIZE as f32, y as f32 / SIZE as f32);
            let disc = (fx - 0.6).powi(2) + (fy - 0.4).powi(2) < 0.04;
            let texture = ((x as f32 * 0.9 + y as f32 * 0.3).sin() * 25.0) as i32;
            let rgb = if disc {
                [200, 17, 128]
            } else {
                [
                    40 + (180.0 * fx) as i32 + texture,
                    30 + (160.0 * fy) as i32,
                    120 + (90.0 * (3.0 * (fx - fy)).cos()) as i32 - texture,
                ]
            };
            data.extend(rgb.map(|v| (v + noise).clamp(0, 255) as u8));
        }
    }
    RgbImage::from_raw(SIZE, SIZE, data).expect("224x224 RGB")
}

fn bench_affine(c: &mut Criterion) {
    let img = photo_like();
    let mut warp = AffineWarp::new();
    let mut out = RgbImage::new();
    let mut g = c.benchmark_group("affine");
    for (name, interp) in [
        ("nearest", Interpolation::Nearest),
        ("bilinear", Interpolation::Bilinear),
        ("bicubic", Interpolation::Bicubic),
    ] {
        // TrivialAugmentWide's ShearX at bin 30 (fixed-point engine for NEAREST).
        let shear = 0.99f64.atan().to_degrees();
        g.bench_function(format!("shear_x/{name}"), |b| {
            b.iter(|| {
                warp.affine(
                    black_box(img.view()),
                    0.0,
                    [0.0, 0.0],
                    1.0,
                    [shear, 0.0],
                    Some([0.0, 0.0]),
                    interp,
                    [128; 3],
                    &mut out,
                )
                .expect("affine")
            })
        });
        // timm's ShearX at magnitude 9 (`rand-m9`: factor 0.27), Pillow's matrix as timm
        // hands it, no centre.
        g.bench_function(format!("shear_x_timm/{name}"), |b| {
            b.iter(|| {
                warp.warp(
                    black_box(img.view()),
                    &[1.0, 0.27, 0.0, 0.0, 1.0, 0.0],
                    interp,
                    [124, 116, 104],
                    &mut out,
                )
                .expect("warp")
            })
        });
        // TranslateX (Pillow's scale engine for NEAREST).
        g.bench_function(format!("translate_x/{name}"), |b| {
            b.iter(|| {
                warp.affine(
                    black_box(img.view()),
                    0.0,
                    [21.0, 0.0],
                    1.0,
                    [0.0, 0.0],
                    None,
                    interp,
                    [0; 3],
                    &mut out,
                )
                .expect("affine")
            })
        });
        // The default level, then (BICUBIC) each vector level by name. A level above the
        // CPU's would time the same kernel under another name.
        let mut levels = vec![(name.to_owned(), default_simd())];
        if interp == Interpolation::Bicubic {
            for level in SimdLevel::kernel_sets() {
                match level {
                    SimdLevel::Avx2 => levels.push((format!("{name}/avx2"), level)),
                    SimdLevel::Avx512 => levels.push((format!("{name}/avx512"), level)),
                    SimdLevel::Portable | SimdLevel::Avx512Ymm => {}
                }
            }
        }
        for (name, level) in levels {
            warp.set_simd_limit(level);
            g.bench_function(format!("rotate_30/{name}"), |b| {
                b.iter(|| {
                    warp.rotate(
                        black_box(img.view()),
                        30.0,
                        None,
                        false,
                        interp,
                        [0; 3],
                        &mut out,
                    )
                    .expect("rotate")
                })
            });
            // RandomAffine(degrees=15, translate=(0.1, 0.1), scale=(0.9, 1.1),
            // shear=(-5, 5, -5, 5)).
            g.bench_function(format!("random_affine/{name}"), |b| {
                b.iter(|| {
                    warp.affine(
                        black_box(img.view()),
                        -11.5,
                        [7.0, -12.0],
                        1.07,
                        [3.2, -4.1],
                        None,
                        interp,
                        [0; 3],
                        &mut out,
                    )
                    .expect("affine")
                })
            });
            // RandomPerspective() (distortion_scale 0.5) on 224x224: one draw's corners, the
            // 8x8 solve and the warp, as a sample pays them.
            let start = image_corners(SIZE, SIZE);
            let end = [[31.0, 12.0], [200.0, 40.0], [190.0, 215.0], [9.0, 176.0]];
            g.bench_function(format!("random_perspective/{name}"), |b| {
                b.iter(|| {
                    let coeffs = perspective_coeffs(&start, &end).expect("finite");
                    perspective_warp_simd(
                        black_box(img.view()),
                        (SIZE, SIZE),
                        &coeffs,
                        interp,
                        [0; 3],
                        level,
                        &mut out,
                    )
                    .expect("perspective")
                })
            });
        }
        warp.set_simd_limit(default_simd());
    }
    // torch's grid_sample warps (after ToImage), beside Pillow's above: RandomRotation about a
    // point and RandomPerspective with a fill (a mask channel).
    let mut grid = GridSampler::new();
    let tensor_img = img.clone();
    for (name, interp) in [
        ("nearest", Interpolation::Nearest),
        ("bilinear", Interpolation::Bilinear),
    ] {
        g.bench_function(format!("tensor/rotate_30_center/{name}"), |b| {
            b.iter(|| {
                grid.rotate(
                    black_box(&tensor_img),
                    30.0,
                    Some([100.0, 90.5]),
                    interp,
                    Some([0.0; 3]),
                    Api::V1,
                    &mut out,
                )
                .expect("rotate")
            })
        });
        let start = image_corners(SIZE, SIZE);
        let end = [[31.0, 12.0], [200.0, 40.0], [190.0, 215.0], [9.0, 176.0]];
        g.bench_function(format!("tensor/random_perspective/{name}"), |b| {
            b.iter(|| {
                let coeffs = perspective_coeffs(&start, &end).expect("finite");
                grid.perspective(
                    black_box(&tensor_img),
                    &coeffs,
                    interp,
                    Some([0.0; 3]),
                    Api::V2,
                    &mut out,
                )
                .expect("perspective")
            })
        });
    }
    // Pillow's transpose fast path (square image, no centre).
    g.bench_function("rotate_90/fast_path", |b| {
        b.iter(|| {
            warp.rotate(
                black_box(img.view()),
                90.0,
                None,
                false,
                Interpolation::Nearest,
                [0; 3],
                &mut out,
            )
            .expect("rotate")
        })
    });
    g.finish();
}

fn bench_flip_pad_crop(c: &mut Criterion) {
    let img = photo_like();
    let mut work = img.clone();
    let mut padder = Padder::new();
    let mut out = RgbImage::new();
    let mut g = c.benchmark_group("pad");
    g.bench_function("vflip", |b| b.iter(|| vflip(black_box(&mut work))));
    for (name, mode) in [
        ("constant", PaddingMode::Constant),
        ("edge", PaddingMode::Edge),
        ("reflect", PaddingMode::Reflect),
        ("symmetric", PaddingMode::Symmetric),
    ] {
        g.bench_function(format!("pad_16/{name}"), |b| {
            b.iter(|| {
                padder
                    .pad(
                        black_box(img.view()),
                        Padding::all(16),
                        mode,
                        [0; 3],
                        &mut out,
                    )
                    .expect("pad")
            })
        });
    }
    // RandomCrop(224, padding=16, padding_mode="reflect") at an off-centre position.
    let spec = RandomCropSpec {
        height: SIZE,
        width: SIZE,
        padding: Some(Padding::all(16)),
        pad_if_needed: false,
        fill: [0; 3],
        mode: PaddingMode::Reflect,
    };
    g.bench_function("random_crop_224_pad_16/reflect", |b| {
        b.iter(|| {
            padder
                .random_crop(black_box(img.view()), &spec, 5, 27, &mut out)
                .expect("crop")
        })
    });
    g.finish();
}

fn bench_blur(c: &mut Criterion) {
    let img = photo_like();
    let mut work = img.clone();
    let mut blur = GaussianBlur::new();
    let mut g = c.benchmark_group("gaussian_blur");
    for (k, sigma) in [(3, 0.8), (9, 1.5), (23, 5.0)] {
        g.bench_function(format!("k{k}"), |b| {
            b.iter(|| {
                // Blurring the previous output is as costly as blurring a fresh copy.
                blur.apply(black_box(&mut work), [k, k], [sigma, sigma])
                    .expect("blur")
            })
        });
    }
    g.finish();
}

fn bench_erase(c: &mut Criterion) {
    let n = SIZE as usize;
    let mut slot = vec![0.25f32; 3 * n * n];
    // RandomErasing's typical rectangle: a third of the area, aspect ratio near one.
    let rect = CropRect {
        top: 40,
        left: 60,
        height: 130,
        width: 128,
    };
    let noise: Vec<f32> = (0..3 * 130 * 128)
        .map(|i| (i % 17) as f32 * 0.1 - 0.8)
        .collect();
    let mut g = c.benchmark_group("erase");
    g.bench_function("per_channel", |b| {
        b.iter(|| {
            erase(
                black_box(&mut slot),
                3,
                n,
                n,
                rect,
                EraseValue::PerChannel(&[0.0, 0.0, 0.0]),
            )
            .expect("erase")
        })
    });
    g.bench_function("random_source", |b| {
        b.iter(|| {
            erase(
                black_box(&mut slot),
                3,
                n,
                n,
                rect,
                EraseValue::Source(&noise),
            )
            .expect("erase")
        })
    });
    g.finish();
}

/// `ElasticTransform()` (alpha 50, sigma 5: two 41-tap blurs of two 224x224 fields) per sample:
/// the field's draws, blur and scale, and the `grid_sample` warp, BILINEAR with a fill; and the
/// two parts apart.
fn bench_elastic(c: &mut Criterion) {
    use ferroloader::transforms::augment::elastic::{Elastic, ElasticField};
    use ferroloader::transforms::rng::sample_rng;

    let img = photo_like();
    let mut out = RgbImage::new();
    let mut grid = GridSampler::new();
    let mut field = ElasticField::new();
    let mut rng = sample_rng(0, 0, 0);
    let mut g = c.benchmark_group("elastic");
    for api in [Api::V1, Api::V2] {
        let params = Elastic::new([50.0, 50.0], [5.0, 5.0], api).expect("params");
        let name = format!("{api:?}").to_lowercase();
        g.bench_function(format!("sample/{name}"), |b| {
            b.iter(|| {
                field.draw(&params, SIZE, SIZE, &mut rng).expect("field");
                grid.elastic(
                    black_box(&img),
                    &field,
                    Interpolation::Bilinear,
                    Some([0.0; 3]),
                    api,
                    &mut out,
                )
                .expect("elastic")
            })
        });
    }
    let params = Elastic::new([50.0, 50.0], [5.0, 5.0], Api::V2).expect("params");
    g.bench_function("field_only", |b| {
        b.iter(|| field.draw(&params, SIZE, SIZE, &mut rng).expect("field"))
    });
    field.draw(&params, SIZE, SIZE, &mut rng).expect("field");
    for (name, interp) in [
        ("nearest", Interpolation::Nearest),
        ("bilinear", Interpolation::Bilinear),
    ] {
        g.bench_function(format!("warp_only/{name}"), |b| {
            b.iter(|| {
                grid.elastic(
                    black_box(&img),
                    &field,
                    interp,
                    Some([0.0; 3]),
                    Api::V2,
                    &mut out,
                )
                .expect("elastic")
            })
        });
    }
    g.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
}

criterion_group! {
    name = benches;
    config = config();
    targets = bench_affine, bench_flip_pad_crop, bench_blur, bench_erase, bench_elastic
}
criterion_main!(benches);
