//! What EXIF orientation costs: the orientation scan per image (no EXIF, an Exif APP1, XMP
//! only), the transposition alone, and a decode that transposes (orientations 3 and 6) against a plain one, whole and by
//! region, on a 224x224 and a 1024x768 JPEG. Self-contained: the images are made here
//! (smooth gradients and noise, JPEG quality 90, 4:2:0), so `make bench`'s corpus is not needed.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use ferroloader::transforms::decode::exif::{self, Orientation};
use ferroloader::transforms::decode::{DecodeContext, DecodeOptions};
use ferroloader::transforms::encode::JpegEncoder;
use ferroloader::transforms::{CropRect, RgbImage};

/// A photo-like image: gradients, a few edges and noise from a fixed LCG.
fn image(width: u32, height: u32) -> RgbImage {
    let mut img = RgbImage::new();
    let data = img.reset(width, height);
    let mut state = 0x2545_F491_u32;
    for y in 0..height as usize {
        for x in 0..width as usize {
            state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            let noise = (state >> 27) as usize;
            let p = 3 * (y * width as usize + x);
            data[p] = ((x * 255 / width as usize + noise) % 256) as u8;
            data[p + 1] = ((y * 255 / height as usize + noise) % 256) as u8;
            data[p + 2] = if (x / 40 + y / 30) % 2 == 0 { 60 } else { 190 } + noise as u8;
        }
    }
    img
}

fn jpeg(width: u32, height: u32) -> Vec<u8> {
    let mut out = Vec::new();
    JpegEncoder::new(90)
        .expect("encoder")
        .encode(&image(width, height), &mut out)
        .expect("encodes");
    out
}

/// `jpeg` with an APP1 segment `body` after SOI.
fn with_app1(jpeg: &[u8], body: &[u8]) -> Vec<u8> {
    let mut out = jpeg[..2].to_vec();
    out.extend_from_slice(&[0xFF, 0xE1]);
    out.extend_from_slice(&(body.len() as u16 + 2).to_be_bytes());
    out.extend_from_slice(body);
    out.extend_from_slice(&jpeg[2..]);
    out
}

/// An Exif block as cameras write one: IFD0 with make, model, orientation `k`, resolution
/// tags (out-of-line rationals) and an Exif sub-IFD pointer, little-endian.
fn exif_block(k: u16) -> Vec<u8> {
    let entries: [(u16, u16, u32, u32); 6] = [
        (0x010F, 2, 4, u32::from_le_bytes(*b"Cam\0")),
        (0x0110, 2, 4, u32::from_le_bytes(*b"X10\0")),
        (0x011A, 5, 1, 8 + 2 + 6 * 12 + 4),
        (0x011B, 5, 1, 8 + 2 + 6 * 12 + 4 + 8),
        (0x0112, 3, 1, u32::from(k)),
        (0x8769, 4, 1, 0),
    ];
    let mut v = b"Exif\0\0II*\0\x08\0\0\0".to_vec();
    v.extend_from_slice(&(entries.len() as u16).to_le_bytes());
    for (tag, typ, count, field) in entries {
        v.extend_from_slice(&tag.to_le_bytes());
        v.extend_from_slice(&typ.to_le_bytes());
        v.extend_from_slice(&count.to_le_bytes());
        v.extend_from_slice(&field.to_le_bytes());
    }
    v.extend_from_slice(&0u32.to_le_bytes());
    for _ in 0..2 {
        v.extend_from_slice(&72u32.to_le_bytes());
        v.extend_from_slice(&1u32.to_le_bytes());
    }
    v
}

fn bench_scan(c: &mut Criterion) {
    let plain = jpeg(1024, 768);
    let mut xmp = b"http://ns.adobe.com/xap/1.0/\0".to_vec();
    xmp.extend_from_slice(&[b' '; 3000]);
    xmp.extend_from_slice(b"<rdf:Description tiff:Orientation=\"6\"/>");
    let cases = [
        ("no_exif", plain.clone()),
        ("exif_app1", with_app1(&plain, &exif_block(6))),
        ("xmp_3k", with_app1(&plain, &xmp)),
    ];
    let mut g = c.benchmark_group("exif/scan");
    for (name, bytes) in &cases {
        g.bench_function(*name, |b| b.iter(|| exif::orientation(black_box(bytes))));
    }
    g.finish();
}

/// The transposition alone (what a transposing decode adds to a plain one), per method.
fn bench_transpose(c: &mut Criterion) {
    let mut out = RgbImage::new();
    for (width, height) in [(224u32, 224u32), (1024, 768)] {
        let src = image(width, height);
        let mut g = c.benchmark_group(format!("exif/transpose_{width}x{height}"));
        for (name, o) in [
            ("flip_left_right", Orientation::FlipLeftRight),
            ("rotate_180", Orientation::Rotate180),
            ("rotate_270", Orientation::Rotate270),
            ("transverse", Orientation::Transverse),
        ] {
            g.bench_function(name, |b| {
                b.iter(|| exif::transpose(black_box(src.view()), o, &mut out).expect("fits"))
            });
        }
        g.finish();
    }
}

fn bench_decode(c: &mut Criterion) {
    let mut out = RgbImage::new();
    for (width, height) in [(224u32, 224u32), (1024, 768)] {
        let plain = jpeg(width, height);
        let mut g = c.benchmark_group(format!("exif/decode_{width}x{height}"));
        let mut off = DecodeContext::new(DecodeOptions::default()).expect("ctx");
        g.bench_function("option_off", |b| {
            b.iter(|| off.decode(black_box(&plain), &mut out).expect("decodes"))
        });
        let mut on =
            DecodeContext::new(DecodeOptions::default().exif_transpose(true)).expect("ctx");
        for (name, k) in [
            ("orientation_1", 1u16),
            ("rotate_180", 3),
            ("rotate_270", 6),
        ] {
            let bytes = with_app1(&plain, &exif_block(k));
            g.bench_function(name, |b| {
                b.iter(|| on.decode(black_box(&bytes), &mut out).expect("decodes"))
            });
        }
        // A RandomResizedCrop-sized region, inside the image in both frames.
        let side = height * 2 / 3;
        let rect = CropRect {
            top: height / 8,
            left: width / 8,
            height: side,
            width: side * 3 / 4,
        };
        g.bench_function("region_off", |b| {
            b.iter(|| {
                off.decode_region(black_box(&plain), rect, &mut out)
                    .expect("decodes")
            })
        });
        for (name, k) in [("region_rotate_180", 3u16), ("region_rotate_270", 6)] {
            let bytes = with_app1(&plain, &exif_block(k));
            g.bench_function(name, |b| {
                b.iter(|| {
                    on.decode_region(black_box(&bytes), rect, &mut out)
                        .expect("decodes")
                })
            });
        }
        g.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).warm_up_time(std::time::Duration::from_secs(1)).measurement_time(std::time::Duration::from_secs(3));
    targets = bench_scan, bench_transpose, bench_decode
}
criterion_main!(benches);
