//! Geometric ops on packed RGB (affine with a fill, flips, padding, blur) and erasing on a CHW
//! tensor, with the arithmetic torchvision's PIL path performs, so that outputs match it.
//!
//! - [`affine`]: Pillow's affine engines (NEAREST, BILINEAR and BICUBIC bit-exact; BILINEAR on
//!   AVX2 or AVX-512 where the CPU has them, `affine_x86`, and BICUBIC four or eight pixels a
//!   step on AVX2 or AVX-512, `cubic_x86`, each with the scalar path's bits) and the matrices of torchvision's
//!   `F.affine` and Pillow's `Image.rotate`: Rotate, ShearX/Y, TranslateX/Y of the policies,
//!   RandomRotation, RandomAffine.
//! - [`perspective`](mod@perspective): torchvision's `F.perspective` (RandomPerspective): the
//!   coefficient solve and Pillow's perspective transform, sharing the affine warp's BILINEAR
//!   and BICUBIC filters.
//! - [`pad`]: Pad and RandomCrop's padding (constant, edge, reflect, symmetric).
//! - [`blur`]: GaussianBlur, separable, within one level of torchvision.
//! - [`erase`](mod@erase): RandomErasing's write into the normalized tensor.
//! - [`vflip`]: RandomVerticalFlip, in place.
//!
//! [`parse_fill`] turns torchvision's `fill` into the triple every op takes.
//!
//! Parameters come in already drawn; scratch structs ([`AffineWarp`], [`Padder`],
//! [`GaussianBlur`]) only grow. Must not allocate per sample once warm, draw random numbers, or
//! panic on input.

pub mod affine;
#[cfg(target_arch = "x86_64")]
mod affine_x86;
pub mod blur;
#[cfg(target_arch = "x86_64")]
mod cubic_x86;
pub mod erase;
pub mod pad;
pub mod perspective;

pub use affine::{
    affine_center, inverse_affine_matrix, rotate_expand_matrix, rotate_matrix, AffineMatrix,
    AffineWarp, Interpolation,
};
pub use blur::{gaussian_kernel1d, GaussianBlur};
pub use erase::{erase, EraseValue};
pub use pad::{Padder, Padding, PaddingMode, RandomCropSpec};
pub use perspective::{
    image_corners, perspective, perspective_coeffs, perspective_warp, perspective_warp_simd,
    Corners, PerspectiveCoeffs,
};

use crate::error::{Error, Result};
use crate::image::RgbImage;

/// The RGB triple torchvision's `fill` becomes on a PIL image (`_parse_fill`, then Pillow's
/// colour conversion): None -> black; one number for every channel; else one per channel; each
/// truncated toward zero as Python's `int()` does, then clipped to 0..=255 as Pillow does
/// (`(300, -5, 0)` fills with `(255, 0, 0)`).
///
/// Errors where torchvision does: a sequence of neither 1 nor 3 values, or a value `int()`
/// refuses (NaN, infinite).
pub fn parse_fill(fill: Option<&[f64]>) -> Result<[u8; 3]> {
    let values = match fill {
        None => return Ok([0; 3]),
        Some(v) => v,
    };
    let channel = |v: f64| {
        if v.is_finite() {
            Ok(v.trunc().clamp(0.0, 255.0) as u8)
        } else {
            Err(Error::invalid(
                "fill",
                format!("{v} is not a finite number"),
            ))
        }
    };
    match *values {
        [v] => Ok([channel(v)?; 3]),
        [r, g, b] => Ok([channel(r)?, channel(g)?, channel(b)?]),
        _ => Err(Error::invalid(
            "fill",
            format!(
                "{} values for a 3-channel image (expected 1 or 3)",
                values.len()
            ),
        )),
    }
}

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
    fn fill_follows_torchvision_and_pillow() {
        // Observed with torchvision 0.29 / Pillow 13 (F.affine with a translate, pixel (0, 0)).
        assert_eq!(parse_fill(None).ok(), Some([0, 0, 0]));
        assert_eq!(
            parse_fill(Some(&[300.0, -5.0, 0.0])).ok(),
            Some([255, 0, 0])
        );
        assert_eq!(
            parse_fill(Some(&[255.9, 0.5, -0.7])).ok(),
            Some([255, 0, 0])
        );
        assert_eq!(parse_fill(Some(&[128.7])).ok(), Some([128, 128, 128]));
        assert_eq!(parse_fill(Some(&[-1.0])).ok(), Some([0, 0, 0]));
        assert_eq!(parse_fill(Some(&[256.0])).ok(), Some([255, 255, 255]));
        assert!(parse_fill(Some(&[1.0, 2.0])).is_err());
        assert!(parse_fill(Some(&[f64::NAN])).is_err());
    }

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
