//! JPEG encoding, for preparing a dataset offline (re-encoded at a smaller size once, then
//! decoded every epoch).
//!
//! Pixels in, bytes out, with Pillow's `save(format="JPEG", quality=q)` settings (4:2:0, accurate
//! DCT, baseline), so a prepared dataset is what a user re-encoding with Pillow would get. Must
//! not decide what is encoded or where it is written; the C library stays behind
//! `decode::turbo`.

use crate::decode::turbo::TurboEncoder;
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
}
