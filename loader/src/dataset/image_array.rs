//! Images already decoded, held as one `uint8` array of shape `(N, H, W, C)`: what torchvision's
//! CIFAR-10/100, SVHN and STL-10 datasets keep in memory, or a user's own array.
//!
//! A sample is handed to the pipeline as a binary PNM (`P6` for RGB, `P5` for grayscale, maxval
//! 255): a header of a dozen bytes before the pixels, which the decoder copies out again. That
//! keeps one path from bytes to tensor for every source (the decoder, its pixel limit, the spans
//! and the error names) at the cost of a copy of each image, which for these small images is
//! below the resolution of the profile. Must not keep a reference into the caller's array: the
//! pixels are copied in once, so nothing the caller does afterwards can race a worker.

use std::borrow::Cow;
use std::io;
use std::path::{Path, PathBuf};

use super::Source;
use crate::error::{LoaderError, Result};

/// `N` images of `height x width` with `channels` (1 or 3) interleaved bytes each, and a label
/// per image.
#[derive(Clone, Debug)]
pub struct ImageArray {
    pixels: Vec<u8>,
    labels: Vec<i64>,
    height: usize,
    width: usize,
    channels: usize,
    /// The PNM header every sample starts with (they all have one size).
    header: Vec<u8>,
    /// What samples are called in errors: `{name}[{index}]`.
    name: String,
}

impl ImageArray {
    /// Image `i` is `pixels[i * height * width * channels..][..height * width * channels]`, rows
    /// top to bottom, each pixel's channels together (RGB order for 3), with `labels[i]`.
    ///
    /// `name` names the samples in errors (`CIFAR10[17]`).
    pub fn new(
        pixels: Vec<u8>,
        labels: Vec<i64>,
        [height, width, channels]: [usize; 3],
        name: impl Into<String>,
    ) -> Result<Self> {
        let magic = match channels {
            1 => "P5",
            3 => "P6",
            _ => {
                return Err(LoaderError::invalid(
                    "images",
                    format!("{channels} channels per pixel; expected 1 (grayscale) or 3 (RGB)"),
                ))
            }
        };
        if height == 0 || width == 0 {
            return Err(LoaderError::invalid(
                "images",
                format!("images of {height}x{width} pixels"),
            ));
        }
        let image_len = height
            .checked_mul(width)
            .and_then(|n| n.checked_mul(channels))
            .ok_or_else(|| LoaderError::invalid("images", "the image size overflows"))?;
        let expected = image_len.checked_mul(labels.len());
        if expected != Some(pixels.len()) {
            return Err(LoaderError::invalid(
                "images",
                format!(
                    "{} bytes of pixels for {} labels of {height}x{width}x{channels} images",
                    pixels.len(),
                    labels.len()
                ),
            ));
        }
        Ok(ImageArray {
            pixels,
            labels,
            height,
            width,
            channels,
            header: format!("{magic}\n{width} {height}\n255\n").into_bytes(),
            name: name.into(),
        })
    }

    /// `(height, width, channels)` of every image.
    pub fn image_shape(&self) -> [usize; 3] {
        [self.height, self.width, self.channels]
    }

    /// Every image's bytes, in index order.
    pub fn pixels(&self) -> &[u8] {
        &self.pixels
    }

    /// Every sample's label, in index order.
    pub fn labels(&self) -> &[i64] {
        &self.labels
    }

    /// What samples are called in errors.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The pixels of image `index`.
    pub fn image(&self, index: usize) -> &[u8] {
        let len = self.height * self.width * self.channels;
        &self.pixels[index * len..(index + 1) * len]
    }
}

impl Source for ImageArray {
    fn len(&self) -> usize {
        self.labels.len()
    }

    fn read<'a>(&'a self, index: usize, buf: &'a mut Vec<u8>) -> io::Result<&'a [u8]> {
        let image = self.image(index);
        buf.clear();
        buf.reserve(self.header.len() + image.len());
        buf.extend_from_slice(&self.header);
        buf.extend_from_slice(image);
        Ok(buf)
    }

    fn label(&self, index: usize) -> i64 {
        self.labels[index]
    }

    fn path(&self, index: usize) -> Cow<'_, Path> {
        Cow::Owned(PathBuf::from(format!("{}[{index}]", self.name)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_is_its_pixels_behind_a_pnm_header() {
        let pixels: Vec<u8> = (0..2 * 2 * 3 * 3).map(|v| v as u8).collect();
        let ds = ImageArray::new(pixels, vec![7, 9], [2, 3, 3], "CIFAR10").expect("valid");
        let mut buf = Vec::new();
        let sample = ds.read(1, &mut buf).expect("in memory");
        let (header, image) = sample.split_at(b"P6\n3 2\n255\n".len());
        assert_eq!(header, b"P6\n3 2\n255\n");
        assert_eq!(image, (18..36).map(|v| v as u8).collect::<Vec<_>>());
        assert_eq!(ds.label(1), 9);
        assert_eq!(ds.path(1).to_str(), Some("CIFAR10[1]"));

        let gray = ImageArray::new(vec![1, 2, 3, 4], vec![0], [2, 2, 1], "MNIST").expect("valid");
        assert!(gray
            .read(0, &mut buf)
            .expect("in memory")
            .starts_with(b"P5\n2 2\n255\n"));
    }

    #[test]
    fn shapes_that_do_not_add_up_are_refused() {
        let refused = |pixels: usize, labels: usize, shape| {
            ImageArray::new(vec![0; pixels], vec![0; labels], shape, "x")
                .expect_err("refused")
                .to_string()
        };
        assert!(refused(12, 1, [2, 2, 4]).contains("4 channels"));
        assert!(refused(0, 1, [0, 2, 3]).contains("0x2"));
        assert!(refused(11, 1, [2, 2, 3]).contains("11 bytes of pixels for 1 labels"));
        assert!(refused(12, 2, [2, 2, 3]).contains("for 2 labels"));
        assert!(refused(0, 1, [usize::MAX, 2, 3]).contains("overflows"));
    }
}
