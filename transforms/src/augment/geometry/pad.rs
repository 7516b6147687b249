//! torchvision's `Pad` and `RandomCrop`'s padding on a PIL image: `ImageOps.expand` for the
//! constant mode, `np.pad` for edge, reflect and symmetric, then `img.crop`.
//!
//! Every output pixel is a source pixel or the fill, so the ops are index maps: one table per
//! axis (output coordinate -> source coordinate or fill), composed when `RandomCrop` pads twice
//! (its `padding`, then `pad_if_needed`, each reflecting what the previous one produced), and
//! only the cropped window is ever written. Bit-exact by construction.
//!
//! Must not: allocate once warm (tables live in [`Padder`] and only grow), accept negative
//! padding (torchvision crops then; the caller refuses it), or draw the crop position.

use crate::error::{Error, Result};
use crate::image::{RgbImage, RgbView};

use super::affine::fill_pixels;

/// torchvision's `padding_mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum PaddingMode {
    /// The fill colour (`ImageOps.expand`).
    #[default]
    Constant,
    /// The nearest edge pixel repeated (`np.pad(mode="edge")`).
    Edge,
    /// Mirrored without repeating the edge: `d c b | a b c d | c b a` (`np.pad(mode="reflect")`;
    /// a one-pixel axis repeats its pixel, as numpy does).
    Reflect,
    /// Mirrored with the edge repeated: `c b a | a b c d | d c b` (`np.pad(mode="symmetric")`).
    Symmetric,
}

/// Pixels added on each side, torchvision's `padding` argument in any of its forms.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Padding {
    /// Columns added on the left.
    pub left: u32,
    /// Rows added on top.
    pub top: u32,
    /// Columns added on the right.
    pub right: u32,
    /// Rows added at the bottom.
    pub bottom: u32,
}

impl Padding {
    /// `padding=p` (an int, or a one-element sequence): `p` on every side.
    pub fn all(p: u32) -> Self {
        Padding {
            left: p,
            top: p,
            right: p,
            bottom: p,
        }
    }

    /// `padding=[lr, tb]`: `lr` left and right, `tb` top and bottom.
    pub fn lr_tb(lr: u32, tb: u32) -> Self {
        Padding {
            left: lr,
            top: tb,
            right: lr,
            bottom: tb,
        }
    }

    /// `padding=[left, top, right, bottom]`.
    pub fn ltrb(left: u32, top: u32, right: u32, bottom: u32) -> Self {
        Padding {
            left,
            top,
            right,
            bottom,
        }
    }

    /// The size of a `width` x `height` image once padded, or `None` past `u32`.
    pub fn padded_size(&self, width: u32, height: u32) -> Option<(u32, u32)> {
        let w = width.checked_add(self.left)?.checked_add(self.right)?;
        let h = height.checked_add(self.top)?.checked_add(self.bottom)?;
        Some((w, h))
    }
}

/// torchvision's `RandomCrop(size, padding, pad_if_needed, fill, padding_mode)`, its random
/// draw excepted: the caller draws `(top, left)` over [`RandomCropSpec::padded_size`] as
/// `RandomCrop.get_params` does and hands it to [`Padder::random_crop`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RandomCropSpec {
    /// Output height (torchvision's `size[0]`).
    pub height: u32,
    /// Output width (torchvision's `size[1]`).
    pub width: u32,
    /// `padding`, applied first when given.
    pub padding: Option<Padding>,
    /// Pad each side of the width by `width - w` when the (padded) image is narrower than the
    /// output, then each side of the height likewise (torchvision pads by the full shortfall on
    /// both sides, not half).
    pub pad_if_needed: bool,
    /// The constant mode's colour (torchvision's `fill` after `_parse_fill`).
    pub fill: [u8; 3],
    /// `padding_mode`, for both paddings.
    pub mode: PaddingMode,
}

/// Marks a fill position in an index table.
const FILL: u32 = u32::MAX;

/// One padding of one axis: `before` + `n` + `after` positions.
#[derive(Clone, Copy, Debug)]
struct Stage {
    n: u32,
    before: u32,
    after: u32,
}

impl Stage {
    fn out_len(&self) -> u64 {
        u64::from(self.n) + u64::from(self.before) + u64::from(self.after)
    }

    /// The input position output position `o` shows, or [`FILL`]. `n > 0`.
    fn map(&self, o: u32, mode: PaddingMode) -> u32 {
        if o == FILL {
            return FILL;
        }
        let n = i64::from(self.n);
        let i = i64::from(o) - i64::from(self.before);
        if (0..n).contains(&i) {
            return i as u32;
        }
        let m = match mode {
            PaddingMode::Constant => return FILL,
            PaddingMode::Edge => i.clamp(0, n - 1),
            PaddingMode::Reflect if n == 1 => 0,
            PaddingMode::Reflect => {
                let period = 2 * (n - 1);
                let m = i.rem_euclid(period);
                if m >= n {
                    period - m
                } else {
                    m
                }
            }
            PaddingMode::Symmetric => {
                let period = 2 * n;
                let m = i.rem_euclid(period);
                if m >= n {
                    period - 1 - m
                } else {
                    m
                }
            }
        };
        m as u32
    }
}

/// Reusable index tables for padding and `RandomCrop`; they only grow.
#[derive(Clone, Debug, Default)]
pub struct Padder {
    /// Per output row: the source row or [`FILL`].
    rows: Vec<u32>,
    /// Per output column: the source column or [`FILL`].
    cols: Vec<u32>,
    /// `cols` as runs: (output length, first source column or [`FILL`]).
    runs: Vec<(u32, u32)>,
}

impl Padder {
    /// Empty tables; the first call sizes them.
    pub fn new() -> Self {
        Self::default()
    }

    /// torchvision's `F.pad(img, padding, fill, padding_mode)` on a PIL image, into `out`
    /// (resized to the padded size). Errors on an empty source or a size past `u32`.
    pub fn pad(
        &mut self,
        src: RgbView<'_>,
        padding: Padding,
        mode: PaddingMode,
        fill: [u8; 3],
        out: &mut RgbImage,
    ) -> Result<()> {
        let (w, h) = check_source(src)?;
        let (ow, oh) = padding
            .padded_size(w, h)
            .ok_or_else(|| Error::invalid("padding", format!("{padding:?} overflows")))?;
        let sx = Stage {
            n: w,
            before: padding.left,
            after: padding.right,
        };
        let sy = Stage {
            n: h,
            before: padding.top,
            after: padding.bottom,
        };
        fill_table(&mut self.cols, 0, ow, &[sx], mode);
        fill_table(&mut self.rows, 0, oh, &[sy], mode);
        self.remap(src, fill, ow, oh, out);
        Ok(())
    }

    /// torchvision's `RandomCrop.forward` with `get_params` returning `(top, left)`: pad by
    /// `spec.padding`, pad where `spec.pad_if_needed` asks, crop `spec.height` x `spec.width` at
    /// `(top, left)`, into `out`. Only the window is computed. Errors when the window does not
    /// fit in the padded image (torchvision's `get_params` raises then).
    pub fn random_crop(
        &mut self,
        src: RgbView<'_>,
        spec: &RandomCropSpec,
        top: u32,
        left: u32,
        out: &mut RgbImage,
    ) -> Result<()> {
        let (w, h) = check_source(src)?;
        let [sx, sx2, sy, sy2] = crop_stages(spec, w, h)?;
        let (pw, ph) = (sx2.out_len(), sy2.out_len());
        if spec.width == 0
            || spec.height == 0
            || u64::from(left) + u64::from(spec.width) > pw
            || u64::from(top) + u64::from(spec.height) > ph
        {
            return Err(Error::invalid(
                "size",
                format!(
                    "a {}x{} crop at (top {top}, left {left}) does not fit in the padded {pw}x{ph} image",
                    spec.width, spec.height
                ),
            ));
        }
        fill_table(&mut self.cols, left, spec.width, &[sx2, sx], spec.mode);
        fill_table(&mut self.rows, top, spec.height, &[sy2, sy], spec.mode);
        self.remap(src, spec.fill, spec.width, spec.height, out);
        Ok(())
    }

    /// Writes `out` (`ow` x `oh`) from the tables.
    fn remap(&mut self, src: RgbView<'_>, fill: [u8; 3], ow: u32, oh: u32, out: &mut RgbImage) {
        self.runs.clear();
        // At most one run per column: reserved up front so that a source with more mirrored
        // runs than the last one does not grow the table mid-sample.
        self.runs.reserve(self.cols.len());
        for &c in &self.cols {
            match self.runs.last_mut() {
                Some((len, start))
                    if (*start == FILL && c == FILL)
                        || (*start != FILL && c != FILL && c == *start + *len) =>
                {
                    *len += 1
                }
                _ => self.runs.push((1, c)),
            }
        }
        let dst = out.reset(ow, oh);
        let row_len = 3 * ow as usize;
        if row_len == 0 {
            return;
        }
        for (row, &r) in dst.chunks_exact_mut(row_len).zip(&self.rows) {
            if r == FILL {
                fill_pixels(row, fill);
                continue;
            }
            let srow = src.row(r);
            let mut x = 0;
            for &(len, start) in &self.runs {
                let seg = &mut row[3 * x..3 * (x + len as usize)];
                if start == FILL {
                    fill_pixels(seg, fill);
                } else {
                    let s = 3 * start as usize;
                    seg.copy_from_slice(&srow[s..s + seg.len()]);
                }
                x += len as usize;
            }
        }
    }
}

impl RandomCropSpec {
    /// torchvision v2's `RandomCrop`: it adds what `pad_if_needed` asks to `padding` and pads
    /// once, where v1 pads twice (so v1's second padding reflects the first one's border). The
    /// returned spec, given to [`Padder::random_crop`], reproduces v2 for a `width` x `height`
    /// source; `self` reproduces v1. Both agree in the constant and edge modes.
    pub fn v2_single_padding(&self, width: u32, height: u32) -> Result<RandomCropSpec> {
        let [sx, sx2, sy, sy2] = crop_stages(self, width, height)?;
        let sum = |a: u32, b: u32| {
            a.checked_add(b)
                .ok_or_else(|| Error::invalid("padding", "the padded size overflows u32"))
        };
        Ok(RandomCropSpec {
            padding: Some(Padding::ltrb(
                sum(sx.before, sx2.before)?,
                sum(sy.before, sy2.before)?,
                sum(sx.after, sx2.after)?,
                sum(sy.after, sy2.after)?,
            )),
            pad_if_needed: false,
            ..*self
        })
    }

    /// The size `RandomCrop.get_params` sees, as (width, height): the image after `padding` and
    /// `pad_if_needed`. Errors on a size past `u32`.
    pub fn padded_size(&self, width: u32, height: u32) -> Result<(u32, u32)> {
        let [_, sx2, _, sy2] = crop_stages(self, width, height)?;
        let big = || Error::invalid("padding", "the padded size overflows u32");
        let w = u32::try_from(sx2.out_len()).map_err(|_| big())?;
        let h = u32::try_from(sy2.out_len()).map_err(|_| big())?;
        Ok((w, h))
    }
}

/// Refuses empty sources (nothing to reflect or repeat).
fn check_source(src: RgbView<'_>) -> Result<(u32, u32)> {
    let (w, h) = (src.width(), src.height());
    if w == 0 || h == 0 {
        return Err(Error::invalid(
            "img",
            format!("cannot pad an empty {w}x{h} image"),
        ));
    }
    Ok((w, h))
}

/// The two paddings of each axis `RandomCrop` applies: [x by `padding`, x by `pad_if_needed`,
/// y by `padding`, y by `pad_if_needed`] (absent ones are zero-width).
fn crop_stages(spec: &RandomCropSpec, w: u32, h: u32) -> Result<[Stage; 4]> {
    let p = spec.padding.unwrap_or_default();
    let (w1, h1) = p
        .padded_size(w, h)
        .ok_or_else(|| Error::invalid("padding", format!("{p:?} overflows")))?;
    let extra = |have: u32, want: u32| {
        if spec.pad_if_needed && have < want {
            want - have
        } else {
            0
        }
    };
    let (ex, ey) = (extra(w1, spec.width), extra(h1, spec.height));
    let sx = Stage {
        n: w,
        before: p.left,
        after: p.right,
    };
    let sy = Stage {
        n: h,
        before: p.top,
        after: p.bottom,
    };
    let sx2 = Stage {
        n: w1,
        before: ex,
        after: ex,
    };
    let sy2 = Stage {
        n: h1,
        before: ey,
        after: ey,
    };
    if sx2.out_len() > u64::from(FILL - 1) || sy2.out_len() > u64::from(FILL - 1) {
        return Err(Error::invalid("padding", "the padded size overflows u32"));
    }
    Ok([sx, sx2, sy, sy2])
}

/// `table[k]` = the source position of output position `start + k` through `stages`, outermost
/// first.
fn fill_table(table: &mut Vec<u32>, start: u32, len: u32, stages: &[Stage], mode: PaddingMode) {
    table.clear();
    table.extend((start..start + len).map(|o| stages.iter().fold(o, |p, s| s.map(p, mode))));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(mode: PaddingMode, n: u32, before: u32, after: u32) -> Vec<u32> {
        let s = Stage { n, before, after };
        (0..n + before + after).map(|o| s.map(o, mode)).collect()
    }

    #[test]
    fn axis_maps_follow_numpy() {
        // np.pad(np.arange(4), 3, mode)
        assert_eq!(
            line(PaddingMode::Reflect, 4, 3, 3),
            [3, 2, 1, 0, 1, 2, 3, 2, 1, 0]
        );
        assert_eq!(
            line(PaddingMode::Symmetric, 4, 3, 3),
            [2, 1, 0, 0, 1, 2, 3, 3, 2, 1]
        );
        assert_eq!(line(PaddingMode::Edge, 4, 2, 1), [0, 0, 0, 1, 2, 3, 3]);
        assert_eq!(line(PaddingMode::Constant, 2, 1, 1), [FILL, 0, 1, FILL]);
        assert_eq!(line(PaddingMode::Reflect, 1, 2, 1), [0, 0, 0, 0]);
    }
}
