//! The resize alone, bilinear against bicubic, at every kernel set this CPU runs: the shapes of
//! torchvision's recipes from a 500x375 source (the ImageNet median): the whole image to
//! 224x224, RandomResizedCrop's crops to 224x224 (both pass orders, up- and downscales), and
//! the eval recipes' `Resize(232)` and `Resize(256)` (before `CenterCrop(224)`, which is a view).
//!
//! The source is generated (a resize's cost does not depend on the pixel values), so the bench
//! needs no fixtures. Compare within one run (ratios), not absolute times across machines.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use ferroloader_transforms::crop::{resize_shorter_side, RandomResizedCrop};
use ferroloader_transforms::resize::{generated_image, Filter, Resizer, SimdLevel};
use ferroloader_transforms::rng::sample_rng;
use ferroloader_transforms::{CropRect, RgbImage};

/// A deterministic 500x375 image: gradients, noise and hard 0/255 bands.
fn source() -> RgbImage {
    generated_image(500, 375, 1, |x, y, c, draw| {
        let v = match (x / 9 + y / 7 + c) % 5 {
            0 => 255,
            1 => 0,
            _ => (x + 2 * y + 40 * c + (draw >> 60) as u32) % 256,
        };
        v as u8
    })
}

fn bench_resize(c: &mut Criterion) {
    let img = source();
    let rrc =
        RandomResizedCrop::new((224, 224), (0.08, 1.0), (3.0 / 4.0, 4.0 / 3.0)).expect("valid");
    let crops: Vec<CropRect> = (0..16)
        .map(|i| rrc.get_params(img.width(), img.height(), &mut sample_rng(0, 0, i)))
        .collect();
    let eval =
        |size: u32| resize_shorter_side(img.width(), img.height(), size, None).expect("valid size");
    let (eval232, eval256) = (eval(232), eval(256));
    let mut g = c.benchmark_group("resize");
    for level in SimdLevel::kernel_sets() {
        for (name, filter) in [("bilinear", Filter::Bilinear), ("bicubic", Filter::Bicubic)] {
            let mut resizer = Resizer::new();
            resizer.set_simd_limit(level);
            resizer.set_filter(filter);
            let mut out = RgbImage::new();
            g.bench_function(format!("500x375_to_224/{name}/{level:?}"), |b| {
                b.iter(|| {
                    resizer
                        .resize(black_box(img.view()), 224, 224, &mut out)
                        .expect("resizes")
                })
            });
            g.bench_function(format!("rrc_16_crops_to_224/{name}/{level:?}"), |b| {
                b.iter(|| {
                    for rect in &crops {
                        let view = img.crop_view(*rect).expect("crop fits");
                        resizer
                            .resize(black_box(view), 224, 224, &mut out)
                            .expect("resizes");
                    }
                })
            });
            for (label, (h, w)) in [("eval_resize_232", eval232), ("eval_resize_256", eval256)] {
                g.bench_function(format!("{label}/{name}/{level:?}"), |b| {
                    b.iter(|| {
                        resizer
                            .resize(black_box(img.view()), h, w, &mut out)
                            .expect("resizes")
                    })
                });
            }
        }
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(std::time::Duration::from_secs(1))
        .measurement_time(std::time::Duration::from_secs(3));
    targets = bench_resize
}
criterion_main!(benches);
