//! Decode parity against Pillow on the corpus `scripts/fixtures_decode.py` writes.
//!
//! Fixtures: `$FERROLOADER_FIXTURES/decode` or `<workspace>/target/fixtures/decode`
//! (`make fixtures`). Every figure that is a bound rather than an equality (zune-jpeg, DCT-scaled
//! decodes) is printed; run with `--nocapture` to see them.

use std::collections::BTreeMap;
use std::path::PathBuf;

use ferroloader_transforms::decode::{
    DecodeContext, DecodeOptions, Decoder, Format, DEFAULT_MAX_PIXELS,
};
use ferroloader_transforms::{CropRect, Error, RgbImage, RgbView};
use serde_json::Value;

/// zune-jpeg 0.4 vs Pillow (libjpeg-turbo ISLOW + fancy upsampling), measured on this corpus
/// (the test prints the table): away from the right and bottom edges zune is within 5 levels
/// (IDCT and upsampling rounding). In the last two columns/rows of an image whose chroma is
/// subsampled, zune's upsampler reads the MCU padding where libjpeg replicates the edge sample,
/// which costs up to ~50 levels on a narrow image (51 on the 16-pixel-wide fixture). Over the
/// corpus the mean is about 0.025 levels.
const ZUNE_INTERIOR_MAX_ABS_DIFF: u8 = 5;
const ZUNE_EDGE_MAX_ABS_DIFF: u8 = 64;
const ZUNE_MEAN_ABS_DIFF: f64 = 0.05;

/// DCT-scaled region vs full decode + box downscale by the same factor (what Pillow's
/// `reduce()` computes), per scale, mean absolute difference in levels over all samples.
/// Measured on this corpus: 0.24 (1/2), 0.18 (1/4), 0.17 (1/8); single samples at sharp
/// edges differ by up to ~90, which is why this mode is opt-in.
const SCALED_MEAN_ABS_DIFF: [(u8, f64); 3] = [(2, 0.5), (4, 0.5), (8, 0.5)];

// ---------------------------------------------------------------------------------------------
// Corpus
// ---------------------------------------------------------------------------------------------

use crate::fixtures;

fn fixture_dir() -> PathBuf {
    fixtures::fixture_dir("decode", "make fixtures")
}

struct Entry {
    name: String,
    file: String,
    format: String,
    width: u32,
    height: u32,
    reference: String,
    hashed: bool,
    meta: Value,
}

struct BadEntry {
    name: String,
    file: String,
    expect: String,
    pillow: String,
}

struct Corpus {
    dir: PathBuf,
    images: Vec<Entry>,
    bad: Vec<BadEntry>,
}

fn text(v: &Value, key: &str) -> String {
    v[key]
        .as_str()
        .unwrap_or_else(|| panic!("manifest: missing `{key}` in {v}"))
        .to_string()
}

fn corpus() -> Corpus {
    let dir = fixture_dir();
    let manifest: Value = serde_json::from_slice(
        &std::fs::read(dir.join("manifest.json")).expect("read manifest.json"),
    )
    .expect("manifest.json is JSON");
    let images = manifest["images"]
        .as_array()
        .expect("images list")
        .iter()
        .map(|v| Entry {
            name: text(v, "name"),
            file: text(v, "file"),
            format: text(v, "format"),
            width: v["width"].as_u64().expect("width") as u32,
            height: v["height"].as_u64().expect("height") as u32,
            reference: text(v, "reference"),
            hashed: text(v, "reference_kind") == "row_fnv1a64",
            meta: v.clone(),
        })
        .collect();
    let bad = manifest["bad"]
        .as_array()
        .expect("bad list")
        .iter()
        .map(|v| BadEntry {
            name: text(v, "name"),
            file: text(v, "file"),
            expect: text(v, "expect"),
            pillow: text(v, "pillow"),
        })
        .collect();
    Corpus { dir, images, bad }
}

impl Corpus {
    fn bytes(&self, file: &str) -> Vec<u8> {
        std::fs::read(self.dir.join(file)).unwrap_or_else(|e| panic!("read {file}: {e}"))
    }

    fn jpegs(&self) -> impl Iterator<Item = &Entry> {
        self.images.iter().filter(|e| e.format == "jpeg")
    }

    fn entry(&self, name: &str) -> &Entry {
        self.images
            .iter()
            .find(|e| e.name == name)
            .unwrap_or_else(|| panic!("fixture {name} missing from the manifest"))
    }
}

impl Entry {
    fn is_corrupt(&self) -> bool {
        self.meta["corrupt"].as_bool().unwrap_or(false)
    }
}

fn context(decoder: Decoder) -> DecodeContext {
    DecodeContext::new(DecodeOptions::default().decoder(decoder)).expect("decode context")
}

// ---------------------------------------------------------------------------------------------
// Comparisons
// ---------------------------------------------------------------------------------------------

fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Exact comparison with Pillow's reference; `Err` describes the first difference.
fn compare_with_reference(corpus: &Corpus, e: &Entry, ours: &RgbImage) -> Result<(), String> {
    if (ours.width(), ours.height()) != (e.width, e.height) {
        return Err(format!(
            "size {}x{}, Pillow {}x{}",
            ours.width(),
            ours.height(),
            e.width,
            e.height
        ));
    }
    let reference = corpus.bytes(&e.reference);
    let row = 3 * e.width as usize;
    if e.hashed {
        for (y, (ours_row, want)) in ours
            .as_raw()
            .chunks_exact(row)
            .zip(reference.chunks_exact(8))
            .enumerate()
        {
            let want = u64::from_le_bytes(want.try_into().expect("8 bytes"));
            if fnv1a64(ours_row) != want {
                return Err(format!("row {y} differs (row hash)"));
            }
        }
        return Ok(());
    }
    let stats = diff(ours.view(), reference_view(&reference, e));
    if stats.max == 0 {
        Ok(())
    } else {
        Err(stats.describe())
    }
}

fn reference_view<'a>(reference: &'a [u8], e: &Entry) -> RgbView<'a> {
    RgbView::new(reference, e.width, e.height, 3 * e.width as usize).expect("reference size")
}

#[derive(Default, Clone, Copy)]
struct DiffStats {
    max: u8,
    sum: u64,
    count: u64,
    differing: u64,
    first: Option<(u32, u32, usize, u8, u8)>,
}

impl DiffStats {
    fn mean(&self) -> f64 {
        self.sum as f64 / self.count.max(1) as f64
    }

    fn describe(&self) -> String {
        let first = self
            .first
            .map(|(x, y, c, a, b)| format!("; first at x={x} y={y} channel {c}: {a} vs {b}"))
            .unwrap_or_default();
        format!(
            "{} of {} samples differ, max {}, mean {:.4}{first}",
            self.differing,
            self.count,
            self.max,
            self.mean()
        )
    }

    fn merge(&mut self, o: &DiffStats) {
        self.max = self.max.max(o.max);
        self.sum += o.sum;
        self.count += o.count;
        self.differing += o.differing;
    }
}

fn diff(a: RgbView<'_>, b: RgbView<'_>) -> DiffStats {
    assert_eq!((a.width(), a.height()), (b.width(), b.height()), "sizes");
    let mut s = DiffStats::default();
    for y in 0..a.height() {
        for (i, (&p, &q)) in a.row(y).iter().zip(b.row(y)).enumerate() {
            let d = p.abs_diff(q);
            s.count += 1;
            s.sum += u64::from(d);
            if d != 0 {
                s.differing += 1;
                s.max = s.max.max(d);
                if s.first.is_none() {
                    s.first = Some(((i / 3) as u32, y, i % 3, p, q));
                }
            }
        }
    }
    s
}

/// Pillow's `Image.reduce(d)`: the mean of each d x d box, rounded half up; partial boxes at
/// the right/bottom edges average what they have.
fn box_reduce(src: RgbView<'_>, d: u32) -> RgbImage {
    let (w, h) = (src.width().div_ceil(d), src.height().div_ceil(d));
    let mut data = vec![0u8; 3 * w as usize * h as usize];
    for oy in 0..h {
        for ox in 0..w {
            for c in 0..3 {
                let (mut sum, mut n) = (0u32, 0u32);
                for y in oy * d..((oy + 1) * d).min(src.height()) {
                    let row = src.row(y);
                    for x in ox * d..((ox + 1) * d).min(src.width()) {
                        sum += u32::from(row[3 * x as usize + c]);
                        n += 1;
                    }
                }
                data[3 * (oy * w + ox) as usize + c] = ((sum + n / 2) / n) as u8;
            }
        }
    }
    RgbImage::from_raw(w, h, data).expect("sizes")
}

/// A small deterministic generator (xorshift64*), so rectangles are the same on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u32) -> u32 {
        (self.next() % u64::from(n.max(1))) as u32
    }
}

/// Rectangles that stress region decoding: full, corners, edges, single pixels, rows and
/// columns, iMCU boundaries +-1, and random ones.
fn rects(w: u32, h: u32, random: usize, seed: u64) -> Vec<CropRect> {
    let r = |top, left, height, width| CropRect {
        top,
        left,
        height,
        width,
    };
    let mut v = vec![
        CropRect::full(w, h),
        r(0, 0, 1, 1),
        r(0, w - 1, 1, 1),
        r(h - 1, 0, 1, 1),
        r(h - 1, w - 1, 1, 1),
        r(0, 0, 1, w),
        r(h - 1, 0, 1, w),
        r(0, 0, h, 1),
        r(0, w - 1, h, 1),
        r(h / 2, w / 2, 1, 1),
        r(h / 4, w / 4, (h / 2).max(1), (w / 2).max(1)),
    ];
    for b in [7u32, 8, 9, 15, 16, 17, 31, 32, 33] {
        if b < w && b < h {
            v.push(r(b, b, (h - b).min(5), (w - b).min(5)));
            v.push(r(b, b, h - b, w - b));
            v.push(r(0, 0, b, b));
        }
    }
    let mut rng = Rng(seed | 1);
    for _ in 0..random {
        let height = 1 + rng.below(h);
        let width = 1 + rng.below(w);
        v.push(r(
            rng.below(h - height + 1),
            rng.below(w - width + 1),
            height,
            width,
        ));
    }
    v
}

fn error_kind(e: &Error) -> &'static str {
    match e {
        Error::UnknownFormat { .. } => "unknown_format",
        Error::Truncated { .. } => "truncated",
        Error::Corrupt { .. } => "corrupt",
        Error::Unsupported { .. } => "unsupported",
        Error::TooLarge { .. } => "too_large",
        Error::InvalidArgument { .. } => "invalid_argument",
        _ => "other",
    }
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

#[test]
fn context_is_send() {
    fn assert_send<T: Send>() {}
    assert_send::<DecodeContext>();
    assert_eq!(DecodeOptions::default().max_pixels, DEFAULT_MAX_PIXELS);
}

#[test]
fn turbo_full_decode_equals_pillow_for_every_jpeg() {
    let corpus = corpus();
    let mut ctx = context(Decoder::Turbo);
    let mut out = RgbImage::new();
    let mut failures = Vec::new();
    let mut n = 0;
    for e in corpus.jpegs() {
        n += 1;
        let bytes = corpus.bytes(&e.file);
        let result = ctx
            .decode(&bytes, &mut out)
            .map_err(|err| format!("error: {err}"))
            .and_then(|info| {
                assert_eq!(info.format, Format::Jpeg);
                compare_with_reference(&corpus, e, &out)
            });
        if let Err(why) = result {
            failures.push(format!("{}: {why}", e.name));
        }
    }
    assert!(n >= 30, "only {n} JPEG fixtures");
    assert!(
        failures.is_empty(),
        "Turbo differs from Pillow:\n{}",
        failures.join("\n")
    );
}

#[test]
fn other_formats_equal_pillow() {
    let corpus = corpus();
    let mut failures = Vec::new();
    let mut seen = BTreeMap::<String, usize>::new();
    // The decoder choice only affects JPEG; run both to prove it.
    for decoder in [Decoder::Turbo, Decoder::Zune] {
        let mut ctx = context(decoder);
        let mut out = RgbImage::new();
        for e in corpus.images.iter().filter(|e| e.format != "jpeg") {
            *seen.entry(e.format.clone()).or_default() += 1;
            let bytes = corpus.bytes(&e.file);
            let result = ctx
                .decode(&bytes, &mut out)
                .map_err(|err| format!("error: {err}"))
                .and_then(|_| compare_with_reference(&corpus, e, &out));
            if let Err(why) = result {
                failures.push(format!("{} ({decoder:?}): {why}", e.name));
            }
        }
    }
    for format in ["png", "bmp", "gif", "tiff", "pnm"] {
        assert!(seen.contains_key(format), "no {format} fixtures");
    }
    assert!(
        failures.is_empty(),
        "differs from Pillow:\n{}",
        failures.join("\n")
    );
}

#[test]
fn every_pnm_subtype_equals_pillow() {
    // Binary P4/P5/P6 as Pillow writes them and hand-written plain P1/P2/P3: bit-exact with
    // Pillow's `convert("RGB")`, a PBM's 1 being black.
    let corpus = corpus();
    let mut ctx = context(Decoder::Turbo);
    let mut out = RgbImage::new();
    let mut magics = std::collections::BTreeSet::new();
    let mut failures = Vec::new();
    for e in corpus.images.iter().filter(|e| e.format == "pnm") {
        let bytes = corpus.bytes(&e.file);
        magics.insert(String::from_utf8_lossy(&bytes[..2]).into_owned());
        let result = ctx
            .decode(&bytes, &mut out)
            .map_err(|err| format!("error: {err}"))
            .and_then(|info| {
                assert_eq!(info.format, Format::Pnm, "{}", e.name);
                compare_with_reference(&corpus, e, &out)
            });
        if let Err(why) = result {
            failures.push(format!("{}: {why}", e.name));
        }
    }
    assert_eq!(
        magics.into_iter().collect::<Vec<_>>(),
        ["P1", "P2", "P3", "P4", "P5", "P6"],
        "a PNM subtype has no fixture"
    );
    assert!(
        failures.is_empty(),
        "PNM differs from Pillow:\n{}",
        failures.join("\n")
    );
}

#[test]
fn pnm_maxval_other_than_255_is_unsupported_by_every_entry_point() {
    // Pillow rescales such samples; decoding them raw would be silently wrong.
    let corpus = corpus();
    let mut checked = 0;
    for b in corpus.bad.iter().filter(|b| b.name.contains("maxval")) {
        let bytes = corpus.bytes(&b.file);
        let mut ctx = context(Decoder::Turbo);
        let mut out = RgbImage::new();
        for result in [
            ctx.info(&bytes).map(|_| ()),
            ctx.decode(&bytes, &mut out).map(|_| ()),
        ] {
            match result {
                Err(Error::Unsupported { format, detail }) => {
                    assert_eq!(format, "pnm");
                    assert!(detail.contains("maxval"), "{}: {detail}", b.name);
                }
                other => panic!("{}: expected Unsupported, got {other:?}", b.name),
            }
        }
        assert_eq!(out.as_raw().len(), 0, "{}: nothing decoded", b.name);
        checked += 1;
    }
    assert!(checked >= 3, "only {checked} maxval fixtures");
}

#[test]
fn info_reads_size_and_format_for_every_image() {
    let corpus = corpus();
    for decoder in [Decoder::Turbo, Decoder::Zune] {
        let mut ctx = context(decoder);
        for e in &corpus.images {
            let info = ctx
                .info(&corpus.bytes(&e.file))
                .unwrap_or_else(|err| panic!("{}: {err}", e.name));
            assert_eq!((info.width, info.height), (e.width, e.height), "{}", e.name);
            let want = match e.format.as_str() {
                "jpeg" => Format::Jpeg,
                "png" => Format::Png,
                "bmp" => Format::Bmp,
                "gif" => Format::Gif,
                "webp" => Format::WebP,
                "tiff" => Format::Tiff,
                "pnm" => Format::Pnm,
                other => panic!("unknown format {other}"),
            };
            assert_eq!(info.format, want, "{}", e.name);
            assert_eq!(info.format.name(), e.format);
        }
    }
}

#[test]
fn turbo_region_equals_full_decode_cropped() {
    let corpus = corpus();
    let mut ctx = context(Decoder::Turbo);
    let mut full = RgbImage::new();
    let mut out = RgbImage::new();
    let mut failures = Vec::new();
    let mut checked = 0usize;
    let mut decoded_px = 0u64;
    let mut full_px = 0u64;
    for (i, e) in corpus.jpegs().enumerate() {
        let bytes = corpus.bytes(&e.file);
        ctx.decode(&bytes, &mut full).expect("full decode");
        let huge = u64::from(e.width) * u64::from(e.height) > 4_000_000;
        for rect in rects(e.width, e.height, if huge { 3 } else { 40 }, 7 + i as u64) {
            if huge && rect.width * rect.height > 1_000_000 {
                continue;
            }
            let inner = match ctx.decode_region(&bytes, rect, &mut out) {
                Ok(inner) => inner,
                Err(err) => {
                    failures.push(format!("{} {rect:?}: {err}", e.name));
                    continue;
                }
            };
            checked += 1;
            decoded_px += u64::from(out.width()) * u64::from(out.height());
            full_px += u64::from(e.width) * u64::from(e.height);
            assert_eq!((inner.height, inner.width), (rect.height, rect.width));
            let got = out.crop_view(inner).expect("inner rect fits in the output");
            let want = full.crop_view(rect).expect("rect fits");
            let stats = diff(got, want);
            if stats.max != 0 {
                failures.push(format!(
                    "{} {rect:?} (decoded {}x{}, inner {inner:?}): {}",
                    e.name,
                    out.width(),
                    out.height(),
                    stats.describe()
                ));
            }
        }
    }
    println!(
        "region decode: {checked} rectangles exact; decoded {:.1}% of the pixels a full decode would",
        100.0 * decoded_px as f64 / full_px as f64
    );
    assert!(checked > 1000, "only {checked} rectangles checked");
    assert!(
        failures.is_empty(),
        "{} region decodes differ from the full decode:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn region_decode_crops_only_what_it_must() {
    // A small rectangle in a large image decodes a small region, not the whole image.
    let corpus = corpus();
    let e = corpus.entry("jpeg_huge_6000x4000");
    let bytes = corpus.bytes(&e.file);
    let mut ctx = context(Decoder::Turbo);
    let mut out = RgbImage::new();
    let rect = CropRect {
        top: 1234,
        left: 2345,
        height: 300,
        width: 400,
    };
    let inner = ctx.decode_region(&bytes, rect, &mut out).expect("region");
    assert!(out.width() <= 400 + 2 * 16 + 4, "{}", out.width());
    assert!(out.height() <= 300 + 4, "{}", out.height());
    assert!(inner.fits_in(out.width(), out.height()));
}

#[test]
fn scaled_region_error_is_bounded_and_self_consistent() {
    let corpus = corpus();
    let mut ctx = context(Decoder::Turbo);
    let mut full = RgbImage::new();
    let mut scaled_full = RgbImage::new();
    let mut out = RgbImage::new();
    let mut per_scale: BTreeMap<u8, DiffStats> = BTreeMap::new();
    let mut inconsistent = Vec::new();
    for (i, e) in corpus.jpegs().enumerate() {
        if e.width < 64 || e.height < 64 || e.is_corrupt() {
            continue;
        }
        let bytes = corpus.bytes(&e.file);
        ctx.decode(&bytes, &mut full).expect("full decode");
        let mut rng = Rng(1000 + i as u64);
        for d in [2u8, 4, 8] {
            let du = u32::from(d);
            // The whole image, scaled.
            let (inner_full, used) = ctx
                .decode_region_scaled(
                    &bytes,
                    CropRect::full(e.width, e.height),
                    e.height / du,
                    e.width / du,
                    &mut scaled_full,
                )
                .expect("scaled full");
            assert_eq!(used, d, "{}", e.name);
            assert_eq!(
                (scaled_full.width(), scaled_full.height()),
                (e.width.div_ceil(du), e.height.div_ceil(du))
            );
            assert_eq!(inner_full.top, 0);
            for _ in 0..12 {
                // Rectangles on the 8-pixel grid scale to whole pixels at every factor.
                let h = 8 * (1 + rng.below(e.height / 8));
                let w = 8 * (1 + rng.below(e.width / 8));
                let rect = CropRect {
                    top: 8 * rng.below((e.height - h) / 8 + 1),
                    left: 8 * rng.below((e.width - w) / 8 + 1),
                    height: h,
                    width: w,
                };
                let (inner, used) = ctx
                    .decode_region_scaled(&bytes, rect, h / du, w / du, &mut out)
                    .expect("scaled region");
                assert_eq!(used, d);
                assert_eq!((inner.height, inner.width), (h / du, w / du), "{}", e.name);
                let got = out.crop_view(inner).expect("inner fits");
                // Against Pillow-exact pixels downscaled by area averaging.
                let reference = box_reduce(full.crop_view(rect).expect("fits"), du);
                per_scale
                    .entry(d)
                    .or_default()
                    .merge(&diff(got, reference.view()));
                // Against the whole image decoded at the same scale: must be exact.
                let same_scale = scaled_full
                    .crop_view(CropRect {
                        top: rect.top / du,
                        left: rect.left / du,
                        height: h / du,
                        width: w / du,
                    })
                    .expect("fits");
                let stats = diff(got, same_scale);
                if stats.max != 0 {
                    inconsistent.push(format!("{} 1/{d} {rect:?}: {}", e.name, stats.describe()));
                }
            }
        }
    }
    println!("DCT-scaled region vs full decode + area downscale:");
    for (d, s) in &per_scale {
        println!(
            "  1/{d}: mean abs diff {:.3}, max {}, {:.1}% of samples differ",
            s.mean(),
            s.max,
            100.0 * s.differing as f64 / s.count as f64
        );
    }
    assert!(
        inconsistent.is_empty(),
        "scaled region != scaled full decode cropped:\n{}",
        inconsistent.join("\n")
    );
    for (d, bound) in SCALED_MEAN_ABS_DIFF {
        let s = per_scale.get(&d).expect("measured");
        assert!(s.count > 100_000, "too few samples at 1/{d}");
        assert!(
            s.mean() <= bound,
            "1/{d}: mean abs diff {:.3} > {bound}",
            s.mean()
        );
    }
}

#[test]
fn scaled_region_picks_the_smallest_sufficient_scale() {
    let corpus = corpus();
    let e = corpus.entry("jpeg_imagenet_like");
    let bytes = corpus.bytes(&e.file);
    let mut ctx = context(Decoder::Turbo);
    let mut out = RgbImage::new();
    let rect = CropRect {
        top: 10,
        left: 20,
        height: 300,
        width: 400,
    };
    for ((min_h, min_w), want) in [
        ((224, 224), 1u8),
        ((150, 150), 2),
        ((75, 100), 4),
        ((37, 50), 8),
        ((0, 0), 8),
    ] {
        let (inner, d) = ctx
            .decode_region_scaled(&bytes, rect, min_h, min_w, &mut out)
            .expect("scaled");
        assert_eq!(d, want, "min {min_h}x{min_w}");
        assert!(inner.height >= min_h && inner.width >= min_w);
        assert!(inner.fits_in(out.width(), out.height()));
    }
    // Scale 1 is the exact region decode.
    let mut exact = RgbImage::new();
    let inner_exact = ctx.decode_region(&bytes, rect, &mut exact).expect("region");
    let (inner, d) = ctx
        .decode_region_scaled(&bytes, rect, 300, 400, &mut out)
        .expect("scaled");
    assert_eq!(d, 1);
    assert_eq!(
        diff(
            out.crop_view(inner).expect("fits"),
            exact.crop_view(inner_exact).expect("fits")
        )
        .max,
        0
    );
    // Non-JPEG and zune: whole image, rect unchanged, scale 1.
    let png = corpus.bytes(&corpus.entry("png_rgb").file);
    let small = CropRect {
        top: 1,
        left: 2,
        height: 30,
        width: 40,
    };
    assert_eq!(
        ctx.decode_region_scaled(&png, small, 1, 1, &mut out)
            .expect("png"),
        (small, 1)
    );
    assert_eq!(
        ctx.decode_region(&png, small, &mut out).expect("png"),
        small
    );
    let mut zune = context(Decoder::Zune);
    assert_eq!(
        zune.decode_region_scaled(&bytes, rect, 1, 1, &mut out)
            .expect("zune"),
        (rect, 1)
    );
    assert_eq!((out.width(), out.height()), (e.width, e.height));
}

#[test]
fn zune_is_within_its_documented_bound() {
    let corpus = corpus();
    let mut zune = context(Decoder::Zune);
    let mut turbo = context(Decoder::Turbo);
    let mut ours = RgbImage::new();
    let mut exact = RgbImage::new();
    let mut total = DiffStats::default();
    let mut failures = Vec::new();
    println!("zune-jpeg vs Pillow: interior max / edge max / mean abs diff / % samples differing");
    for e in corpus.jpegs() {
        let bytes = corpus.bytes(&e.file);
        let result = zune.decode(&bytes, &mut ours);
        if e.is_corrupt() {
            // Corrupt entropy data: any recovery (or an error) is acceptable, a panic is not.
            println!("  {:32} (corrupt data) -> {:?}", e.name, result.map(|_| ()));
            continue;
        }
        if let Err(err) = result {
            failures.push(format!("{}: {err}", e.name));
            continue;
        }
        // Pillow's pixels: the stored reference, or for the hashed huge image the Turbo
        // decode (equal to Pillow, checked by another test).
        let reference_bytes;
        let reference = if e.hashed {
            turbo.decode(&bytes, &mut exact).expect("turbo");
            exact.view()
        } else {
            reference_bytes = corpus.bytes(&e.reference);
            reference_view(&reference_bytes, e)
        };
        let all = diff(ours.view(), reference);
        let (w, h) = (e.width, e.height);
        let interior = if w > 2 && h > 2 {
            let rect = CropRect {
                top: 0,
                left: 0,
                height: h - 2,
                width: w - 2,
            };
            diff(
                ours.crop_view(rect).expect("fits"),
                reference.crop(rect).expect("fits"),
            )
            .max
        } else {
            0
        };
        println!(
            "  {:32} {:3} {:3} {:8.4} {:6.2}%",
            e.name,
            interior,
            all.max,
            all.mean(),
            100.0 * all.differing as f64 / all.count as f64
        );
        if interior > ZUNE_INTERIOR_MAX_ABS_DIFF || all.max > ZUNE_EDGE_MAX_ABS_DIFF {
            failures.push(format!(
                "{}: interior max {interior}; {}",
                e.name,
                all.describe()
            ));
        }
        total.merge(&all);
    }
    println!(
        "  corpus: max {}, mean {:.4} ({:.2}% of samples differ)",
        total.max,
        total.mean(),
        100.0 * total.differing as f64 / total.count as f64
    );
    assert!(
        failures.is_empty(),
        "zune outside its bound (interior {ZUNE_INTERIOR_MAX_ABS_DIFF}, edges {ZUNE_EDGE_MAX_ABS_DIFF}):\n{}",
        failures.join("\n")
    );
    assert!(
        total.mean() <= ZUNE_MEAN_ABS_DIFF,
        "zune mean diff {:.4} > {ZUNE_MEAN_ABS_DIFF}",
        total.mean()
    );
}

#[test]
fn bad_inputs_give_the_expected_error() {
    let corpus = corpus();
    let mut failures = Vec::new();
    let mut out = RgbImage::new();
    let rect = CropRect {
        top: 0,
        left: 0,
        height: 1,
        width: 1,
    };
    for decoder in [Decoder::Turbo, Decoder::Zune] {
        let mut ctx = context(decoder);
        for b in &corpus.bad {
            let bytes = corpus.bytes(&b.file);
            let results = [
                ("decode", ctx.decode(&bytes, &mut out).map(|_| ())),
                (
                    "decode_region",
                    ctx.decode_region(&bytes, rect, &mut out).map(|_| ()),
                ),
                (
                    "decode_region_scaled",
                    ctx.decode_region_scaled(&bytes, rect, 1, 1, &mut out)
                        .map(|_| ()),
                ),
            ];
            for (call, result) in results {
                let got = match &result {
                    Ok(()) => "ok",
                    Err(e) => error_kind(e),
                };
                if got != b.expect {
                    failures.push(format!(
                        "{} {decoder:?} {call}: expected {}, got {got} ({:?}); Pillow: {}",
                        b.name, b.expect, result, b.pillow
                    ));
                }
            }
        }
    }
    assert!(corpus.bad.len() >= 10);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn corrupt_entropy_data_decodes_like_pillow() {
    // libjpeg only warns about damaged entropy data and Pillow ignores the warnings: the
    // fixture script stores Pillow's pixels (or lists the file as bad if Pillow refused it).
    let corpus = corpus();
    let Some(e) = corpus.images.iter().find(|e| e.is_corrupt()) else {
        assert!(
            corpus
                .bad
                .iter()
                .any(|b| b.name == "bad_jpeg_corrupt_entropy"),
            "corrupt-entropy fixture missing"
        );
        return;
    };
    let mut ctx = context(Decoder::Turbo);
    let mut out = RgbImage::new();
    ctx.decode(&corpus.bytes(&e.file), &mut out)
        .expect("decodes with warnings");
    compare_with_reference(&corpus, e, &out).expect("same pixels as Pillow");
}

#[test]
fn huge_sof_is_reported_by_info_and_refused_by_decode() {
    let corpus = corpus();
    let b = corpus
        .bad
        .iter()
        .find(|b| b.expect == "too_large")
        .expect("too-large fixture");
    let bytes = corpus.bytes(&b.file);
    for decoder in [Decoder::Turbo, Decoder::Zune] {
        let mut ctx = context(decoder);
        let info = ctx.info(&bytes).expect("info enforces nothing");
        assert_eq!((info.width, info.height), (30000, 30000));
        let mut out = RgbImage::new();
        match ctx.decode(&bytes, &mut out) {
            Err(Error::TooLarge {
                width,
                height,
                pixels,
                limit,
            }) => {
                assert_eq!((width, height, pixels), (30000, 30000, 900_000_000));
                assert_eq!(limit, DEFAULT_MAX_PIXELS);
            }
            other => panic!("expected TooLarge, got {other:?}"),
        }
        assert_eq!(out.as_raw().len(), 0, "nothing allocated");
    }
}

#[test]
fn max_pixels_limit_applies_to_every_format_and_path() {
    let corpus = corpus();
    for name in [
        "jpeg_420_q75",
        "jpeg_cmyk",
        "png_rgb",
        "png_gray16",
        "bmp_rgb",
        "gif_p",
        "tiff_rgb",
        "pnm_p6",
        "pnm_p4",
        "pnm_p2_crlf",
    ] {
        let e = corpus.entry(name);
        let bytes = corpus.bytes(&e.file);
        let pixels = u64::from(e.width) * u64::from(e.height);
        let rect = CropRect::full(e.width, e.height);
        for decoder in [Decoder::Turbo, Decoder::Zune] {
            let exact = DecodeOptions::default().decoder(decoder).max_pixels(pixels);
            let mut ctx = DecodeContext::new(exact).expect("context");
            let mut out = RgbImage::new();
            ctx.decode(&bytes, &mut out)
                .unwrap_or_else(|err| panic!("{name} at the limit: {err}"));

            let mut ctx = DecodeContext::new(exact.max_pixels(pixels - 1)).expect("context");
            let mut out = RgbImage::new();
            let results = [
                ctx.decode(&bytes, &mut out).map(|_| ()),
                ctx.decode_region(&bytes, rect, &mut out).map(|_| ()),
                ctx.decode_region_scaled(&bytes, rect, 1, 1, &mut out)
                    .map(|_| ()),
            ];
            for result in results {
                match result {
                    Err(Error::TooLarge {
                        pixels: p, limit, ..
                    }) => assert_eq!((p, limit), (pixels, pixels - 1), "{name}"),
                    other => panic!("{name} {decoder:?}: expected TooLarge, got {other:?}"),
                }
            }
            assert_eq!(out.as_raw().len(), 0, "{name}: nothing decoded");
            // The header is still readable.
            assert_eq!(ctx.info(&bytes).expect("info").width, e.width);
        }
    }
}

#[test]
fn rect_outside_the_image_is_an_invalid_argument() {
    let corpus = corpus();
    for name in ["jpeg_420_q75", "png_rgb"] {
        let e = corpus.entry(name);
        let bytes = corpus.bytes(&e.file);
        let outside = CropRect {
            top: e.height - 1,
            left: 0,
            height: 2,
            width: 1,
        };
        let empty = CropRect {
            top: 0,
            left: 0,
            height: 0,
            width: 5,
        };
        for decoder in [Decoder::Turbo, Decoder::Zune] {
            let mut ctx = context(decoder);
            let mut out = RgbImage::new();
            for rect in [outside, empty] {
                assert!(matches!(
                    ctx.decode_region(&bytes, rect, &mut out),
                    Err(Error::InvalidArgument { .. })
                ));
                assert!(matches!(
                    ctx.decode_region_scaled(&bytes, rect, 1, 1, &mut out),
                    Err(Error::InvalidArgument { .. })
                ));
            }
        }
    }
}

#[test]
fn every_cut_of_a_jpeg_is_truncated() {
    // Pillow's rule: data that ends before the EOI marker is "image file is truncated".
    let corpus = corpus();
    let mut checked = 0;
    for decoder in [Decoder::Turbo, Decoder::Zune] {
        let mut ctx = context(decoder);
        let mut out = RgbImage::new();
        for e in corpus
            .jpegs()
            .filter(|e| !e.hashed && !e.name.contains("trailing"))
        {
            let bytes = corpus.bytes(&e.file);
            let n = bytes.len();
            for cut in [3, 20, n / 10, n / 3, n / 2, 9 * n / 10, n - 3, n - 2, n - 1] {
                if !(3..n).contains(&cut) {
                    continue;
                }
                let part = &bytes[..cut];
                checked += 1;
                let results = [
                    ctx.decode(part, &mut out).map(|_| ()),
                    ctx.decode_region(
                        part,
                        CropRect {
                            top: 0,
                            left: 0,
                            height: 1,
                            width: 1,
                        },
                        &mut out,
                    )
                    .map(|_| ()),
                ];
                for result in results {
                    assert!(
                        matches!(result, Err(Error::Truncated { .. })),
                        "{} cut at {cut}/{n} with {decoder:?}: {result:?}",
                        e.name
                    );
                }
            }
        }
    }
    assert!(checked > 300);
}

#[test]
fn damaged_files_never_panic() {
    // Truncations and byte flips at many positions of small files of every format: any result
    // but a panic is acceptable (JPEG cuts are checked more strictly above).
    let corpus = corpus();
    let mut rng = Rng(99);
    let mut outcomes = BTreeMap::<&'static str, usize>::new();
    for decoder in [Decoder::Turbo, Decoder::Zune] {
        let mut ctx = context(decoder);
        let mut out = RgbImage::new();
        for e in corpus
            .images
            .iter()
            .filter(|e| u64::from(e.width) * u64::from(e.height) <= 80_000)
        {
            let bytes = corpus.bytes(&e.file);
            for _ in 0..12 {
                let mut damaged = bytes.clone();
                match rng.below(3) {
                    0 => damaged.truncate(rng.below(bytes.len() as u32) as usize),
                    1 => {
                        for _ in 0..1 + rng.below(8) {
                            let i = rng.below(bytes.len() as u32) as usize;
                            damaged[i] = rng.below(256) as u8;
                        }
                    }
                    _ => {
                        let i = rng.below(bytes.len() as u32) as usize;
                        let len = (rng.below(64) as usize).min(bytes.len() - i);
                        damaged.drain(i..i + len);
                    }
                }
                let w = e.width.max(1);
                let h = e.height.max(1);
                let rect = CropRect {
                    top: rng.below(h),
                    left: rng.below(w),
                    height: 1,
                    width: 1,
                };
                for result in [
                    ctx.decode(&damaged, &mut out).map(|_| ()),
                    ctx.decode_region(&damaged, rect, &mut out).map(|_| ()),
                    ctx.decode_region_scaled(&damaged, rect, 0, 0, &mut out)
                        .map(|_| ()),
                    ctx.info(&damaged).map(|_| ()),
                ] {
                    let kind = match &result {
                        Ok(()) => "ok",
                        Err(err) => error_kind(err),
                    };
                    *outcomes.entry(kind).or_default() += 1;
                }
            }
        }
    }
    println!("damaged inputs: {outcomes:?}");
    assert!(outcomes.values().sum::<usize>() > 1000);
}

#[test]
fn one_context_decodes_any_sequence_of_sizes() {
    // Big, small, big again, mixed formats and backends' scratch needs, with one context and
    // one output image: each result equals a fresh decode.
    let corpus = corpus();
    let names = [
        "jpeg_420_q95",
        "jpeg_tiny_1x1_420",
        "jpeg_cmyk",
        "png_rgba16",
        "jpeg_gray_7x5",
        "jpeg_wide_3000x16",
        "gif_p",
        "pnm_p5",
        "jpeg_cmyk_progressive",
    ];
    for decoder in [Decoder::Turbo, Decoder::Zune] {
        let mut shared = context(decoder);
        let mut out = RgbImage::new();
        for name in names.iter().chain(names.iter().rev()) {
            let bytes = corpus.bytes(&corpus.entry(name).file);
            shared.decode(&bytes, &mut out).expect("shared");
            let mut fresh = RgbImage::new();
            context(decoder).decode(&bytes, &mut fresh).expect("fresh");
            assert_eq!(out, fresh, "{name} with {decoder:?}");
        }
    }
}
