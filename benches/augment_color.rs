//! The colour ops of `augment::color`, one 224x224 photo-like image per iteration, single
//! thread: the size a policy's pixel ops see after RandomResizedCrop(224); and, under
//! `tensor/`, the tensor kernels of `augment::tensor_color` that run after `ToImage` and have
//! no other bench (grayscale, hue); and torchvision v2's `JPEG` (a libjpeg-turbo compression and
//! decompression, `jpeg_q*`), whose Pillow time (save and open) `docs/benchmarks.md` sets beside
//! it.
//!
//! The image is generated here (no fixture): gradients, flat discs, fine texture and noise, so
//! histograms, hues and the sharpness filter see photo-like data. Each op works in place, so
//! each iteration starts from a fresh copy made outside the timed region. Compare ratios within
//! one run, not absolute times.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use ferroloader::transforms::augment::color::{
    adjust_brightness, adjust_contrast, adjust_hue, adjust_saturation, adjust_sharpness,
    autocontrast, equalize, invert, permute_channels, posterize, solarize, to_grayscale,
    to_grayscale_rgb, ColorScratch,
};
use ferroloader::transforms::augment::policy::Api;
use ferroloader::transforms::augment::tensor_color;
use ferroloader::transforms::encode::JpegRoundTrip;
use ferroloader::transforms::RgbImage;

const SIZE: u32 = 224;

/// A deterministic photo-like image: smooth gradients, flat saturated discs, texture a few
/// pixels across and a little noise.
fn photo_like(w: u32, h: u32) -> RgbImage {
    let mut state = 0x2545_f491_u32;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        state
    };
    let discs: Vec<(f32, f32, f32, [u8; 3])> = (0..6)
        .map(|_| {
            let cx = (next() % w) as f32;
            let cy = (next() % h) as f32;
            let r = 10.0 + (next() % 50) as f32;
            let c = [
                (next() % 256) as u8,
                (next() % 256) as u8,
                (next() % 256) as u8,
            ];
            (cx, cy, r, c)
        })
        .collect();
    let mut data = Vec::with_capacity(3 * (w * h) as usize);
    for y in 0..h {
        for x in 0..w {
            let (u, v) = (x as f32 / (w - 1) as f32, y as f32 / (h - 1) as f32);
            let tex = 25.0 * (x as f32 * 0.9 + 0.3 * y as f32).sin();
            let mut px = [
                40.0 + 180.0 * u + tex,
                30.0 + 160.0 * v + 30.0 * (6.0 * u + 2.0 * v).sin() + 0.6 * tex,
                120.0 + 90.0 * (3.0 * (u - v)).cos() - 0.8 * tex,
            ];
            for &(cx, cy, r, c) in &discs {
                if (x as f32 - cx).powi(2) + (y as f32 - cy).powi(2) < r * r {
                    px = c.map(f32::from);
                }
            }
            for p in px {
                let noise = (next() % 7) as f32 - 3.0;
                data.push((p + noise).clamp(0.0, 255.0) as u8);
            }
        }
    }
    RgbImage::from_raw(w, h, data).expect("size")
}

fn bench_color(c: &mut Criterion) {
    let src = photo_like(SIZE, SIZE);
    let mut g = c.benchmark_group("augment_color");
    g.throughput(Throughput::Elements(u64::from(SIZE * SIZE)));
    let mut scratch = ColorScratch::new();
    let mut plane = vec![0u8; (SIZE * SIZE) as usize];

    macro_rules! op {
        ($name:expr, |$img:ident| $body:expr) => {
            g.bench_function($name, |b| {
                b.iter_batched_ref(
                    || src.clone(),
                    |$img| {
                        $body;
                        black_box(&*$img);
                    },
                    BatchSize::SmallInput,
                )
            });
        };
    }

    // The harness alone (the fresh copy is made outside the timed region): a floor.
    op!("harness_only", |img| black_box(&mut *img));
    op!("invert", |img| invert(img));
    op!("posterize_4", |img| posterize(img, 4).expect("bits"));
    op!("solarize_128", |img| solarize(img, 128.0));
    op!("equalize", |img| equalize(img));
    op!("autocontrast", |img| autocontrast(img));
    op!("brightness_1.3", |img| adjust_brightness(img, 1.3)
        .expect("finite"));
    op!("contrast_0.7", |img| adjust_contrast(img, 0.7)
        .expect("finite"));
    op!("saturation_1.5", |img| adjust_saturation(img, 1.5)
        .expect("finite"));
    op!("sharpness_1.8", |img| adjust_sharpness(
        img,
        1.8,
        &mut scratch
    )
    .expect("finite"));
    op!("grayscale_rgb", |img| to_grayscale_rgb(img));
    op!("grayscale_plane", |img| to_grayscale(img, &mut plane)
        .expect("size"));
    op!("hue_0.13", |img| adjust_hue(img, 0.13).expect("in range"));
    let mut jpeg = JpegRoundTrip::new().expect("libjpeg-turbo");
    for quality in [50u8, 75, 95] {
        op!(format!("jpeg_q{quality}"), |img| jpeg
            .apply(img, quality)
            .expect("round trip"));
    }
    // v2's RandomChannelPermutation, one of randperm(3)'s non-identity orders.
    op!("channel_permutation_201", |img| permute_channels(
        img,
        [2, 0, 1]
    ));
    // torch's tensor kernels (after ToImage), beside their Pillow siblings above.
    op!("tensor/grayscale_rgb_v1", |img| tensor_color::to_grayscale(
        img,
        Api::V1
    ));
    op!("tensor/grayscale_rgb_v2", |img| tensor_color::to_grayscale(
        img,
        Api::V2
    ));
    op!("tensor/hue_0.13_v1", |img| tensor_color::adjust_hue(
        img,
        0.13,
        Api::V1
    )
    .expect("in range"));
    op!("tensor/hue_0.13_v2", |img| tensor_color::adjust_hue(
        img,
        0.13,
        Api::V2
    )
    .expect("in range"));
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30).warm_up_time(std::time::Duration::from_secs(1)).measurement_time(std::time::Duration::from_secs(2));
    targets = bench_color
}
criterion_main!(benches);
