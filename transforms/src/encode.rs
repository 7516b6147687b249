//! JPEG encoding: for preparing a dataset offline (re-encoded at a smaller size once, then
//! decoded every epoch), and for torchvision's `JPEG` augmentation (a compression and
//! decompression of each sample, [`JpegRoundTrip`]).
//!
//! Pixels in, bytes out, with Pillow's `save(format="JPEG", quality=q)` settings (4:2:0, accurate
//! DCT, baseline), so a prepared dataset is what a user re-encoding with Pillow would get. Must
//! not decide what is encoded or where it is written, nor draw a quality; the C library stays
//! behind `decode::turbo`.

use crate::decode::turbo::{TurboEncoder, TurboRoundTrip};
use crate::error::Result;
use crate::image::RgbImage;

/// A reusable JPEG compressor at one quality.
pub struct JpegEncoder {
    inner: TurboEncoder,
    quality: u8,
}

impl std::fmt::Debug for JpegEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JpegEncoder")
            .field("quality", &self.quality)
            .finish_non_exhaustive()
    }
}

impl JpegEncoder {
    /// An encoder at `quality`, 1 to 100 (Pillow's scale; it defaults to 75).
    pub fn new(quality: u8) -> Result<Self> {
        Ok(JpegEncoder {
            inner: TurboEncoder::new(quality)?,
            quality,
        })
    }

    /// The quality it encodes at.
    pub fn quality(&self) -> u8 {
        self.quality
    }

    /// Writes `img` as a JPEG into `out` (replacing its contents).
    pub fn encode(&mut self, img: &RgbImage, out: &mut Vec<u8>) -> Result<()> {
        self.inner.encode(img, out)
    }
}

/// torchvision's `JPEG` augmentation on a u8 image, in place: a compression at a quality and a
/// decompression, as Pillow's `save(format="JPEG", quality=q)` then `open` do (and
/// torchvision's `encode_jpeg`/`decode_jpeg`, which configure libjpeg the same way: the same
/// bits). Reusable: the JPEG buffer is kept, so a warm one allocates nothing for images of one
/// size.
pub struct JpegRoundTrip {
    inner: TurboRoundTrip,
}

impl std::fmt::Debug for JpegRoundTrip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JpegRoundTrip").finish_non_exhaustive()
    }
}

impl JpegRoundTrip {
    /// A compressor and a decompressor (an error only when libjpeg-turbo cannot make them).
    pub fn new() -> Result<Self> {
        Ok(JpegRoundTrip {
            inner: TurboRoundTrip::new()?,
        })
    }

    /// Replaces `img` by itself compressed at `quality` (1 to 100, else an error naming
    /// `quality`, `img` untouched) and decompressed. An empty image is an error.
    pub fn apply(&mut self, img: &mut RgbImage, quality: u8) -> Result<()> {
        self.inner.apply(img, quality)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::{DecodeContext, DecodeOptions};

    fn gradient(width: u32, height: u32) -> RgbImage {
        let data = (0..height)
            .flat_map(|y| (0..width).map(move |x| (x, y)))
            .flat_map(|(x, y)| [(x * 255 / width) as u8, (y * 255 / height) as u8, 128])
            .collect();
        RgbImage::from_raw(width, height, data).expect("sized")
    }

    #[test]
    fn round_trips_within_jpeg_error() {
        let img = gradient(97, 61);
        let mut enc = JpegEncoder::new(95).expect("encoder");
        let mut jpeg = Vec::new();
        enc.encode(&img, &mut jpeg).expect("encode");
        let mut ctx = DecodeContext::new(DecodeOptions::default()).expect("decoder");
        let mut back = RgbImage::new();
        let info = ctx.decode(&jpeg, &mut back).expect("decode");
        assert_eq!((info.width, info.height), (97, 61));
        let worst = img
            .as_raw()
            .iter()
            .zip(back.as_raw())
            .map(|(a, b)| a.abs_diff(*b))
            .max();
        // A smooth gradient at quality 95 stays within a few levels.
        assert!(worst.is_some_and(|d| d <= 8), "worst difference {worst:?}");
        // Reused: the second image replaces the first's bytes.
        enc.encode(&gradient(8, 8), &mut jpeg).expect("encode");
        assert_eq!(
            ctx.info(&jpeg).map(|i| (i.width, i.height)).ok(),
            Some((8, 8))
        );
    }

    #[test]
    fn refuses_bad_quality_and_empty_images() {
        assert!(JpegEncoder::new(0).is_err());
        assert!(JpegEncoder::new(101).is_err());
        let mut enc = JpegEncoder::new(90).expect("encoder");
        let mut out = Vec::new();
        assert!(enc.encode(&RgbImage::new(), &mut out).is_err());
    }

    /// Gray levels in all three channels: an `L` image as the stages hold it.
    fn gray(width: u32, height: u32) -> RgbImage {
        let data = (0..height)
            .flat_map(|y| (0..width).map(move |x| ((x * 37 + y * 11) % 256) as u8))
            .flat_map(|v| [v; 3])
            .collect();
        RgbImage::from_raw(width, height, data).expect("sized")
    }

    #[test]
    fn round_trip_is_encode_then_decode() {
        let mut ctx = DecodeContext::new(DecodeOptions::default()).expect("decoder");
        let mut round_trip = JpegRoundTrip::new().expect("round trip");
        let mut jpeg = Vec::new();
        let mut want = RgbImage::new();
        for (w, h) in [(1, 1), (7, 5), (97, 61), (224, 224), (33, 1)] {
            for quality in [1u8, 2, 50, 75, 99, 100] {
                let src = gradient(w, h);
                JpegEncoder::new(quality)
                    .expect("encoder")
                    .encode(&src, &mut jpeg)
                    .expect("encode");
                ctx.decode(&jpeg, &mut want).expect("decode");
                let mut img = src.clone();
                round_trip.apply(&mut img, quality).expect("round trip");
                assert_eq!((img.width(), img.height()), (w, h));
                assert_eq!(img.as_raw(), want.as_raw(), "{w}x{h} at {quality}");
                if (w, h, quality) == (224, 224, 50) {
                    assert_ne!(img.as_raw(), src.as_raw(), "compression changes a photo");
                }
            }
        }
    }

    /// A colourful pattern with edges in every channel, where chroma subsampling, the DCT
    /// method and the quantization tables all show.
    fn pattern(width: u32, height: u32) -> RgbImage {
        let data = (0..height)
            .flat_map(|y| (0..width).map(move |x| (x, y)))
            .flat_map(|(x, y)| {
                [
                    ((x * 37 + y * 11) % 256) as u8,
                    ((x * 5 + y * 23) % 256) as u8,
                    (((x ^ y) * 29) % 256) as u8,
                ]
            })
            .collect();
        RgbImage::from_raw(width, height, data).expect("sized")
    }

    fn fnv1a(bytes: &[u8]) -> u64 {
        bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
    }

    /// The pixels Pillow 13 gives for `Image.fromarray(pattern).save(buf, format="JPEG",
    /// quality=q)` then `Image.open(buf)`, by their FNV-1a hash (the Python tests compare
    /// whole images with Pillow and torchvision; this one needs neither).
    #[test]
    fn round_trip_equals_pillows_save_and_open() {
        let mut round_trip = JpegRoundTrip::new().expect("round trip");
        for (w, h, quality, pillow) in [
            (16, 12, 60, 0x2dbd_6ac6_d75b_cafc_u64),
            (7, 5, 1, 0x64a7_cbe1_1a3d_0422),
            (33, 17, 100, 0xbedb_cc88_0017_0269),
        ] {
            let mut img = pattern(w, h);
            round_trip.apply(&mut img, quality).expect("round trip");
            assert_eq!(fnv1a(img.as_raw()), pillow, "{w}x{h} at {quality}");
        }
    }

    #[test]
    fn round_trip_keeps_gray_images_gray() {
        let mut round_trip = JpegRoundTrip::new().expect("round trip");
        for quality in [1u8, 30, 95] {
            let mut img = gray(45, 29);
            round_trip.apply(&mut img, quality).expect("round trip");
            assert!(
                img.as_raw()
                    .chunks_exact(3)
                    .all(|p| p[0] == p[1] && p[1] == p[2]),
                "quality {quality}"
            );
        }
    }

    #[test]
    fn round_trip_refuses_bad_quality_and_empty_images() {
        let mut round_trip = JpegRoundTrip::new().expect("round trip");
        let src = gradient(16, 16);
        for quality in [0u8, 101, 255] {
            let mut img = src.clone();
            match round_trip.apply(&mut img, quality) {
                Err(crate::error::Error::InvalidArgument { name, .. }) => {
                    assert_eq!(name, "quality")
                }
                other => panic!("quality {quality}: {other:?}"),
            }
            assert_eq!(img.as_raw(), src.as_raw(), "untouched");
        }
        assert!(round_trip.apply(&mut RgbImage::new(), 50).is_err());
        // Wider than JPEG's 65500: libjpeg's error, not a crash.
        let mut wide = RgbImage::from_raw(70_000, 1, vec![7; 3 * 70_000]).expect("sized");
        assert!(round_trip.apply(&mut wide, 50).is_err());
        // Still usable after the errors.
        let mut img = src.clone();
        round_trip.apply(&mut img, 50).expect("round trip");
    }

    #[test]
    fn encode_reuses_the_buffer() {
        let mut enc = JpegEncoder::new(80).expect("encoder");
        let mut out = Vec::new();
        let img = gradient(64, 48);
        enc.encode(&img, &mut out).expect("encode");
        let first = out.clone();
        let capacity = out.capacity();
        for _ in 0..5 {
            enc.encode(&img, &mut out).expect("encode");
            assert_eq!(out, first);
            assert_eq!(out.capacity(), capacity, "no new allocation");
        }
    }
}
