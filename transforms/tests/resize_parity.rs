//! Pillow parity of the resize (bilinear, bicubic, nearest) on every kernel set, and fused ==
//! op-by-op for every output kind.
//!
//! Reads the corpus `scripts/fixtures_resize.py` writes (`make fixtures`): sources, Pillow's
//! `img.crop(box).resize((w, h), FILTER)` for each case, and numpy's float32 to-tensor +
//! normalize values.

use std::path::PathBuf;

use ferroloader_transforms::crop::RandomResizedCrop;
use ferroloader_transforms::fused::{FusedKernel, OutputKind, OutputSlot};
use ferroloader_transforms::resize::{Filter, Resizer, SimdLevel};
use ferroloader_transforms::rng::sample_rng;
use ferroloader_transforms::tensor::{
    hflip, normalize_value, to_chw_u8, to_float, to_tensor_value, Normalize, Scaling,
};
use ferroloader_transforms::{CropRect, RgbImage};
use serde::Deserialize;

use crate::counting_alloc;
use counting_alloc::allocations;

#[derive(Deserialize)]
struct Manifest {
    pillow: String,
    images: Vec<ImageEntry>,
    cases: Vec<Case>,
    normalize: NormalizeRef,
}

#[derive(Deserialize)]
struct Case {
    image: String,
    /// Pillow's box: left, top, right, bottom.
    #[serde(rename = "box")]
    bbox: [u32; 4],
    out_w: u32,
    out_h: u32,
    /// Pillow's filter: "bilinear", "bicubic" or "nearest".
    filter: String,
    file: String,
    why: String,
}

impl Case {
    fn filter(&self) -> Filter {
        match self.filter.as_str() {
            "bilinear" => Filter::Bilinear,
            "bicubic" => Filter::Bicubic,
            "nearest" => Filter::Nearest,
            other => panic!("{}: unknown filter {other:?}", self.file),
        }
    }

    fn rect(&self) -> CropRect {
        let [left, top, right, bottom] = self.bbox;
        CropRect {
            top,
            left,
            height: bottom - top,
            width: right - left,
        }
    }
}

#[derive(Deserialize)]
struct NormalizeRef {
    mean: [f64; 3],
    std: [f64; 3],
    bits: Vec<Vec<u32>>,
}

struct Corpus {
    dir: PathBuf,
    manifest: Manifest,
    images: Vec<(String, RgbImage)>,
}

use crate::rgb_corpus;
use rgb_corpus::ImageEntry;

impl Corpus {
    fn load() -> Corpus {
        let (dir, manifest): (_, Manifest) = rgb_corpus::manifest("resize");
        let images = rgb_corpus::sources(&dir, &manifest.images);
        Corpus {
            dir,
            manifest,
            images,
        }
    }

    fn image(&self, name: &str) -> &RgbImage {
        &self
            .images
            .iter()
            .find(|(n, _)| n == name)
            .expect("case names a known image")
            .1
    }
}

/// Pixels (RGB triples) that differ, and the largest byte difference.
fn compare(ours: &[u8], pillow: &[u8]) -> (usize, u8) {
    assert_eq!(ours.len(), pillow.len());
    let mut differing = 0;
    let mut max = 0;
    for (a, b) in ours.chunks_exact(3).zip(pillow.chunks_exact(3)) {
        let d = a
            .iter()
            .zip(b)
            .map(|(x, y)| x.abs_diff(*y))
            .max()
            .unwrap_or(0);
        if d > 0 {
            differing += 1;
            max = max.max(d);
        }
    }
    (differing, max)
}

#[test]
fn resize_matches_pillow_bit_for_bit() {
    let corpus = Corpus::load();
    for filter in [Filter::Bilinear, Filter::Bicubic, Filter::Nearest] {
        let cases = corpus
            .manifest
            .cases
            .iter()
            .filter(|c| c.filter() == filter);
        assert!(cases.clone().count() > 50, "{filter:?}: corpus too small");
        for level in SimdLevel::kernel_sets() {
            // One resizer for every case, as a worker would use it; each case runs twice so
            // the second run goes through the coefficient cache.
            let mut resizer = Resizer::new();
            resizer.set_simd_limit(level);
            resizer.set_filter(filter);
            let mut out = RgbImage::new();
            let (mut total_px, mut total_diff, mut worst) = (0usize, 0usize, 0u8);
            for case in cases.clone() {
                let img = corpus.image(&case.image);
                let view = img.crop_view(case.rect()).expect("box inside the image");
                let want = std::fs::read(corpus.dir.join(&case.file)).expect("reference readable");
                for pass in 0..2 {
                    resizer
                        .resize(view, case.out_h, case.out_w, &mut out)
                        .expect("valid sizes");
                    assert_eq!((out.width(), out.height()), (case.out_w, case.out_h));
                    let (diff, max) = compare(out.as_raw(), &want);
                    if diff > 0 {
                        println!(
                            "{}: {} {:?} -> {}x{} ({}, {filter:?}, {level:?}), pass {pass}: \
                             {diff} pixels differ, max {max}",
                            case.file, case.image, case.bbox, case.out_w, case.out_h, case.why
                        );
                    }
                    total_px += want.len() / 3;
                    total_diff += diff;
                    worst = worst.max(max);
                }
            }
            println!(
                "Pillow {} parity, {filter:?} on {level:?}: {total_diff} of {total_px} pixels \
                 differ, max diff {worst}",
                corpus.manifest.pillow,
            );
            assert_eq!(
                total_diff, 0,
                "{filter:?} on {level:?} is meant to be bit-exact"
            );
        }
    }
}

#[test]
fn to_tensor_and_normalize_match_numpy_float32() {
    let corpus = Corpus::load();
    let norm = &corpus.manifest.normalize;
    for c in 0..3 {
        let (m, s) = (norm.mean[c] as f32, norm.std[c] as f32);
        for v in 0..=255u8 {
            let ours = normalize_value(to_tensor_value(v), m, s).to_bits();
            assert_eq!(ours, norm.bits[c][usize::from(v)], "channel {c} value {v}");
        }
    }
}

/// The op-by-op chain: crop (copy), resize, flip, then the output conversion.
fn op_by_op(
    img: &RgbImage,
    rect: CropRect,
    size: (u32, u32),
    flip: bool,
    kind: &OutputKind,
    filter: Filter,
) -> (Vec<f32>, Vec<u8>) {
    let mut cropped = RgbImage::new();
    img.crop_view(rect).expect("fits").to_image(&mut cropped);
    let mut resized = RgbImage::new();
    let mut resizer = Resizer::new();
    resizer.set_filter(filter);
    resizer
        .resize(cropped.view(), size.0, size.1, &mut resized)
        .expect("valid sizes");
    if flip {
        hflip(&mut resized);
    }
    let n = kind.elements_per_sample(size.0, size.1);
    match *kind {
        OutputKind::F32Chw { mean, std, scaling } => {
            let mut t = vec![0.0; n];
            to_float(resized.view(), &mut t, scaling).expect("length");
            Normalize::new(mean, std)
                .expect("valid")
                .apply(&mut t)
                .expect("planes");
            (t, Vec::new())
        }
        OutputKind::F32ChwUnnormalized { scaling } => {
            let mut t = vec![0.0; n];
            to_float(resized.view(), &mut t, scaling).expect("length");
            (t, Vec::new())
        }
        OutputKind::U8Chw => {
            let mut t = vec![0; n];
            to_chw_u8(resized.view(), &mut t).expect("length");
            (Vec::new(), t)
        }
        OutputKind::U8Hwc => (Vec::new(), resized.into_raw()),
    }
}

#[test]
fn fused_equals_op_by_op_for_every_kind_and_flip() {
    let corpus = Corpus::load();
    let kinds = [
        OutputKind::F32Chw {
            mean: [0.485, 0.456, 0.406],
            std: [0.229, 0.224, 0.225],
            scaling: Scaling::Divide,
        },
        OutputKind::F32Chw {
            mean: [0.5, 0.5, 0.5],
            std: [0.5, 0.5, 0.5],
            scaling: Scaling::Divide,
        },
        OutputKind::F32Chw {
            mean: [0.485, 0.456, 0.406],
            std: [0.229, 0.224, 0.225],
            scaling: Scaling::Reciprocal,
        },
        OutputKind::F32ChwUnnormalized {
            scaling: Scaling::Divide,
        },
        OutputKind::F32ChwUnnormalized {
            scaling: Scaling::Reciprocal,
        },
        OutputKind::U8Chw,
        OutputKind::U8Hwc,
    ];
    // One kernel and one slot buffer for everything: a stale table or a stale row from the
    // previous sample would show up as a mismatch.
    let mut kernel = FusedKernel::new();
    let mut slot_f32 = Vec::new();
    let mut slot_u8 = Vec::new();
    let mut checked = 0;
    for (i, case) in corpus.manifest.cases.iter().enumerate() {
        // Every third case keeps the run time down while covering each path (copy, one pass,
        // two passes, upscale) several times.
        if i % 3 != 0 && case.out_w * case.out_h > 64 * 64 {
            continue;
        }
        let img = corpus.image(&case.image);
        let rect = case.rect();
        let size = (case.out_h, case.out_w);
        kernel.set_filter(case.filter());
        for kind in &kinds {
            for flip in [false, true] {
                let (want_f, want_u) = op_by_op(img, rect, size, flip, kind, case.filter());
                let n = kind.elements_per_sample(size.0, size.1);
                if kind.is_f32() {
                    slot_f32.clear();
                    slot_f32.resize(n, f32::NAN);
                    kernel
                        .run(
                            img.view(),
                            rect,
                            size,
                            flip,
                            kind,
                            OutputSlot::F32(&mut slot_f32),
                        )
                        .expect("fused run");
                    let same = slot_f32
                        .iter()
                        .zip(&want_f)
                        .all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(same, "{} {kind:?} flip={flip}: fused differs", case.file);
                } else {
                    slot_u8.clear();
                    slot_u8.resize(n, 0xAA);
                    kernel
                        .run(
                            img.view(),
                            rect,
                            size,
                            flip,
                            kind,
                            OutputSlot::U8(&mut slot_u8),
                        )
                        .expect("fused run");
                    assert!(
                        slot_u8 == want_u,
                        "{} {kind:?} flip={flip}: fused differs",
                        case.file
                    );
                }
                checked += 1;
            }
        }
        // And the uint8 HWC output without flip is Pillow's image itself.
        let want = std::fs::read(corpus.dir.join(&case.file)).expect("reference readable");
        slot_u8.clear();
        slot_u8.resize(want.len(), 0);
        kernel
            .run(
                img.view(),
                rect,
                size,
                false,
                &OutputKind::U8Hwc,
                OutputSlot::U8(&mut slot_u8),
            )
            .expect("fused run");
        assert!(
            slot_u8 == want,
            "{}: fused u8 differs from Pillow",
            case.file
        );
    }
    println!("fused == op-by-op in {checked} runs");
    assert!(checked > 100);
}

#[test]
fn steady_state_allocates_nothing() {
    let corpus = Corpus::load();
    let img = corpus.image("photo_500x375");
    // RandomResizedCrop boxes of every shape: both pass orders, narrow and wide windows,
    // upscales.
    let rrc = RandomResizedCrop::with_defaults((224, 224)).expect("valid");
    let rects: Vec<CropRect> = (0..60)
        .map(|i| rrc.get_params(img.width(), img.height(), &mut sample_rng(7, 0, i)))
        .collect();
    let kinds = [
        OutputKind::F32Chw {
            mean: [0.485, 0.456, 0.406],
            std: [0.229, 0.224, 0.225],
            scaling: Scaling::Divide,
        },
        OutputKind::U8Chw,
        OutputKind::U8Hwc,
    ];
    let mut kernel = FusedKernel::new();
    let mut resizer = Resizer::new();
    let mut resized = RgbImage::new();
    let mut slot_f32 = vec![0.0f32; 3 * 224 * 224];
    let mut slot_u8 = vec![0u8; 3 * 224 * 224];
    let mut pass = || {
        let before = allocations();
        // Every filter, switched per sample: the caches only grow.
        let filters = [Filter::Bilinear, Filter::Bicubic, Filter::Nearest];
        for (i, &rect) in rects.iter().enumerate() {
            let flip = i % 2 == 1;
            kernel.set_filter(filters[i % 3]);
            resizer.set_filter(filters[(i / 2) % 3]);
            for kind in &kinds {
                let slot = if kind.is_f32() {
                    OutputSlot::F32(&mut slot_f32)
                } else {
                    OutputSlot::U8(&mut slot_u8)
                };
                kernel
                    .run(img.view(), rect, (224, 224), flip, kind, slot)
                    .expect("fused run");
            }
            let view = img.crop_view(rect).expect("fits");
            resizer
                .resize(view, 224, 224, &mut resized)
                .expect("resize");
        }
        allocations() - before
    };
    // The first pass sizes every buffer; the same work again must not allocate at all.
    assert!(pass() > 0, "the counter counts");
    assert_eq!(pass(), 0, "steady-state calls allocated");
}
