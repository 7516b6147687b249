//! torchvision's `F.erase` as `RandomErasing` calls it, on one CHW float32 sample (the batch
//! slot after Normalize): `img[..., i:i+h, j:j+w] = v`.
//!
//! Must not: draw the rectangle or the random values (the policy module draws them, as
//! `RandomErasing.get_params` does), allocate, or touch anything outside the rectangle.

use crate::error::{Error, Result};
use crate::image::CropRect;

/// What an erased rectangle is filled with.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum EraseValue<'a> {
    /// torchvision's `value` as a number or a sequence (`torch.tensor(value)[:, None, None]`,
    /// float32): one value per channel, or one value broadcast to every channel.
    PerChannel(&'a [f32]),
    /// torchvision's `value="random"`: `channels * height * width` values of the rectangle in
    /// CHW order (torch's `torch.empty([c, h, w]).normal_()`), drawn by the caller.
    Source(&'a [f32]),
}

/// `slot[c, rect] = value` on a `channels` x `height` x `width` float32 tensor.
///
/// Errors when `slot` is not `channels * height * width` long, the rectangle does not lie inside
/// the image, or `value` has the wrong length (torch would fail to broadcast). An empty
/// rectangle erases nothing.
pub fn erase(
    slot: &mut [f32],
    channels: usize,
    height: usize,
    width: usize,
    rect: CropRect,
    value: EraseValue<'_>,
) -> Result<()> {
    let plane = height
        .checked_mul(width)
        .ok_or_else(|| Error::invalid("img", "height * width overflows"))?;
    if Some(slot.len()) != plane.checked_mul(channels) {
        return Err(Error::invalid(
            "img",
            format!(
                "{} floats for a {channels}x{height}x{width} tensor",
                slot.len()
            ),
        ));
    }
    let (top, left) = (rect.top as usize, rect.left as usize);
    let (h, w) = (rect.height as usize, rect.width as usize);
    if top + h > height || left + w > width {
        return Err(Error::invalid(
            "rect",
            format!("{rect:?} does not fit in a {width}x{height} image"),
        ));
    }
    match value {
        EraseValue::PerChannel(v) if v.len() == channels || v.len() == 1 => {
            for c in 0..channels {
                let val = v[if v.len() == 1 { 0 } else { c }];
                for y in top..top + h {
                    let start = c * plane + y * width + left;
                    slot[start..start + w].fill(val);
                }
            }
        }
        EraseValue::Source(v) if v.len() == channels * h * w => {
            if w == 0 {
                return Ok(());
            }
            for (k, src) in v.chunks_exact(w).enumerate() {
                let (c, y) = (k / h, top + k % h);
                let start = c * plane + y * width + left;
                slot[start..start + w].copy_from_slice(src);
            }
        }
        EraseValue::PerChannel(v) | EraseValue::Source(v) => {
            return Err(Error::invalid(
                "value",
                format!(
                    "{} values do not fill a {channels}x{h}x{w} rectangle",
                    v.len()
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_only_the_rectangle() {
        let mut t = vec![9.0f32; 2 * 3 * 4];
        let rect = CropRect {
            top: 1,
            left: 2,
            height: 2,
            width: 1,
        };
        erase(&mut t, 2, 3, 4, rect, EraseValue::PerChannel(&[1.0, -2.0])).expect("fits");
        let erased: Vec<usize> = (0..t.len()).filter(|&i| t[i] != 9.0).collect();
        assert_eq!(erased, [6, 10, 18, 22]);
        assert_eq!((t[6], t[22]), (1.0, -2.0));
        erase(
            &mut t,
            2,
            3,
            4,
            rect,
            EraseValue::Source(&[5.0, 6.0, 7.0, 8.0]),
        )
        .expect("fits");
        assert_eq!((t[6], t[10], t[18], t[22]), (5.0, 6.0, 7.0, 8.0));
        assert!(erase(&mut t, 2, 3, 4, rect, EraseValue::Source(&[1.0])).is_err());
        let outside = CropRect { top: 2, ..rect };
        assert!(erase(&mut t, 2, 3, 4, outside, EraseValue::PerChannel(&[0.0])).is_err());
    }
}
