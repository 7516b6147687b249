//! Geometric ops on packed RGB (affine with a fill, flips, padding, blur) and erasing on a CHW
//! tensor, with the arithmetic torchvision's PIL path performs, so that outputs match it.
//!
//! - [`affine`]: Pillow's affine engines (NEAREST and BILINEAR bit-exact)
//!   and the matrices of torchvision's `F.affine` and Pillow's `Image.rotate`: Rotate, ShearX/Y,
//!   TranslateX/Y of the policies, RandomRotation, RandomAffine.
//! - [`pad`]: Pad and RandomCrop's padding (constant, edge, reflect, symmetric).
//! - [`blur`]: GaussianBlur, separable, within one level of torchvision.
//! - [`erase`]: RandomErasing's write into the normalized tensor.
//! - [`vflip`]: RandomVerticalFlip, in place.
//!
//! Parameters come in already drawn; scratch structs ([`AffineWarp`], [`Padder`],
//! [`GaussianBlur`]) only grow. Must not allocate per sample once warm, draw random numbers, or
//! panic on input.

pub mod affine;
pub mod blur;
pub mod erase;
pub mod pad;

pub use affine::{
    affine_center, inverse_affine_matrix, rotate_matrix, AffineMatrix, AffineWarp, Interpolation,
};
pub use blur::{gaussian_kernel1d, GaussianBlur};
pub use erase::{erase, EraseValue};
pub use pad::{Padder, Padding, PaddingMode, RandomCropSpec};

use crate::image::RgbImage;

/// Pillow's `transpose(FLIP_TOP_BOTTOM)` (torchvision's `F.vflip` on a PIL image), in place:
/// rows swapped pairwise, no scratch.
pub fn vflip(img: &mut RgbImage) {
    let row_len = 3 * img.width() as usize;
    let h = img.height() as usize;
    if row_len == 0 || h < 2 {
        return;
    }
    let data = img.as_raw_mut();
    let (top, rest) = data.split_at_mut(row_len * (h / 2));
    // The middle row of an odd height stays.
    let bottom = &mut rest[row_len * (h % 2)..];
    for (a, b) in top
        .chunks_exact_mut(row_len)
        .zip(bottom.chunks_exact_mut(row_len).rev())
    {
        a.swap_with_slice(b);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vflip_reverses_rows_and_is_an_involution() {
        for h in [1u32, 2, 5, 6] {
            let data: Vec<u8> = (0..3 * 2 * h).map(|v| v as u8).collect();
            let mut img = RgbImage::from_raw(2, h, data.clone()).expect("sizes match");
            vflip(&mut img);
            for y in 0..h as usize {
                let src = h as usize - 1 - y;
                assert_eq!(&img.as_raw()[6 * y..6 * y + 6], &data[6 * src..6 * src + 6]);
            }
            vflip(&mut img);
            assert_eq!(img.as_raw(), &data[..]);
        }
    }
}
