//! The pixel buffer every op reads and writes: packed 8-bit RGB, reused across samples.
//!
//! Must not shrink or reallocate when a smaller image follows a larger one: page faults on fresh
//! memory cost more than the ops themselves (about 3 us per 4 KiB page on our machines).

use crate::error::{Error, Result};

/// Grows `buf` to at least `len` bytes (new bytes zero), failing with [`Error::OutOfMemory`]
/// where the allocator refuses instead of aborting the process. Never shrinks.
pub fn grow_zeroed(buf: &mut Vec<u8>, len: usize) -> Result<()> {
    if buf.len() < len {
        buf.try_reserve_exact(len - buf.len())
            .map_err(|_| Error::OutOfMemory { bytes: len })?;
        buf.resize(len, 0);
    }
    Ok(())
}

/// A rectangle in torchvision's order: `top`, `left`, `height`, `width` (`i, j, h, w`).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
pub struct CropRect {
    /// First row.
    pub top: u32,
    /// First column.
    pub left: u32,
    /// Rows.
    pub height: u32,
    /// Columns.
    pub width: u32,
}

impl CropRect {
    /// The whole of a `width` x `height` image.
    pub fn full(width: u32, height: u32) -> Self {
        CropRect {
            top: 0,
            left: 0,
            height,
            width,
        }
    }

    /// One past the last row.
    pub fn bottom(&self) -> u32 {
        self.top + self.height
    }

    /// One past the last column.
    pub fn right(&self) -> u32 {
        self.left + self.width
    }

    /// Whether the rectangle is non-empty and lies inside a `width` x `height` image.
    pub fn fits_in(&self, width: u32, height: u32) -> bool {
        self.width > 0
            && self.height > 0
            && u64::from(self.left) + u64::from(self.width) <= u64::from(width)
            && u64::from(self.top) + u64::from(self.height) <= u64::from(height)
    }
}

/// Packed 8-bit RGB pixels, row stride `3 * width`, owning a buffer that only grows.
#[derive(Clone, Debug, Default)]
pub struct RgbImage {
    width: u32,
    height: u32,
    /// The pixels, then whatever a larger earlier image left: `data` keeps the length of the
    /// largest image so far, so that a decode into it never zero-fills what it will overwrite
    /// (`Vec::resize` fills every byte a smaller image had truncated away).
    data: Vec<u8>,
}

impl PartialEq for RgbImage {
    fn eq(&self, other: &Self) -> bool {
        (self.width, self.height) == (other.width, other.height) && self.as_raw() == other.as_raw()
    }
}

impl Eq for RgbImage {}

impl RgbImage {
    /// An empty image; the first decode sizes it.
    pub fn new() -> Self {
        Self::default()
    }

    /// Wraps packed RGB pixels; `data.len()` must be `3 * width * height`.
    pub fn from_raw(width: u32, height: u32, data: Vec<u8>) -> Result<Self> {
        let expected = 3 * width as usize * height as usize;
        if data.len() != expected {
            return Err(Error::invalid(
                "data",
                format!(
                    "{} bytes for a {width}x{height} RGB image, expected {expected}",
                    data.len()
                ),
            ));
        }
        Ok(RgbImage {
            width,
            height,
            data,
        })
    }

    /// Width in pixels.
    pub fn width(&self) -> u32 {
        self.width
    }

    /// Height in pixels.
    pub fn height(&self) -> u32 {
        self.height
    }

    /// The packed pixels, `3 * width * height` bytes.
    pub fn as_raw(&self) -> &[u8] {
        &self.data[..self.byte_len()]
    }

    /// Mutable packed pixels.
    pub fn as_raw_mut(&mut self) -> &mut [u8] {
        let len = self.byte_len();
        &mut self.data[..len]
    }

    /// Gives the buffer up.
    pub fn into_raw(mut self) -> Vec<u8> {
        self.data.truncate(self.byte_len());
        self.data
    }

    /// `3 * width * height`.
    fn byte_len(&self) -> usize {
        3 * self.width as usize * self.height as usize
    }

    /// Bytes of its allocation, which is kept for the largest image so far.
    pub fn retained_bytes(&self) -> usize {
        self.data.capacity()
    }

    /// [`Self::reset`] for a size that comes from a file: the allocator's refusal is
    /// [`Error::OutOfMemory`], not an abort.
    pub fn try_reset(&mut self, width: u32, height: u32) -> Result<&mut [u8]> {
        let len = (width as usize)
            .checked_mul(height as usize)
            .and_then(|n| n.checked_mul(3))
            .ok_or(Error::OutOfMemory { bytes: usize::MAX })?;
        grow_zeroed(&mut self.data, len)?;
        Ok(self.reset(width, height))
    }

    /// Sets the size and returns the pixels to overwrite. Keeps the allocation when it is big
    /// enough; the contents are unspecified.
    pub fn reset(&mut self, width: u32, height: u32) -> &mut [u8] {
        self.width = width;
        self.height = height;
        let len = self.byte_len();
        if self.data.len() < len {
            self.data.resize(len, 0);
        }
        &mut self.data[..len]
    }

    /// A borrowed view of the whole image.
    pub fn view(&self) -> RgbView<'_> {
        RgbView {
            data: self.as_raw(),
            width: self.width,
            height: self.height,
            stride: 3 * self.width as usize,
        }
    }

    /// A borrowed view of `rect`, without copying.
    pub fn crop_view(&self, rect: CropRect) -> Result<RgbView<'_>> {
        self.view().crop(rect)
    }
}

/// A borrowed RGB region: `height` rows of `width` pixels, rows `stride` bytes apart.
#[derive(Clone, Copy, Debug)]
pub struct RgbView<'a> {
    data: &'a [u8],
    width: u32,
    height: u32,
    stride: usize,
}

impl<'a> RgbView<'a> {
    /// A view over packed rows with the given stride (bytes between row starts).
    pub fn new(data: &'a [u8], width: u32, height: u32, stride: usize) -> Result<Self> {
        let row = 3 * width as usize;
        if stride < row {
            return Err(Error::invalid(
                "stride",
                format!("{stride} bytes is less than a row of {width} RGB pixels"),
            ));
        }
        let needed = if height == 0 {
            0
        } else {
            stride * (height as usize - 1) + row
        };
        if data.len() < needed {
            return Err(Error::invalid(
                "data",
                format!(
                    "{} bytes cannot hold {width}x{height} pixels at stride {stride}",
                    data.len()
                ),
            ));
        }
        Ok(RgbView {
            data,
            width,
            height,
            stride,
        })
    }

    /// Width in pixels.
    pub fn width(&self) -> u32 {
        self.width
    }

    /// Height in pixels.
    pub fn height(&self) -> u32 {
        self.height
    }

    /// Bytes between the starts of consecutive rows.
    pub fn stride(&self) -> usize {
        self.stride
    }

    /// The bytes the view was made over: row `y` starts at `y * stride`, and at least
    /// `stride * (height - 1) + 3 * width` of them are there (for kernels that address pixels
    /// by offset from the first row).
    pub(crate) fn bytes(&self) -> &'a [u8] {
        self.data
    }

    /// Row `y` as `3 * width` bytes. Panics if `y >= height` (a caller bug, not an input error).
    pub fn row(&self, y: u32) -> &'a [u8] {
        let start = y as usize * self.stride;
        &self.data[start..start + 3 * self.width as usize]
    }

    /// A sub-view; errors if `rect` does not fit.
    pub fn crop(&self, rect: CropRect) -> Result<RgbView<'a>> {
        if !rect.fits_in(self.width, self.height) {
            return Err(Error::invalid(
                "crop",
                format!(
                    "{rect:?} does not fit in a {}x{} image",
                    self.width, self.height
                ),
            ));
        }
        let start = rect.top as usize * self.stride + 3 * rect.left as usize;
        Ok(RgbView {
            data: &self.data[start..],
            width: rect.width,
            height: rect.height,
            stride: self.stride,
        })
    }

    /// Copies the view into a packed image (for op-by-op execution and tests).
    pub fn to_image(&self, out: &mut RgbImage) {
        let buf = out.reset(self.width, self.height);
        let row = 3 * self.width as usize;
        if row == 0 {
            return;
        }
        for (y, dst) in buf.chunks_exact_mut(row).enumerate() {
            dst.copy_from_slice(self.row(y as u32));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crop_view_reads_the_right_pixels() {
        let data: Vec<u8> = (0..4 * 3 * 3).map(|v| v as u8).collect();
        let img = RgbImage::from_raw(4, 3, data).expect("sizes match");
        let rect = CropRect {
            top: 1,
            left: 2,
            height: 2,
            width: 2,
        };
        let view = img.crop_view(rect).expect("fits");
        assert_eq!(view.row(0), &[18, 19, 20, 21, 22, 23]);
        assert_eq!(view.row(1), &[30, 31, 32, 33, 34, 35]);
        let mut out = RgbImage::new();
        view.to_image(&mut out);
        assert_eq!(
            out.as_raw(),
            &[18, 19, 20, 21, 22, 23, 30, 31, 32, 33, 34, 35]
        );
    }

    #[test]
    fn crop_outside_is_an_error_not_a_panic() {
        let img = RgbImage::from_raw(2, 2, vec![0; 12]).expect("sizes match");
        let rect = CropRect {
            top: 1,
            left: 1,
            height: 2,
            width: 1,
        };
        assert!(matches!(
            img.crop_view(rect),
            Err(Error::InvalidArgument { .. })
        ));
        assert!(RgbImage::from_raw(2, 2, vec![0; 11]).is_err());
    }

    #[test]
    fn reset_keeps_capacity() {
        let mut img = RgbImage::new();
        assert!(matches!(
            img.try_reset(u32::MAX, u32::MAX),
            Err(Error::OutOfMemory { .. })
        ));
        let mut buf = vec![1u8; 3];
        assert!(matches!(
            grow_zeroed(&mut buf, isize::MAX as usize),
            Err(Error::OutOfMemory { .. })
        ));
        grow_zeroed(&mut buf, 5).expect("small");
        assert_eq!(buf, [1, 1, 1, 0, 0]);
        img.reset(100, 100);
        let cap = img.data.capacity();
        img.reset(10, 10);
        img.reset(50, 50);
        assert_eq!(img.data.capacity(), cap);
        assert_eq!(img.as_raw().len(), 50 * 50 * 3);
        assert_eq!(img.view().row(49).len(), 50 * 3);
        assert_eq!(img.clone().into_raw().len(), 50 * 50 * 3);
    }

    #[test]
    fn equality_ignores_what_a_larger_image_left_behind() {
        let mut reused = RgbImage::new();
        reused.reset(4, 4).fill(9);
        reused.reset(2, 2).fill(1);
        let fresh = RgbImage::from_raw(2, 2, vec![1; 12]).expect("sizes match");
        assert_eq!(reused, fresh);
        reused.as_raw_mut()[0] = 2;
        assert_ne!(reused, fresh);
    }
}
