//! torchvision parity of the colour ops: every case bit-exact with what
//! `torchvision.transforms.functional` returns for a PIL RGB image, and no allocation once warm.
//!
//! Reads the corpus `scripts/fixtures_color.py` writes (`make fixtures`): sources, the output
//! of each (op, parameter) case, and each parameter as the float64 bits torchvision computed.

use std::fmt::Write as _;

use ferroloader_transforms::augment::color::{
    adjust_brightness, adjust_contrast, adjust_hue, adjust_saturation, adjust_sharpness,
    autocontrast, equalize, hsv_to_rgb, invert, posterize, rgb_to_hsv, solarize, to_grayscale,
    to_grayscale_rgb, ColorScratch,
};
use ferroloader_transforms::RgbImage;
use serde::Deserialize;

use crate::counting_alloc;
use counting_alloc::allocations;

#[derive(Deserialize)]
struct Manifest {
    pillow: String,
    torchvision: String,
    images: Vec<ImageEntry>,
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    image: String,
    op: String,
    /// Readable form of the parameter; `param_bits` is the exact value.
    param: f64,
    param_bits: u64,
    offset: usize,
    len: usize,
    why: String,
}

impl Case {
    fn param(&self) -> f64 {
        f64::from_bits(self.param_bits)
    }
}

use crate::rgb_corpus;
use rgb_corpus::ImageEntry;

struct Corpus {
    manifest: Manifest,
    images: Vec<(String, RgbImage)>,
    expected: Vec<u8>,
}

impl Corpus {
    fn load() -> Corpus {
        let (dir, manifest): (_, Manifest) = rgb_corpus::manifest("color");
        let images = rgb_corpus::sources(&dir, &manifest.images);
        let expected = std::fs::read(dir.join("expected.bin")).expect("expected.bin readable");
        Corpus {
            manifest,
            images,
            expected,
        }
    }

    fn image(&self, name: &str) -> &RgbImage {
        &self
            .images
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no source {name}"))
            .1
    }
}

/// Runs one case on a copy of `src` (in `work`, reused) and returns the output bytes: the
/// image for RGB outputs, `plane` for the one-channel grayscale.
fn run_case<'a>(
    case: &Case,
    src: &RgbImage,
    work: &'a mut RgbImage,
    plane: &'a mut Vec<u8>,
    scratch: &mut ColorScratch,
) -> &'a [u8] {
    src.view().to_image(work);
    let p = case.param();
    let what = || format!("{} {} ({})", case.op, case.param, case.why);
    match case.op.as_str() {
        "equalize" => equalize(work),
        "autocontrast" => autocontrast(work),
        "invert" => invert(work),
        "grayscale3" => to_grayscale_rgb(work),
        "grayscale1" => {
            plane.resize(work.width() as usize * work.height() as usize, 0);
            to_grayscale(work, plane).unwrap_or_else(|e| panic!("{}: {e}", what()));
            return plane;
        }
        "posterize" => posterize(work, p as u8).unwrap_or_else(|e| panic!("{}: {e}", what())),
        "solarize" => solarize(work, p),
        "brightness" => adjust_brightness(work, p).unwrap_or_else(|e| panic!("{}: {e}", what())),
        "saturation" => adjust_saturation(work, p).unwrap_or_else(|e| panic!("{}: {e}", what())),
        "contrast" => adjust_contrast(work, p).unwrap_or_else(|e| panic!("{}: {e}", what())),
        "sharpness" => {
            adjust_sharpness(work, p, scratch).unwrap_or_else(|e| panic!("{}: {e}", what()))
        }
        "hue" => adjust_hue(work, p).unwrap_or_else(|e| panic!("{}: {e}", what())),
        other => panic!("unknown op {other} in the manifest"),
    }
    work.as_raw()
}

#[test]
fn every_case_is_bit_exact() {
    let corpus = Corpus::load();
    let m = &corpus.manifest;
    assert!(m.cases.len() > 1000, "only {} cases", m.cases.len());
    let mut work = RgbImage::new();
    let mut plane = Vec::new();
    let mut scratch = ColorScratch::new();
    let mut failures = String::new();
    let mut failed = 0usize;
    let mut ops = std::collections::BTreeMap::<&str, usize>::new();
    for case in &m.cases {
        *ops.entry(case.op.as_str()).or_default() += 1;
        let src = corpus.image(&case.image);
        let want = &corpus.expected[case.offset..case.offset + case.len];
        let got = run_case(case, src, &mut work, &mut plane, &mut scratch);
        assert_eq!(
            got.len(),
            want.len(),
            "{} {}: output size",
            case.op,
            case.param
        );
        let diffs: Vec<usize> = (0..want.len()).filter(|&i| got[i] != want[i]).collect();
        if let Some(&first) = diffs.first() {
            failed += 1;
            let max = diffs
                .iter()
                .map(|&i| got[i].abs_diff(want[i]))
                .max()
                .unwrap_or(0);
            let channels = if case.op == "grayscale1" { 1 } else { 3 };
            let px = first / channels;
            let _ = writeln!(
                failures,
                "{} on {} param {} (bits {:#x}, {}): {} bytes differ, max {} levels; first at \
                 pixel ({}, {}) channel {}: got {} want {}",
                case.op,
                case.image,
                case.param,
                case.param_bits,
                case.why,
                diffs.len(),
                max,
                px % src.width() as usize,
                px / src.width() as usize,
                first % channels,
                got[first],
                want[first]
            );
        }
    }
    // Every op the kernels offer is covered.
    for op in [
        "equalize",
        "autocontrast",
        "invert",
        "grayscale1",
        "grayscale3",
        "posterize",
        "solarize",
        "brightness",
        "saturation",
        "contrast",
        "sharpness",
        "hue",
    ] {
        assert!(ops.get(op).copied().unwrap_or(0) > 0, "no {op} cases");
    }
    assert!(
        failed == 0,
        "{failed} of {} cases differ from torchvision {} / Pillow {}:\n{failures}",
        m.cases.len(),
        m.torchvision,
        m.pillow
    );
}

/// The HSV round trip on its own, on every colour of the `colours` source: a failure here
/// points at `rgb_to_hsv`/`hsv_to_rgb` rather than at the hue shift.
#[test]
fn hue_zero_is_pillows_hsv_round_trip() {
    let corpus = Corpus::load();
    let case = corpus
        .manifest
        .cases
        .iter()
        .find(|c| c.op == "hue" && c.param_bits == 0 && c.image.starts_with("colours"))
        .expect("a hue 0 case on the colours source");
    let src = corpus.image(&case.image);
    let want = &corpus.expected[case.offset..case.offset + case.len];
    for (i, (px, w)) in src
        .as_raw()
        .chunks_exact(3)
        .zip(want.chunks_exact(3))
        .enumerate()
    {
        let rgb = [px[0], px[1], px[2]];
        let hsv = rgb_to_hsv(rgb);
        assert_eq!(
            hsv_to_rgb(hsv),
            [w[0], w[1], w[2]],
            "pixel {i}: {rgb:?} -> hsv {hsv:?}"
        );
    }
}

#[test]
fn steady_state_allocates_nothing() {
    let corpus = Corpus::load();
    let m = &corpus.manifest;
    let mut work = RgbImage::new();
    let mut plane = Vec::new();
    let mut scratch = ColorScratch::new();
    // Warm up on the largest source so every buffer has its final size.
    let largest = m
        .images
        .iter()
        .max_by_key(|e| e.width as usize * e.height as usize)
        .expect("images");
    let big = corpus.image(&largest.name);
    for case in &m.cases {
        run_case(case, big, &mut work, &mut plane, &mut scratch);
    }
    let before = allocations();
    for _ in 0..2 {
        for case in &m.cases {
            let src = corpus.image(&case.image);
            run_case(case, src, &mut work, &mut plane, &mut scratch);
        }
    }
    assert_eq!(allocations() - before, 0, "colour ops allocated once warm");
}
