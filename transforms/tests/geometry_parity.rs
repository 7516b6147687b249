//! torchvision parity of the geometric kernels: affine, rotate and perspective (NEAREST,
//! BILINEAR and BICUBIC bit-exact), vflip, pad and RandomCrop (bit-exact), Gaussian blur (within a level),
//! erase (bit-exact float32); and warm calls allocate nothing.
//!
//! Reads the corpus `scripts/fixtures_geometry.py` writes (`make fixtures`): sources, each case's
//! torchvision output and its parameters in `manifest.json`.

use std::path::PathBuf;

use ferroloader_transforms::augment::geometry::{
    erase, gaussian_kernel1d, inverse_affine_matrix, parse_fill, perspective, perspective_coeffs,
    perspective_warp, vflip, AffineWarp, Corners, EraseValue, GaussianBlur, Interpolation, Padder,
    Padding, PaddingMode, RandomCropSpec,
};
use ferroloader_transforms::{CropRect, RgbImage};
use serde_json::Value;

use crate::counting_alloc;
use counting_alloc::allocations;

use crate::rgb_corpus;

struct Corpus {
    dir: PathBuf,
    manifest: Value,
    images: Vec<(String, RgbImage)>,
}

impl Corpus {
    fn load() -> Corpus {
        let (dir, manifest): (_, Value) = rgb_corpus::manifest("geometry");
        let entries: Vec<rgb_corpus::ImageEntry> =
            serde_json::from_value(manifest["images"].clone()).expect("images");
        let images = rgb_corpus::sources(&dir, &entries);
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

    /// The cases of `op`.
    fn cases(&self, op: &str) -> Vec<&Value> {
        let cases: Vec<&Value> = self.manifest["cases"]
            .as_array()
            .expect("cases")
            .iter()
            .filter(|c| c["op"] == op)
            .collect();
        assert!(!cases.is_empty(), "no {op} cases in the manifest");
        cases
    }

    fn read(&self, file: &Value) -> Vec<u8> {
        std::fs::read(self.dir.join(file.as_str().expect("file name"))).expect("case readable")
    }

    fn source(&self, case: &Value) -> &RgbImage {
        self.image(case["image"].as_str().expect("image"))
    }
}

fn u32_of(v: &Value) -> u32 {
    u32::try_from(v.as_u64().expect("unsigned")).expect("fits u32")
}

fn f64_of(v: &Value) -> f64 {
    v.as_f64().expect("number")
}

/// A float64 from its bit pattern in hex (the fixtures write floats so: JSON readers need not
/// round-trip them exactly).
fn from_hex(v: &Value) -> f64 {
    let bits = u64::from_str_radix(v.as_str().expect("hex string"), 16).expect("hex parses");
    f64::from_bits(bits)
}

/// The exact float parameter `key` of a case.
fn exact(case: &Value, key: &str) -> f64 {
    from_hex(&case["hex"][key])
}

/// The exact float pair `key` of a case.
fn exact_pair(case: &Value, key: &str) -> [f64; 2] {
    let v = &case["hex"][key];
    [from_hex(&v[0]), from_hex(&v[1])]
}

/// The case's `fill` as torchvision received it (null, a number or a list), through
/// [`parse_fill`], checked against the triple the fixture script wrote.
fn fill_of(case: &Value) -> [u8; 3] {
    let f = &case["fill"];
    let values: Option<Vec<f64>> = if f.is_null() {
        None
    } else if let Some(list) = f.as_array() {
        Some(list.iter().map(f64_of).collect())
    } else {
        Some(vec![f64_of(f)])
    };
    let fill = parse_fill(values.as_deref()).expect("fill parses");
    let written = &case["fill_rgb"];
    let written = [0, 1, 2].map(|i| written[i].as_u64().expect("fill_rgb"));
    assert_eq!(fill.map(u64::from), written, "fill {f}");
    fill
}

fn interp_of(case: &Value) -> Interpolation {
    match case["interp"].as_str() {
        Some("nearest") => Interpolation::Nearest,
        Some("bilinear") => Interpolation::Bilinear,
        Some("bicubic") => Interpolation::Bicubic,
        other => panic!("unknown interpolation {other:?}"),
    }
}

fn padding_of(v: &Value) -> Padding {
    if let Some(p) = v.as_u64() {
        return Padding::all(u32::try_from(p).expect("fits"));
    }
    let p: Vec<u32> = v.as_array().expect("padding").iter().map(u32_of).collect();
    match p[..] {
        [a] => Padding::all(a),
        [lr, tb] => Padding::lr_tb(lr, tb),
        [l, t, r, b] => Padding::ltrb(l, t, r, b),
        _ => panic!("bad padding {v}"),
    }
}

fn mode_of(v: &Value) -> PaddingMode {
    match v.as_str() {
        Some("constant") => PaddingMode::Constant,
        Some("edge") => PaddingMode::Edge,
        Some("reflect") => PaddingMode::Reflect,
        Some("symmetric") => PaddingMode::Symmetric,
        other => panic!("unknown padding mode {other:?}"),
    }
}

/// Pixels (RGB triples) that differ, the largest byte difference, and the first differing pixel.
fn compare(ours: &[u8], theirs: &[u8], width: u32) -> (usize, u8, Option<(usize, usize)>) {
    assert_eq!(ours.len(), theirs.len(), "output sizes differ");
    let mut pixels = 0;
    let mut max = 0;
    let mut first = None;
    for (i, (a, b)) in ours.chunks_exact(3).zip(theirs.chunks_exact(3)).enumerate() {
        if a != b {
            pixels += 1;
            first.get_or_insert((i % width as usize, i / width as usize));
            for (x, y) in a.iter().zip(b) {
                max = max.max(x.abs_diff(*y));
            }
        }
    }
    (pixels, max, first)
}

/// Runs one affine or rotate case.
fn run_geometry(warp: &mut AffineWarp, src: &RgbImage, c: &Value, out: &mut RgbImage) {
    let (interp, fill) = (interp_of(c), fill_of(c));
    let center = (!c["center"].is_null()).then(|| exact_pair(c, "center"));
    let result = match c["op"].as_str() {
        Some("rotate") => warp.rotate(
            src.view(),
            exact(c, "angle"),
            center,
            c["expand"].as_bool().unwrap_or(false),
            interp,
            fill,
            out,
        ),
        Some("affine") => warp.affine(
            src.view(),
            exact(c, "angle"),
            exact_pair(c, "translate"),
            exact(c, "scale"),
            exact_pair(c, "shear"),
            center,
            interp,
            fill,
            out,
        ),
        other => panic!("not a geometry op: {other:?}"),
    };
    result.unwrap_or_else(|e| panic!("{}: {e}", c["why"]));
}

#[test]
fn inverse_affine_matrix_is_torchvisions_to_the_bit() {
    let corpus = Corpus::load();
    for c in corpus.cases("affine") {
        let src = corpus.source(c);
        let center = if c["center"].is_null() {
            [f64::from(src.width()) * 0.5, f64::from(src.height()) * 0.5]
        } else {
            exact_pair(c, "center")
        };
        let ours = inverse_affine_matrix(
            center,
            exact(c, "angle"),
            exact_pair(c, "translate"),
            exact(c, "scale"),
            exact_pair(c, "shear"),
        );
        let theirs: Vec<f64> = c["matrix"]
            .as_array()
            .expect("matrix")
            .iter()
            .map(from_hex)
            .collect();
        for (k, (a, b)) in ours.iter().zip(&theirs).enumerate() {
            assert_eq!(
                a.to_bits(),
                b.to_bits(),
                "{} on {}: matrix[{k}] ours {a:e} torchvision {b:e}",
                c["why"],
                c["image"]
            );
        }
    }
}

#[test]
fn affine_and_rotate_match_torchvision() {
    let corpus = Corpus::load();
    let mut warp = AffineWarp::new();
    let mut out = RgbImage::new();
    let mut failures = Vec::new();
    let (mut bilinear_cases, mut bilinear_px, mut total_px) = (0, 0, 0);
    let mut bicubic = std::collections::BTreeSet::new();
    for op in ["affine", "rotate"] {
        for c in corpus.cases(op) {
            let src = corpus.source(c);
            if interp_of(c) == Interpolation::Bicubic {
                // What each BICUBIC case exercises, to check the corpus covers them all.
                let nonzero = |key: &str| exact_pair(c, key) != [0.0, 0.0];
                let kinds = [
                    ("rotate", op == "rotate" || exact(c, "angle") != 0.0),
                    ("shear", op == "affine" && nonzero("shear")),
                    ("translate", op == "affine" && nonzero("translate")),
                    ("scale", op == "affine" && exact(c, "scale") != 1.0),
                    ("fill", !c["fill"].is_null() && c["fill"] != 0),
                    ("224x224", c["image"] == "sq_224x224"),
                ];
                bicubic.extend(kinds.iter().filter(|k| k.1).map(|k| k.0));
            }
            run_geometry(&mut warp, src, c, &mut out);
            assert_eq!(
                (out.width(), out.height()),
                (u32_of(&c["out_w"]), u32_of(&c["out_h"])),
                "{op} {} on {}: output size",
                c["why"],
                c["image"]
            );
            let theirs = corpus.read(&c["file"]);
            let (px, max, first) = compare(out.as_raw(), &theirs, out.width());
            if interp_of(c) == Interpolation::Bilinear {
                bilinear_cases += 1;
                bilinear_px += px;
                total_px += (out.width() * out.height()) as usize;
            }
            // BILINEAR and BICUBIC too: the kernels repeat Pillow's double arithmetic
            // operation for operation, so any difference is a bug, not rounding.
            if px > 0 {
                failures.push(format!(
                    "{op} {} on {}: {px} pixels differ (max {max}), first at {first:?}",
                    c["why"], c["image"]
                ));
            }
        }
    }
    eprintln!("bilinear: {bilinear_px} of {total_px} pixels differ over {bilinear_cases} cases");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let want = ["rotate", "shear", "translate", "scale", "fill", "224x224"];
    assert!(
        want.iter().all(|k| bicubic.contains(k)),
        "BICUBIC cases cover only {bicubic:?}"
    );
}

fn corners_of(v: &Value) -> Corners {
    let pt = |i: usize| {
        let p = &v[i];
        [p[0].as_f64().expect("x"), p[1].as_f64().expect("y")]
    };
    [pt(0), pt(1), pt(2), pt(3)]
}

/// The coefficients the fixture script solved (float32 values, as float64 bit patterns).
fn coeffs_of(case: &Value) -> [f64; 8] {
    let list = case["coeffs"].as_array().expect("coeffs");
    assert_eq!(list.len(), 8, "{}", case["why"]);
    std::array::from_fn(|i| from_hex(&list[i]))
}

#[test]
fn perspective_coefficients_are_the_fixtures_to_the_bit() {
    // The fixture script solves torchvision's system with the same elimination (torchvision's
    // MKL QR differs only in the noise of zero coefficients: test_fixture_drift.py bounds it).
    let corpus = Corpus::load();
    let cases = corpus.cases("perspective");
    assert!(cases.len() >= 20, "{} perspective cases", cases.len());
    for c in cases {
        let ours = perspective_coeffs(&corners_of(&c["startpoints"]), &corners_of(&c["endpoints"]))
            .expect("finite corners");
        let theirs = coeffs_of(c);
        for (k, (a, b)) in ours.iter().zip(&theirs).enumerate() {
            assert_eq!(
                a.to_bits(),
                b.to_bits(),
                "{} on {}: coefficient {k} ours {a:e} fixture {b:e}",
                c["why"],
                c["image"]
            );
        }
    }
}

#[test]
fn perspective_matches_torchvision() {
    let corpus = Corpus::load();
    let mut out = RgbImage::new();
    let mut failures = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for c in corpus.cases("perspective") {
        let src = corpus.source(c);
        let (interp, fill) = (interp_of(c), fill_of(c));
        seen.insert((
            c["interp"].as_str().unwrap_or("").to_owned(),
            c["image"].to_string(),
        ));
        let theirs = corpus.read(&c["file"]);
        // Pillow's transform alone, from the fixture's coefficients ...
        perspective_warp(
            src.view(),
            (src.width(), src.height()),
            &coeffs_of(c),
            interp,
            fill,
            &mut out,
        )
        .unwrap_or_else(|e| panic!("{}: {e}", c["why"]));
        let (px, max, first) = compare(out.as_raw(), &theirs, out.width());
        if px > 0 {
            failures.push(format!(
                "warp {} on {}: {px} pixels differ (max {max}), first at {first:?}",
                c["why"], c["image"]
            ));
        }
        // ... and the whole F.perspective from the corners.
        perspective(
            src.view(),
            &corners_of(&c["startpoints"]),
            &corners_of(&c["endpoints"]),
            interp,
            fill,
            &mut out,
        )
        .unwrap_or_else(|e| panic!("{}: {e}", c["why"]));
        let (px, max, first) = compare(out.as_raw(), &theirs, out.width());
        if px > 0 {
            failures.push(format!(
                "F.perspective {} on {}: {px} pixels differ (max {max}), first at {first:?}",
                c["why"], c["image"]
            ));
        }
    }
    // Every filter on a non-square image, and on the 224x224 one.
    for (interp, image) in [
        ("nearest", "\"odd_37x23\""),
        ("bilinear", "\"odd_37x23\""),
        ("nearest", "\"wide_300x200\""),
        ("bilinear", "\"wide_300x200\""),
        ("bilinear", "\"sq_224x224\""),
        ("bicubic", "\"odd_37x23\""),
        ("bicubic", "\"wide_300x200\""),
        ("bicubic", "\"sq_224x224\""),
    ] {
        assert!(
            seen.contains(&(interp.to_owned(), image.to_owned())),
            "no {interp} case on {image}"
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn vflip_matches_pillow() {
    let corpus = Corpus::load();
    for c in corpus.cases("vflip") {
        let mut img = corpus.source(c).clone();
        vflip(&mut img);
        let theirs = corpus.read(&c["file"]);
        assert!(img.as_raw() == &theirs[..], "vflip on {}", c["image"]);
    }
}

#[test]
fn pad_matches_torchvision() {
    let corpus = Corpus::load();
    let mut padder = Padder::new();
    let mut out = RgbImage::new();
    let mut failures = Vec::new();
    for c in corpus.cases("pad") {
        let src = corpus.source(c);
        let padding = padding_of(&c["padding"]);
        padder
            .pad(
                src.view(),
                padding,
                mode_of(&c["mode"]),
                fill_of(c),
                &mut out,
            )
            .unwrap_or_else(|e| panic!("{}: {e}", c["why"]));
        assert_eq!(
            (out.width(), out.height()),
            (u32_of(&c["out_w"]), u32_of(&c["out_h"])),
            "{} on {}",
            c["why"],
            c["image"]
        );
        let (px, max, first) = compare(out.as_raw(), &corpus.read(&c["file"]), out.width());
        if px > 0 {
            failures.push(format!(
                "{} on {}: {px} pixels differ (max {max}), first at {first:?}",
                c["why"], c["image"]
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn random_crop_matches_torchvision() {
    random_crop_cases("random_crop");
}

#[test]
fn random_crop_matches_torchvision_v2() {
    random_crop_cases("random_crop_v2");
}

/// RandomCrop cases of `op`: v1 (`random_crop`, padded twice) or v2 (`random_crop_v2`, padded
/// once by the sum).
fn random_crop_cases(op: &str) {
    let corpus = Corpus::load();
    let mut padder = Padder::new();
    let mut out = RgbImage::new();
    let mut failures = Vec::new();
    for c in corpus.cases(op) {
        let src = corpus.source(c);
        let mut spec = RandomCropSpec {
            height: u32_of(&c["size"][0]),
            width: u32_of(&c["size"][1]),
            padding: (!c["padding"].is_null()).then(|| padding_of(&c["padding"])),
            pad_if_needed: c["pad_if_needed"].as_bool().expect("bool"),
            fill: fill_of(c),
            mode: mode_of(&c["mode"]),
        };
        let (pw, ph) = spec
            .padded_size(src.width(), src.height())
            .expect("padded size");
        if op == "random_crop_v2" {
            spec = spec
                .v2_single_padding(src.width(), src.height())
                .expect("padding fits");
            assert_eq!(
                spec.padded_size(src.width(), src.height()).ok(),
                Some((pw, ph))
            );
        }
        assert!(pw >= spec.width && ph >= spec.height, "{}", c["why"]);
        padder
            .random_crop(
                src.view(),
                &spec,
                u32_of(&c["top"]),
                u32_of(&c["left"]),
                &mut out,
            )
            .unwrap_or_else(|e| panic!("{}: {e}", c["why"]));
        let (px, max, first) = compare(out.as_raw(), &corpus.read(&c["file"]), out.width());
        if px > 0 {
            failures.push(format!(
                "{} on {}: {px} pixels differ (max {max}), first at {first:?}",
                c["why"], c["image"]
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn gaussian_kernels_match_torch() {
    let corpus = Corpus::load();
    let mut k = Vec::new();
    let mut inexact = 0;
    for entry in corpus.manifest["kernels"].as_array().expect("kernels") {
        let (size, sigma) = (u32_of(&entry["size"]), from_hex(&entry["sigma"]));
        gaussian_kernel1d(size, sigma, &mut k);
        let theirs: Vec<f32> = entry["bits"]
            .as_array()
            .expect("bits")
            .iter()
            .map(|b| f32::from_bits(u32::try_from(b.as_u64().expect("bits")).expect("u32")))
            .collect();
        assert_eq!(k.len(), theirs.len());
        for (i, (a, b)) in k.iter().zip(&theirs).enumerate() {
            let ulps = a.to_bits().abs_diff(b.to_bits());
            inexact += usize::from(ulps > 0);
            assert!(
                ulps <= 2,
                "kernel size {size} sigma {sigma}: [{i}] ours {a:e} torch {b:e} ({ulps} ulps)"
            );
        }
    }
    eprintln!("gaussian kernels: {inexact} taps differ from torch's by an ulp or two");
}

#[test]
fn gaussian_blur_within_one_level() {
    let corpus = Corpus::load();
    let mut blur = GaussianBlur::new();
    let mut failures = Vec::new();
    let (mut diff_px, mut total_px) = (0, 0);
    for c in corpus.cases("blur") {
        let mut img = corpus.source(c).clone();
        let kernel = [u32_of(&c["kernel"][0]), u32_of(&c["kernel"][1])];
        blur.apply(&mut img, kernel, exact_pair(c, "sigma"))
            .unwrap_or_else(|e| panic!("{}: {e}", c["why"]));
        let (px, max, first) = compare(img.as_raw(), &corpus.read(&c["file"]), img.width());
        diff_px += px;
        total_px += (img.width() * img.height()) as usize;
        if max > 1 {
            failures.push(format!(
                "{} on {}: {px} pixels differ (max {max}), first at {first:?}",
                c["why"], c["image"]
            ));
        }
    }
    eprintln!("gaussian blur: {diff_px} of {total_px} pixels differ by one level");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn erase_matches_torchvision() {
    let corpus = Corpus::load();
    for c in corpus.cases("erase") {
        let src = corpus.source(c);
        let (h, w) = (src.height() as usize, src.width() as usize);
        let name = c["image"].as_str().expect("image");
        let floats = |bytes: Vec<u8>| -> Vec<f32> {
            bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect()
        };
        let mut slot = floats(corpus.read(&Value::from(format!("tensor_{name}.bin"))));
        let rect = CropRect {
            top: u32_of(&c["rect"][0]),
            left: u32_of(&c["rect"][1]),
            height: u32_of(&c["rect"][2]),
            width: u32_of(&c["rect"][3]),
        };
        let values: Vec<f32>;
        let value = if c["value"] == "random" {
            values = floats(corpus.read(&c["source_file"]));
            EraseValue::Source(&values)
        } else {
            values = c["value"]
                .as_array()
                .expect("values")
                .iter()
                .map(|v| f64_of(v) as f32)
                .collect();
            EraseValue::PerChannel(&values)
        };
        erase(&mut slot, 3, h, w, rect, value).unwrap_or_else(|e| panic!("{}: {e}", c["why"]));
        let theirs = floats(corpus.read(&c["file"]));
        let bad = slot
            .iter()
            .zip(&theirs)
            .position(|(a, b)| a.to_bits() != b.to_bits());
        assert_eq!(bad, None, "{} on {name}: first differing float", c["why"]);
    }
}

#[test]
fn warm_calls_allocate_nothing() {
    let corpus = Corpus::load();
    let big = corpus.image("sq_224x224");
    let small = corpus.image("odd_37x23");
    let mut warp = AffineWarp::new();
    let mut padder = Padder::new();
    let mut blur = GaussianBlur::new();
    let mut out = RgbImage::new();
    let mut work = RgbImage::new();
    let crop = RandomCropSpec {
        height: 240,
        width: 240,
        padding: Some(Padding::all(4)),
        pad_if_needed: true,
        fill: [1, 2, 3],
        mode: PaddingMode::Reflect,
    };
    let mut slot = vec![0.5f32; 3 * 224 * 224];
    let noise = vec![0.25f32; 3 * 20 * 30];
    let rect = CropRect {
        top: 10,
        left: 7,
        height: 20,
        width: 30,
    };
    let mut run = |img: &RgbImage| {
        for interp in [
            Interpolation::Nearest,
            Interpolation::Bilinear,
            Interpolation::Bicubic,
        ] {
            warp.affine(
                img.view(),
                17.0,
                [3.0, -2.0],
                1.1,
                [5.0, 1.0],
                None,
                interp,
                [9, 9, 9],
                &mut out,
            )
            .expect("affine");
            warp.rotate(img.view(), 30.0, None, false, interp, [0; 3], &mut out)
                .expect("rotate");
            warp.rotate(img.view(), 30.0, None, true, interp, [0; 3], &mut work)
                .expect("rotate");
            let end = [[3.0, 2.0], [30.0, 1.0], [33.0, 20.0], [1.0, 18.0]];
            let start = [[0.0, 0.0], [36.0, 0.0], [36.0, 22.0], [0.0, 22.0]];
            perspective(img.view(), &start, &end, interp, [4, 5, 6], &mut out)
                .expect("perspective");
            warp.affine(
                img.view(),
                0.0,
                [7.0, 0.0],
                1.0,
                [0.0, 0.0],
                None,
                interp,
                [0; 3],
                &mut out,
            )
            .expect("translate");
        }
        padder
            .pad(
                img.view(),
                Padding::ltrb(1, 2, 3, 4),
                PaddingMode::Symmetric,
                [0; 3],
                &mut out,
            )
            .expect("pad");
        padder
            .random_crop(img.view(), &crop, 3, 5, &mut out)
            .expect("crop");
        img.view().to_image(&mut work);
        vflip(&mut work);
        blur.apply(&mut work, [9, 9], [1.5, 1.5]).expect("blur");
        blur.apply(&mut work, [5, 3], [0.7, 2.5]).expect("blur");
        erase(
            &mut slot,
            3,
            224,
            224,
            rect,
            EraseValue::PerChannel(&[0.0, 1.0, 2.0]),
        )
        .expect("erase");
        erase(&mut slot, 3, 224, 224, rect, EraseValue::Source(&noise)).expect("erase");
    };
    run(big);
    let before = allocations();
    run(big);
    run(small);
    run(big);
    assert_eq!(allocations() - before, 0, "warm geometry calls allocated");
}
