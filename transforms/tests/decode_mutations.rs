//! Every decode path on thousands of damaged variants of the corpus's images: truncations,
//! overwritten header bytes, corrupted entropy data, spliced markers. Each call must return
//! either an image whose size agrees with what it reports or a typed error with a message; none
//! may panic, hang, or leave its context unable to decode the next good image exactly.
//!
//! The mutants are drawn from a seeded generator, so a failure names a mutant that reproduces.
//! Panics that the decoders' `catch_unwind` turns into `Error::Corrupt` are allowed where they
//! come from a third-party decoder, and fail the test where they come from this crate's code
//! (which a catch would otherwise hide).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferroloader_transforms::decode::{DecodeContext, DecodeOptions, Decoder, Format};
use ferroloader_transforms::{CropRect, Error, RgbImage};
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;

use crate::fixtures;

/// One of each kind of JPEG the corpus has, and one image of every other format.
const SOURCES: &[&str] = &[
    "jpeg_420_q75.jpg",
    "jpeg_422_q95.jpg",
    "jpeg_444_333x77.jpg",
    "jpeg_progressive_420.jpg",
    "jpeg_optimized_420.jpg",
    "jpeg_gray.jpg",
    "jpeg_cmyk.jpg",
    "jpeg_cmyk_progressive.jpg",
    "jpeg_ycck_patched.jpg",
    "jpeg_restart_blocks_420.jpg",
    "jpeg_restart_progressive_420.jpg",
    "jpeg_tiny_17x9_420.jpg",
    "png_p_trns.png",
    "png_rgb16.png",
    "gif_p.gif",
    "bmp_rgb.bmp",
    "tiff_rgb_lzw.tif",
    "webp_lossy.webp",
    "webp_lossless.webp",
];

/// A bound on what a mutated header may ask for (a flipped bit in a JPEG's size would
/// otherwise allocate and decode up to Pillow's 179 million pixels): large enough for every
/// source, small enough to keep the sweep fast.
const MAX_PIXELS: u64 = 4_000_000;

/// A call that has not returned after this long is taken for a hang.
const HANG: Duration = Duration::from_secs(60);

/// The damaged variants of `good`: `(description, bytes)`.
fn mutants(good: &[u8], seed: u64) -> Vec<(String, Vec<u8>)> {
    let mut rng = Pcg64Mcg::seed_from_u64(seed);
    let len = good.len();
    let mut out = Vec::new();
    // Truncations: every length through the first headers, then evenly spread.
    let mut cuts: Vec<usize> = (0..len.min(48)).collect();
    cuts.extend((1..32).map(|i| len * i / 32));
    cuts.extend([len.saturating_sub(1), len.saturating_sub(2)]);
    cuts.sort_unstable();
    cuts.dedup();
    for cut in cuts {
        out.push((format!("truncated to {cut} bytes"), good[..cut].to_vec()));
    }
    // One byte overwritten, mostly within the first KiB, where the headers and tables are.
    let header = len.min(1024);
    for i in 0..250 {
        let at = if i % 4 == 3 {
            rng.random_range(0..len)
        } else {
            rng.random_range(0..header)
        };
        let value = match i % 5 {
            0 => 0x00,
            1 => 0xFF,
            2 => good[at] ^ 0x80,
            3 => good[at].wrapping_add(1),
            _ => rng.random(),
        };
        let mut bytes = good.to_vec();
        bytes[at] = value;
        out.push((format!("byte {at} set to {value:#04x}"), bytes));
    }
    // Bursts of random bytes anywhere (entropy data, for the most part).
    for _ in 0..50 {
        let n = rng.random_range(1..=16);
        let at = rng.random_range(0..len.saturating_sub(n).max(1));
        let mut bytes = good.to_vec();
        let mut what = format!("{n} random bytes at {at}:");
        for b in bytes.iter_mut().skip(at).take(n) {
            *b = rng.random();
            write!(what, " {b:02x}").expect("a String takes writes");
        }
        out.push((what, bytes));
    }
    // A marker (0xFF and a random byte) spliced in: a segment that starts mid-scan or
    // mid-segment.
    for _ in 0..40 {
        let at = rng.random_range(0..=len);
        let marker: u8 = rng.random();
        let mut bytes = good.to_vec();
        bytes.splice(at..at, [0xFF, marker]);
        out.push((format!("marker ff{marker:02x} inserted at {at}"), bytes));
    }
    out
}

/// What a call must satisfy: `Ok` with consistent sizes, or a typed error with a message that
/// blames the data (not the caller's arguments, which came from the image's own header).
fn check_image(out: &RgbImage, width: u32, height: u32) -> Result<(), String> {
    let (w, h) = (out.width(), out.height());
    if (w, h) != (width, height) {
        return Err(format!("returned {width}x{height}, decoded {w}x{h}"));
    }
    if out.as_raw().len() != 3 * w as usize * h as usize || w == 0 || h == 0 {
        return Err(format!("{w}x{h} image of {} bytes", out.as_raw().len()));
    }
    if u64::from(w) * u64::from(h) > MAX_PIXELS {
        return Err(format!("{w}x{h} decoded past the pixel limit"));
    }
    Ok(())
}

fn check_error(e: &Error) -> Result<(), String> {
    if e.to_string().trim().is_empty() {
        return Err(format!("empty message for {e:?}"));
    }
    if matches!(e, Error::InvalidArgument { .. }) {
        return Err(format!("bad data reported as a bad argument: {e}"));
    }
    Ok(())
}

/// A crop in the middle of a `width` x `height` image.
fn middle(width: u32, height: u32) -> CropRect {
    CropRect {
        left: width / 4,
        top: height / 3,
        width: (width / 2).max(1),
        height: (height / 2).max(1),
    }
}

/// Every decode path of `ctx` on `bytes`: whether the full decode refused them, or the first
/// broken promise.
fn run_paths(ctx: &mut DecodeContext, bytes: &[u8], out: &mut RgbImage) -> Result<bool, String> {
    let info = ctx.info(bytes);
    if let Err(e) = &info {
        check_error(e).map_err(|m| format!("info: {m}"))?;
    }
    let refused = match ctx.decode(bytes, out) {
        Ok(decoded) => {
            check_image(out, decoded.width, decoded.height).map_err(|m| format!("decode: {m}"))?;
            if let Ok(info) = &info {
                if (info.width, info.height) != (decoded.width, decoded.height) {
                    return Err(format!(
                        "info says {}x{}, decode {}x{}",
                        info.width, info.height, decoded.width, decoded.height
                    ));
                }
            }
            false
        }
        Err(e) => {
            check_error(&e).map_err(|m| format!("decode: {m}"))?;
            true
        }
    };
    let Ok(info) = info else { return Ok(refused) };
    if info.format != Format::Jpeg {
        return Ok(refused);
    }
    let rect = middle(info.width, info.height);
    match ctx.decode_region(bytes, rect, out) {
        Ok(inner) => {
            let fits = inner.width == rect.width
                && inner.height == rect.height
                && inner.fits_in(out.width(), out.height());
            if !fits {
                return Err(format!(
                    "decode_region: {rect:?} came back as {inner:?} in a {}x{} image",
                    out.width(),
                    out.height()
                ));
            }
        }
        Err(e) => check_error(&e).map_err(|m| format!("decode_region: {m}"))?,
    }
    let min = (rect.height / 4, rect.width / 4);
    match ctx.decode_region_scaled(bytes, rect, min.0, min.1, out) {
        Ok((inner, scale)) => {
            if ![1, 2, 4, 8].contains(&scale) || !inner.fits_in(out.width(), out.height()) {
                return Err(format!(
                    "decode_region_scaled: {inner:?} at 1/{scale} in a {}x{} image",
                    out.width(),
                    out.height()
                ));
            }
        }
        Err(e) => check_error(&e).map_err(|m| format!("decode_region_scaled: {m}"))?,
    }
    Ok(refused)
}

/// Aborts the process, naming the mutant, when `progress` stops moving for [`HANG`]: a hung
/// decode would otherwise stall the test run without saying where.
fn watchdog(progress: Arc<AtomicUsize>, current: Arc<Mutex<String>>) {
    std::thread::spawn(move || {
        let (mut seen, mut since) = (progress.load(Ordering::Relaxed), Instant::now());
        loop {
            std::thread::sleep(Duration::from_secs(1));
            let now = progress.load(Ordering::Relaxed);
            if now == usize::MAX {
                return;
            }
            if now != seen {
                (seen, since) = (now, Instant::now());
            } else if since.elapsed() > HANG {
                let what = current.lock().map(|s| s.clone()).unwrap_or_default();
                eprintln!("no decode returned for {HANG:?}: hung on {what}");
                std::process::abort();
            }
        }
    });
}

#[test]
fn damaged_images_give_errors_or_consistent_images_and_never_break_the_context() {
    // Panics the decoders catch, by where they happened.
    let caught: Arc<Mutex<Vec<String>>> = Arc::default();
    let hook_caught = Arc::clone(&caught);
    // One line per panic instead of the default hook's backtrace: most are expected.
    std::panic::set_hook(Box::new(move |info| {
        let location = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        eprintln!(
            "panic at {location}: {}",
            info.payload_as_str().unwrap_or("?")
        );
        if let Ok(mut caught) = hook_caught.lock() {
            caught.push(location);
        }
    }));
    let progress = Arc::new(AtomicUsize::new(0));
    let current = Arc::new(Mutex::new(String::new()));
    watchdog(Arc::clone(&progress), Arc::clone(&current));

    let mut failures = Vec::new();
    let (mut calls, mut refusals) = (0usize, 0usize);
    let mut out = RgbImage::new();
    let mut again = RgbImage::new();
    for (seed, name) in SOURCES.iter().enumerate() {
        let good = fixtures::read_fixture("decode", name);
        // The backends differ only for JPEG.
        let decoders = if name.ends_with(".jpg") {
            &[Decoder::Turbo, Decoder::Zune][..]
        } else {
            &[Decoder::Turbo][..]
        };
        for &decoder in decoders {
            let options = DecodeOptions::default()
                .decoder(decoder)
                .max_pixels(MAX_PIXELS);
            let mut fresh = DecodeContext::new(options).expect("context");
            let mut expected = RgbImage::new();
            fresh
                .decode(&good, &mut expected)
                .expect("the source decodes");
            let mut ctx = DecodeContext::new(options).expect("context");
            for (i, (what, bytes)) in mutants(&good, seed as u64).into_iter().enumerate() {
                if let Ok(mut current) = current.lock() {
                    *current = format!("{name} ({decoder:?}), {what}");
                }
                progress.fetch_add(1, Ordering::Relaxed);
                calls += 1;
                match run_paths(&mut ctx, &bytes, &mut out) {
                    Ok(refused) => refusals += usize::from(refused),
                    Err(m) => failures.push(format!("{name} ({decoder:?}), {what}: {m}")),
                }
                // The context after a bad image: the good one decodes exactly as on a fresh
                // context (every few mutants; each of them is a different kind of damage).
                if i % 7 == 0 {
                    let after = ctx.decode(&good, &mut again).map(|_| again == expected);
                    if !matches!(after, Ok(true)) {
                        failures.push(format!(
                            "{name} ({decoder:?}), after {what}: the source decodes to {after:?}"
                        ));
                    }
                }
            }
        }
    }
    progress.store(usize::MAX, Ordering::Relaxed);
    let _ = std::panic::take_hook();

    let ours: Vec<String> = caught
        .lock()
        .map(|c| c.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|location| location.contains("transforms/src"))
        .collect();
    println!(
        "{calls} mutants over {} sources (JPEGs with both backends): {refusals} refused, {} decoder \
         panics caught (none may be ours)",
        SOURCES.len(),
        caught.lock().map(|c| c.len()).unwrap_or_default()
    );
    // The sweep must damage: most mutants of a compressed image are refused.
    assert!(
        refusals * 4 > calls,
        "only {refusals} of {calls} mutants refused"
    );
    assert!(ours.is_empty(), "panics in this crate: {ours:?}");
    assert!(
        failures.is_empty(),
        "{} broken promises:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
