//! `exif_transpose` through whole pipelines: every geometry (RandomResizedCrop with its region
//! decode and DCT-free fused path, a staged pixel op, Resize + CenterCrop, RandomCrop, no crop)
//! and both executions, on JPEGs carrying each orientation 1..=8 in either byte order.
//!
//! The reference is built from independent parts: the stored pixels (a plain decode),
//! transposed by Pillow's definitions of each method, written as a binary PPM (decoded
//! losslessly), and the same pipeline run on it without the option. Equal bit for bit: the
//! region decode maps the crop back exactly, and nothing but the transposition differs. Also:
//! no allocation once warm, the option off leaves the stored pixels, and the report's size is
//! the transposed one.

use ferroloader_transforms::decode::{DecodeContext, DecodeOptions, Decoder};
use ferroloader_transforms::encode::JpegEncoder;
use ferroloader_transforms::fused::OutputSlot;
use ferroloader_transforms::rng::sample_rng;
use ferroloader_transforms::spec::{Pipeline, PipelineSpec};
use ferroloader_transforms::RgbImage;

use crate::stage_pipeline;
use stage_pipeline::steady_state_allocations;

use crate::counting_alloc;
use counting_alloc::allocations;

const SEED: u64 = 13;
const WIDTH: u32 = 61;
const HEIGHT: u32 = 37;

/// A smooth image with detail in both axes, so every transposition moves pixels visibly.
fn pixels() -> RgbImage {
    let mut img = RgbImage::new();
    let data = img.reset(WIDTH, HEIGHT);
    for y in 0..HEIGHT as usize {
        for x in 0..WIDTH as usize {
            let p = 3 * (y * WIDTH as usize + x);
            data[p] = (x * 4) as u8;
            data[p + 1] = (y * 6) as u8;
            data[p + 2] = ((x * y) % 251) as u8;
        }
    }
    img
}

/// An APP1 EXIF block whose IFD0 holds Orientation `k` (a SHORT), in either byte order.
fn exif_app1(k: u16, little: bool) -> Vec<u8> {
    let u16b = |v: u16| {
        if little {
            v.to_le_bytes()
        } else {
            v.to_be_bytes()
        }
    };
    let u32b = |v: u32| {
        if little {
            v.to_le_bytes()
        } else {
            v.to_be_bytes()
        }
    };
    let mut block = b"Exif\0\0".to_vec();
    block.extend_from_slice(if little { b"II*\0" } else { b"MM\0*" });
    block.extend_from_slice(&u32b(8));
    block.extend_from_slice(&u16b(1));
    block.extend_from_slice(&u16b(274));
    block.extend_from_slice(&u16b(3));
    block.extend_from_slice(&u32b(1));
    block.extend_from_slice(&u16b(k));
    block.extend_from_slice(&[0, 0]);
    block.extend_from_slice(&u32b(0));
    let mut app1 = vec![0xFF, 0xE1];
    app1.extend_from_slice(&(block.len() as u16 + 2).to_be_bytes());
    app1.extend_from_slice(&block);
    app1
}

/// The JPEG of [`pixels`] with Orientation `k`.
fn jpeg(k: u16, little: bool) -> Vec<u8> {
    let mut plain = Vec::new();
    JpegEncoder::new(90)
        .expect("encoder")
        .encode(&pixels(), &mut plain)
        .expect("encodes");
    let mut out = plain[..2].to_vec();
    out.extend_from_slice(&exif_app1(k, little));
    out.extend_from_slice(&plain[2..]);
    out
}

/// `img` transposed for EXIF value `k` by `PIL.Image.transpose`'s definitions.
fn transposed(img: &RgbImage, k: u16) -> RgbImage {
    let (w, h) = (img.width() as usize, img.height() as usize);
    let (ow, oh) = if k >= 5 { (h, w) } else { (w, h) };
    let mut out = RgbImage::new();
    let dst = out.reset(ow as u32, oh as u32);
    let src = img.as_raw();
    for y in 0..oh {
        for x in 0..ow {
            let (sx, sy) = match k {
                2 => (w - 1 - x, y),
                3 => (w - 1 - x, h - 1 - y),
                4 => (x, h - 1 - y),
                5 => (y, x),
                6 => (y, h - 1 - x),
                7 => (w - 1 - y, h - 1 - x),
                8 => (w - 1 - y, x),
                _ => (x, y),
            };
            dst[3 * (y * ow + x)..][..3].copy_from_slice(&src[3 * (sy * w + sx)..][..3]);
        }
    }
    out
}

/// `img` as a binary PPM: decoded losslessly, and carrying no orientation.
fn ppm(img: &RgbImage) -> Vec<u8> {
    let mut out = format!("P6\n{} {}\n255\n", img.width(), img.height()).into_bytes();
    out.extend_from_slice(img.as_raw());
    out
}

/// What the pipeline must see for `bytes` with the option on: its stored pixels (a plain
/// decode), transposed for `k`, as a PPM.
fn reference_image(bytes: &[u8], k: u16) -> Vec<u8> {
    reference_image_with(bytes, k, Decoder::Turbo)
}

/// [`reference_image`] of `decoder`'s pixels.
fn reference_image_with(bytes: &[u8], k: u16, decoder: Decoder) -> Vec<u8> {
    let mut stored = RgbImage::new();
    DecodeContext::new(DecodeOptions::default().decoder(decoder))
        .expect("context")
        .decode(bytes, &mut stored)
        .expect("decodes");
    ppm(&transposed(&stored, k))
}

fn pipeline(ops: &str, execution: &str, exif: bool) -> Pipeline {
    let json = format!(
        r#"{{"ops": {ops}, "execution": "{execution}", "exif_transpose": {exif}, "image_size": [{w}, {h}]}}"#,
        w = WIDTH,
        h = HEIGHT,
    );
    let mut spec: PipelineSpec = serde_json::from_str(&json).expect("spec parses");
    if !spec.needs_image_size() {
        spec.image_size = None;
    }
    Pipeline::new(spec).expect("plans")
}

/// Sample `index` of `bytes`, float32, and the report's (width, height).
fn run(pipeline: &Pipeline, bytes: &[u8], index: u64) -> (Vec<u32>, (u32, u32)) {
    let mut ctx = pipeline.new_context().expect("context");
    let mut out = vec![0f32; pipeline.sample_len()];
    let report = pipeline
        .run(
            bytes,
            &mut sample_rng(SEED, 0, index),
            &mut ctx,
            OutputSlot::F32(&mut out),
            &mut (),
        )
        .expect("runs");
    (
        out.iter().map(|v| v.to_bits()).collect(),
        (report.width, report.height),
    )
}

/// Geometries whose output size does not depend on the image's.
const SIZED: [&str; 5] = [
    r#"[{"op": "RandomResizedCrop", "size": [20, 24]}, {"op": "RandomHorizontalFlip"}, {"op": "ToTensor"}]"#,
    r#"[{"op": "RandomResizedCrop", "size": 16, "scale": [0.05, 0.3]}, {"op": "RandomInvert", "p": 0.5}, {"op": "ToTensor"}]"#,
    r#"[{"op": "Resize", "size": 30}, {"op": "CenterCrop", "size": 25}, {"op": "ToTensor"}]"#,
    r#"[{"op": "RandomCrop", "size": [21, 33]}, {"op": "ToTensor"}]"#,
    r#"[{"op": "Resize", "size": [17, 19]}, {"op": "ToTensor"}]"#,
];

#[test]
fn every_geometry_sees_the_transposed_image_exactly() {
    for k in 1..=8u16 {
        for little in [true, false] {
            let bytes = jpeg(k, little);
            let reference = reference_image(&bytes, k);
            for ops in SIZED {
                for execution in ["fused", "op_by_op"] {
                    let with = pipeline(ops, execution, true);
                    let plain = pipeline(ops, execution, false);
                    for index in 0..4 {
                        let (got, size) = run(&with, &bytes, index);
                        let (want, want_size) = run(&plain, &reference, index);
                        assert_eq!(size, want_size, "{ops} k={k}");
                        assert!(
                            got == want,
                            "{ops} {execution} k={k} little={little} #{index}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn a_pipeline_without_a_crop_outputs_the_transposed_size() {
    for k in [1u16, 3, 6, 8] {
        let bytes = jpeg(k, true);
        let swapped = k >= 5;
        let (w, h) = if swapped {
            (HEIGHT, WIDTH)
        } else {
            (WIDTH, HEIGHT)
        };
        let ops = r#"[{"op": "ToTensor"}]"#;
        let json = format!(r#"{{"ops": {ops}, "exif_transpose": true, "image_size": [{h}, {w}]}}"#);
        let with = Pipeline::new(serde_json::from_str(&json).expect("spec")).expect("plans");
        let (got, size) = run(&with, &bytes, 0);
        assert_eq!(size, (w, h));
        let json = format!(r#"{{"ops": {ops}, "image_size": [{h}, {w}]}}"#);
        let plain = Pipeline::new(serde_json::from_str(&json).expect("spec")).expect("plans");
        assert_eq!(got, run(&plain, &reference_image(&bytes, k), 0).0, "k={k}");
    }
}

#[test]
fn off_by_default_the_stored_pixels() {
    let spec: PipelineSpec =
        serde_json::from_str(r#"{"ops": [{"op": "ToTensor"}]}"#).expect("spec");
    assert!(!spec.exif_transpose);
    assert!(!serde_json::to_string(&spec).expect("json").contains("exif"));
    for k in [3u16, 6] {
        let bytes = jpeg(k, false);
        let ops = r#"[{"op": "RandomResizedCrop", "size": 20}, {"op": "ToTensor"}]"#;
        let plain = pipeline(ops, "fused", false);
        // The stored pixels, as a PPM of the plain decode: what the plain pipeline sees.
        let stored = reference_image(&bytes, 1);
        for index in 0..4 {
            let (got, size) = run(&plain, &bytes, index);
            assert_eq!(size, (WIDTH, HEIGHT));
            assert_eq!(got, run(&plain, &stored, index).0);
        }
    }
}

#[test]
fn transposing_allocates_nothing_once_warm() {
    let corpus: Vec<(String, Vec<u8>)> = (1..=8u16)
        .map(|k| (format!("k{k}"), jpeg(k, k % 2 == 0)))
        .collect();
    for ops in SIZED {
        for execution in ["fused", "op_by_op"] {
            let with = pipeline(ops, execution, true);
            assert_eq!(
                steady_state_allocations(&with, &corpus, SEED, allocations),
                0,
                "{ops} {execution}: steady state allocated"
            );
        }
    }
}

#[test]
fn zune_decodes_whole_and_transposes_too() {
    // zune-jpeg has no region decode: the crop is taken from the whole transposed image.
    let ops = r#"[{"op": "RandomResizedCrop", "size": [20, 24]}, {"op": "ToTensor"}]"#;
    let json =
        |exif: bool| format!(r#"{{"ops": {ops}, "decoder": "zune", "exif_transpose": {exif}}}"#);
    let with = Pipeline::new(serde_json::from_str(&json(true)).expect("spec")).expect("plans");
    let plain = Pipeline::new(serde_json::from_str(&json(false)).expect("spec")).expect("plans");
    for k in 1..=8u16 {
        let bytes = jpeg(k, true);
        let reference = reference_image_with(&bytes, k, Decoder::Zune);
        for index in 0..4 {
            let (got, size) = run(&with, &bytes, index);
            let (want, want_size) = run(&plain, &reference, index);
            assert_eq!(size, want_size);
            assert!(got == want, "k={k} #{index}");
        }
    }
}
