//! Crop geometry: torchvision's `RandomResizedCrop.get_params`, `center_crop` (its padding
//! included) and the output size of `Resize(int)`, reproduced to the integer.
//!
//! Only rectangles and sizes are computed here; no pixel is touched (the crop itself is a view,
//! [`crate::RgbView::crop`], and the resize lives in [`crate::resize`]). Must not use a
//! different formula "because it is equivalent": every rounding below mirrors the Python
//! (half-to-even `round`, truncating `int()`, floor `//`) and torch's float32 draws, because a
//! crop one pixel off changes every output pixel.

use crate::error::{Error, Result};
use crate::image::CropRect;
use crate::resize::Filter;
use crate::rng::TorchDraws;

/// Python's `round()` on a float: nearest integer, ties to even.
#[inline]
fn py_round(x: f64) -> f64 {
    x.round_ties_even()
}

/// Converts a rounded, non-negative, in-range float to `u32` (the callers bound it).
#[inline]
fn to_u32(x: f64) -> u32 {
    // `as` saturates and maps NaN to 0; callers only pass values in [0, u32::MAX].
    x as u32
}

/// torchvision's `RandomResizedCrop(size, scale, ratio)` parameters.
///
/// `get_params` follows `RandomResizedCrop.get_params` exactly: ten attempts at an area drawn
/// from `scale * H * W` and a log-uniform aspect ratio from `ratio`, then the centered
/// fallback. The resize to `size` is [`crate::resize`]'s job.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct RandomResizedCrop {
    size: (u32, u32),
    scale: (f64, f64),
    ratio: (f64, f64),
}

/// torchvision's default `scale` for `RandomResizedCrop`.
pub const DEFAULT_SCALE: (f64, f64) = (0.08, 1.0);
/// torchvision's default `ratio` for `RandomResizedCrop`: `(3/4, 4/3)`.
pub const DEFAULT_RATIO: (f64, f64) = (3.0 / 4.0, 4.0 / 3.0);

impl RandomResizedCrop {
    /// The transform with output `size` as `(height, width)`, area fraction range `scale` and
    /// aspect ratio (width / height) range `ratio`.
    ///
    /// torchvision only warns when a range is given as `(max, min)` and then behaves oddly;
    /// we reject it, along with non-finite or negative values, a zero size and ratios <= 0
    /// (whose logarithm torch would turn into NaN).
    pub fn new(size: (u32, u32), scale: (f64, f64), ratio: (f64, f64)) -> Result<Self> {
        if size.0 == 0 || size.1 == 0 {
            return Err(Error::invalid(
                "size",
                format!("{size:?} has a zero side; both must be at least 1"),
            ));
        }
        if !(scale.0.is_finite() && scale.1.is_finite()) || scale.0 < 0.0 {
            return Err(Error::invalid(
                "scale",
                format!("{scale:?}: both bounds must be finite and non-negative"),
            ));
        }
        if scale.0 > scale.1 {
            return Err(Error::invalid(
                "scale",
                format!("{scale:?} should be of kind (min, max)"),
            ));
        }
        if !(ratio.0.is_finite() && ratio.1.is_finite()) || ratio.0 <= 0.0 {
            return Err(Error::invalid(
                "ratio",
                format!("{ratio:?}: both bounds must be finite and positive"),
            ));
        }
        if ratio.0 > ratio.1 {
            return Err(Error::invalid(
                "ratio",
                format!("{ratio:?} should be of kind (min, max)"),
            ));
        }
        Ok(RandomResizedCrop { size, scale, ratio })
    }

    /// `RandomResizedCrop(size)` with torchvision's default scale and ratio.
    pub fn with_defaults(size: (u32, u32)) -> Result<Self> {
        Self::new(size, DEFAULT_SCALE, DEFAULT_RATIO)
    }

    /// Output size as `(height, width)`.
    pub fn size(&self) -> (u32, u32) {
        self.size
    }

    /// Area fraction range `(min, max)`.
    pub fn scale(&self) -> (f64, f64) {
        self.scale
    }

    /// Aspect ratio (width / height) range `(min, max)`.
    pub fn ratio(&self) -> (f64, f64) {
        self.ratio
    }

    /// The crop for a `width` x `height` image, drawn from `draws` in torch's order:
    /// per attempt one scale draw, one log-ratio draw and, when the attempt fits, the row
    /// then the column offset.
    ///
    /// Returns a non-empty rectangle inside the image for any non-empty image. Where
    /// torchvision's fallback would produce an empty crop (a ratio range so far from the
    /// image's shape that the short side rounds to 0) it is widened to 1 pixel rather than
    /// failing later in the resize as torchvision does. An empty image gives an empty rect.
    pub fn get_params<D: TorchDraws + ?Sized>(
        &self,
        width: u32,
        height: u32,
        draws: &mut D,
    ) -> CropRect {
        if width == 0 || height == 0 {
            return CropRect::full(width, height);
        }
        let area = f64::from(width) * f64::from(height);
        // `torch.log(torch.tensor(ratio))`: the ratios become float32 before the log, which
        // is taken in float32.
        let log_lo = (self.ratio.0 as f32).ln();
        let log_hi = (self.ratio.1 as f32).ln();
        // `uniform_(scale[0], scale[1])` casts its bounds to the tensor's float32.
        let (scale_lo, scale_hi) = (self.scale.0 as f32, self.scale.1 as f32);
        for _ in 0..10 {
            let target_area = area * f64::from(draws.uniform_f32(scale_lo, scale_hi));
            // `torch.exp(...)` of a float32 tensor stays float32; `.item()` widens exactly.
            let aspect_ratio = f64::from(draws.uniform_f32(log_lo, log_hi).exp());
            let w = py_round((target_area * aspect_ratio).sqrt());
            let h = py_round((target_area / aspect_ratio).sqrt());
            if 0.0 < w && w <= f64::from(width) && 0.0 < h && h <= f64::from(height) {
                let (w, h) = (to_u32(w), to_u32(h));
                let top = draws.randint(height - h + 1);
                let left = draws.randint(width - w + 1);
                return CropRect {
                    top,
                    left,
                    height: h,
                    width: w,
                };
            }
        }
        self.fallback(width, height)
    }

    /// torchvision's centered fallback after ten failed attempts: the whole image, clamped to
    /// the ratio range (here in float64: the fallback uses the Python floats, not float32).
    pub fn fallback(&self, width: u32, height: u32) -> CropRect {
        let in_ratio = f64::from(width) / f64::from(height);
        let (min_ratio, max_ratio) = (
            self.ratio.0.min(self.ratio.1),
            self.ratio.0.max(self.ratio.1),
        );
        let (w, h) = if in_ratio < min_ratio {
            // width / min_ratio < height, so the rounded value is at most `height`.
            let h = py_round(f64::from(width) / min_ratio).min(f64::from(height));
            (width, to_u32(h).max(1))
        } else if in_ratio > max_ratio {
            let w = py_round(f64::from(height) * max_ratio).min(f64::from(width));
            (to_u32(w).max(1), height)
        } else {
            (width, height)
        };
        CropRect {
            top: (height - h) / 2,
            left: (width - w) / 2,
            height: h,
            width: w,
        }
    }
}

/// The most filters a [`FilterChoice`] chooses among.
pub const MAX_FILTER_CHOICES: usize = 8;

/// The resize filter of a random resized crop, fixed or drawn per sample: timm's
/// `RandomResizedCropAndInterpolation` with a list of interpolations (`'random'`: BILINEAR or
/// BICUBIC) draws `random.choice(list)` right after the crop's draws.
///
/// Invariant: holds 1 to [`MAX_FILTER_CHOICES`] filters (repeats allowed: a list naming one
/// twice weighs it twice, as `random.choice` does).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FilterChoice {
    filters: [Filter; MAX_FILTER_CHOICES],
    len: usize,
}

impl FilterChoice {
    /// Always `filter`: no draw.
    pub fn one(filter: Filter) -> Self {
        FilterChoice {
            filters: [filter; MAX_FILTER_CHOICES],
            len: 1,
        }
    }

    /// A uniform choice among `filters` per sample (one filter: no draw). Errors, naming
    /// `interpolation`, on none or more than [`MAX_FILTER_CHOICES`].
    pub fn new(filters: &[Filter]) -> Result<Self> {
        let Some(&first) = filters.first() else {
            return Err(Error::invalid(
                "interpolation",
                "an empty list: give one filter, or a list to choose from per sample",
            ));
        };
        if filters.len() > MAX_FILTER_CHOICES {
            return Err(Error::invalid(
                "interpolation",
                format!(
                    "{} filters: at most {MAX_FILTER_CHOICES} to choose from",
                    filters.len()
                ),
            ));
        }
        let mut choice = Self::one(first);
        choice.filters[..filters.len()].copy_from_slice(filters);
        choice.len = filters.len();
        Ok(choice)
    }

    /// The filters, in the order drawn into.
    pub fn filters(&self) -> &[Filter] {
        &self.filters[..self.len]
    }

    /// Whether a sample draws its filter (more than one to choose from).
    pub fn draws(&self) -> bool {
        self.len > 1
    }

    /// The index of this sample's filter in [`FilterChoice::filters`]: `randint(len)` when
    /// there are several (`random.choice`'s uniform index), else 0 without a draw.
    pub fn draw_index<D: TorchDraws + ?Sized>(&self, draws: &mut D) -> usize {
        if !self.draws() {
            return 0;
        }
        // `len <= MAX_FILTER_CHOICES`: the cast is exact.
        draws.randint(self.len as u32) as usize
    }

    /// This sample's filter (see [`FilterChoice::draw_index`]).
    pub fn draw<D: TorchDraws + ?Sized>(&self, draws: &mut D) -> Filter {
        let index = self.draw_index(draws);
        // A scripted `randint` out of range falls back to the first filter, not a panic.
        self.filters()
            .get(index)
            .copied()
            .unwrap_or(self.filters[0])
    }
}

/// Python's `int(a / b)` for non-negative ints: a correctly rounded float division, then
/// truncation. Done as Python does it, in f64: exact while `a` and `b` are below 2^53 (both
/// convert exactly and one IEEE division is Python's correctly rounded quotient). Above that a
/// quotient just below an integer could round up to it, so larger operands are rejected.
fn py_int_div_trunc(a: u64, b: u64) -> Result<u64> {
    const EXACT: u64 = 1 << 53;
    if a >= EXACT || b >= EXACT || b == 0 {
        return Err(Error::invalid(
            "size",
            format!("{a} / {b} is outside the sizes this op supports"),
        ));
    }
    Ok((a as f64 / b as f64) as u64)
}

/// torchvision's `center_crop(img, [out_h, out_w])` on a `width` x `height` PIL image: the
/// zero padding it adds where the crop is larger than the image, and the window in the padded
/// image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CenterCrop {
    /// Zero padding `[left, top, right, bottom]`: `(out - side) // 2` before and
    /// `(out - side + 1) // 2` after on an axis the crop is longer than, 0 on the others.
    pub padding: [u32; 4],
    /// The window, in the padded image: top = `int(round((padded_h - out_h) / 2.0))` (half to
    /// even), likewise left; so 0 on a padded axis.
    pub rect: CropRect,
}

impl CenterCrop {
    /// Whether the image is padded first (the crop is larger on some side).
    pub fn pads(&self) -> bool {
        self.padding != [0; 4]
    }
}

/// torchvision's `center_crop(img, [out_h, out_w])` on a `width` x `height` image, padding
/// included (see [`CenterCrop`]). Errors on an empty output size.
pub fn center_crop(width: u32, height: u32, out_h: u32, out_w: u32) -> Result<CenterCrop> {
    if out_h == 0 || out_w == 0 {
        return Err(Error::invalid(
            "size",
            format!("center crop to {out_h}x{out_w}: both sides must be at least 1"),
        ));
    }
    // (shortfall // 2, (shortfall + 1) // 2) on each axis, and the padded side is then `out`.
    let pad = |side: u32, out: u32| {
        let short = out.saturating_sub(side);
        (short / 2, short - short / 2, side.max(out))
    };
    let (left, right, padded_w) = pad(width, out_w);
    let (top, bottom, padded_h) = pad(height, out_h);
    // (d / 2.0) is exact in f64 for any u32 d, and so is its half-to-even rounding.
    let rect = CropRect {
        top: to_u32(py_round(f64::from(padded_h - out_h) / 2.0)),
        left: to_u32(py_round(f64::from(padded_w - out_w) / 2.0)),
        height: out_h,
        width: out_w,
    };
    Ok(CenterCrop {
        padding: [left, top, right, bottom],
        rect,
    })
}

/// timm's `crop_or_pad(img, top, left, height, width)` on a `width` x `height` image, as a
/// padding and a window in the padded image: an axis shorter than the window is padded by
/// `-offset` before (the offset is at most 0) and by what the window still lacks after (its
/// window then starts at 0); a longer one is cropped at the offset. Offsets are what
/// [`random_crop_or_pad_offsets`] draws (`|offset| <= |side - out|`, the sign of
/// `side - out`); others are refused, not padded past. Errors on an empty size.
pub fn crop_or_pad(
    width: u32,
    height: u32,
    out_h: u32,
    out_w: u32,
    top: i64,
    left: i64,
) -> Result<CenterCrop> {
    if out_h == 0 || out_w == 0 || width == 0 || height == 0 {
        return Err(Error::invalid(
            "size",
            format!("crop or pad of a {width}x{height} image to {out_h}x{out_w}: no side may be 0"),
        ));
    }
    // (pad before, pad after, window start) of one axis, timm's formulas: the padding reaches
    // from the offset to the side's start and from the side's end to the window's end.
    let axis = |side: u32, out: u32, offset: i64| -> Result<(u32, u32, u32)> {
        let (side, out) = (i64::from(side), i64::from(out));
        let end = offset + out;
        let fits = if side >= out {
            (0..=side - out).contains(&offset)
        } else {
            (side - out..=0).contains(&offset)
        };
        if !fits {
            return Err(Error::invalid(
                "size",
                format!("offset {offset} of a {out} window on a side of {side}: out of reach"),
            ));
        }
        let before = (-offset + end.min(0)).max(0);
        let after = (end - side.max(offset)).max(0);
        // Each lies in 0..=out (the offset is in reach), a u32.
        Ok((
            to_u32_exact(before),
            to_u32_exact(after),
            to_u32_exact(offset.max(0)),
        ))
    };
    let (pad_top, pad_bottom, top) = axis(height, out_h, top)?;
    let (pad_left, pad_right, left) = axis(width, out_w, left)?;
    Ok(CenterCrop {
        padding: [pad_left, pad_top, pad_right, pad_bottom],
        rect: CropRect {
            top,
            left,
            height: out_h,
            width: out_w,
        },
    })
}

/// A value the caller bounded to `0..=u32::MAX`.
fn to_u32_exact(v: i64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

/// timm's `RandomCropOrPad.get_params` on a `width` x `height` image for an `out_h` x `out_w`
/// window: per axis, rows first, `copysign(randint(0, |delta|), delta)` with `delta = side -
/// out`, so `(top, left)` for [`crop_or_pad`]. Both draws are made whatever the sizes
/// (`randint(0, 0)` draws too, as Python's does).
pub fn random_crop_or_pad_offsets<D: TorchDraws + ?Sized>(
    width: u32,
    height: u32,
    out_h: u32,
    out_w: u32,
    draws: &mut D,
) -> (i64, i64) {
    let mut offset = |side: u32, out: u32| {
        let delta = i64::from(side) - i64::from(out);
        // |delta| < 2^32 - 1 for a side and a window of at least 1: the range fits a u32.
        let high = u32::try_from(delta.unsigned_abs() + 1).unwrap_or(u32::MAX);
        let v = i64::from(draws.randint(high));
        if delta < 0 {
            -v
        } else {
            v
        }
    };
    let top = offset(height, out_h);
    let left = offset(width, out_w);
    (top, left)
}

/// timm's `ResizeKeepRatio` (`timm.data.transforms`), its `get_params` and its filter choice:
/// the size a sample of a given image is resized to, drawn as timm draws it.
///
/// Invariant: `size` positive, `longest` in `[0, 1]`, probabilities in `[0, 1]`, finite ranges
/// with `min <= max`, the scale range positive when `scale_area` (its `1 / sqrt`) and the
/// aspect range positive (its logs).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KeepRatioResize {
    size: (u32, u32),
    longest: f64,
    filters: FilterChoice,
    scale_prob: f64,
    scale_range: (f64, f64),
    scale_area: bool,
    aspect_prob: f64,
    aspect_range: (f64, f64),
}

impl KeepRatioResize {
    /// Checks the arguments (errors name them); `size` is `(height, width)`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        size: (u32, u32),
        longest: f64,
        filters: FilterChoice,
        scale_prob: f64,
        scale_range: (f64, f64),
        scale_area: bool,
        aspect_prob: f64,
        aspect_range: (f64, f64),
    ) -> Result<Self> {
        if size.0 == 0 || size.1 == 0 {
            return Err(Error::invalid(
                "size",
                format!("{}x{} must be positive", size.0, size.1),
            ));
        }
        let unit = |name: &'static str, v: f64| {
            if (0.0..=1.0).contains(&v) {
                Ok(())
            } else {
                Err(Error::invalid(name, format!("{v} must lie in [0, 1]")))
            }
        };
        unit("longest", longest)?;
        unit("random_scale_prob", scale_prob)?;
        unit("random_aspect_prob", aspect_prob)?;
        let range = |name: &'static str, (lo, hi): (f64, f64), positive: bool| {
            if !(lo.is_finite() && hi.is_finite() && lo <= hi) || (positive && lo <= 0.0) {
                let need = if positive { "positive " } else { "" };
                return Err(Error::invalid(
                    name,
                    format!("({lo}, {hi}) must be {need}finite (min, max)"),
                ));
            }
            Ok(())
        };
        range("random_scale_range", scale_range, scale_area)?;
        range("random_aspect_range", aspect_range, true)?;
        Ok(KeepRatioResize {
            size,
            longest,
            filters,
            scale_prob,
            scale_range,
            scale_area,
            aspect_prob,
            aspect_range,
        })
    }

    /// The filters a sample chooses among (one: no draw).
    pub fn filters(&self) -> FilterChoice {
        self.filters
    }

    /// The sample's draws for a `width` x `height` image, in timm's order: the scale coin and
    /// factor (`random.uniform`), the aspect coin and log-uniform factor (only drawn where the
    /// probability is positive), then the filter (`random.choice`, with a choice). Returns
    /// `(height, width)` as timm's `round(side * factor / ratio)` (half to even), and the
    /// filter's index in [`KeepRatioResize::filters`].
    ///
    /// The size may be 0 or past `u32` for extreme images: the caller refuses it (Pillow would
    /// refuse to resize to it). Saturates, never wraps.
    pub fn draw<D: TorchDraws + ?Sized>(
        &self,
        width: u32,
        height: u32,
        draws: &mut D,
    ) -> ((u64, u64), usize) {
        let (img_h, img_w) = (f64::from(height), f64::from(width));
        let ratio_h = img_h / f64::from(self.size.0);
        let ratio_w = img_w / f64::from(self.size.1);
        let ratio =
            ratio_h.max(ratio_w) * self.longest + ratio_h.min(ratio_w) * (1.0 - self.longest);
        let uniform = |(a, b): (f64, f64), draws: &mut D| a + (b - a) * draws.py_random();
        let mut factor = (1.0, 1.0);
        if self.scale_prob > 0.0 && draws.py_random() < self.scale_prob {
            let mut f = uniform(self.scale_range, draws);
            if self.scale_area {
                f = 1.0 / f.sqrt();
            }
            factor = (f, f);
        }
        if self.aspect_prob > 0.0 && draws.py_random() < self.aspect_prob {
            let logs = (self.aspect_range.0.ln(), self.aspect_range.1.ln());
            let aspect = uniform(logs, draws).exp().sqrt();
            factor = (factor.0 / aspect, factor.1 * aspect);
        }
        // Python's `round` of a float gives an int: negative and non-finite never arise from
        // positive sizes and factors, and `as` saturates the rest.
        let side = |x: f64, f: f64| py_round(x * f / ratio).max(0.0) as u64;
        let size = (side(img_h, factor.0), side(img_w, factor.1));
        (size, self.filters.draw_index(draws))
    }
}

/// The window of [`center_crop`] where the crop fits the image; [`Error::InvalidArgument`]
/// where torchvision would pad (the callers that pad use [`center_crop`]).
pub fn center_crop_rect(width: u32, height: u32, out_h: u32, out_w: u32) -> Result<CropRect> {
    let crop = center_crop(width, height, out_h, out_w)?;
    if crop.pads() {
        return Err(Error::invalid(
            "size",
            format!(
                "center crop of {out_h}x{out_w} (h x w) from a {width}x{height} image would need \
                 padding"
            ),
        ));
    }
    Ok(crop.rect)
}

/// The size torchvision's `Resize(size, max_size=max_size)` gives a `width` x `height` image
/// when `size` is an int (`_compute_resized_output_size`), returned as `(height, width)` like
/// torchvision's `[new_h, new_w]`.
///
/// The shorter side becomes `size` and the longer `int(size * long / short)` (true division,
/// then truncation); with `max_size`, a longer side above it is brought down to `max_size`
/// and the shorter to `int(max_size * new_short / new_long)`.
///
/// Errors (`InvalidArgument`) where torchvision raises (`max_size <= size`) and where it would
/// go on to fail: an empty image, `size == 0`, or a side that comes out 0 or beyond `u32`.
pub fn resize_shorter_side(
    width: u32,
    height: u32,
    size: u32,
    max_size: Option<u32>,
) -> Result<(u32, u32)> {
    if width == 0 || height == 0 {
        return Err(Error::invalid(
            "image",
            format!("cannot resize an empty {width}x{height} image"),
        ));
    }
    if size == 0 {
        return Err(Error::invalid("size", "must be at least 1"));
    }
    let (short, long) = if width <= height {
        (width, height)
    } else {
        (height, width)
    };
    let mut new_short = u64::from(size);
    let mut new_long = py_int_div_trunc(u64::from(size) * u64::from(long), u64::from(short))?;
    if let Some(max_size) = max_size {
        if max_size <= size {
            return Err(Error::invalid(
                "max_size",
                format!(
                    "max_size = {max_size} must be strictly greater than the requested size \
                     for the smaller edge size = {size}"
                ),
            ));
        }
        if new_long > u64::from(max_size) {
            new_short = py_int_div_trunc(u64::from(max_size) * new_short, new_long)?;
            new_long = u64::from(max_size);
        }
    }
    let (Ok(new_short), Ok(new_long)) = (u32::try_from(new_short), u32::try_from(new_long)) else {
        return Err(Error::invalid(
            "size",
            format!("resizing {width}x{height} to shorter side {size} overflows"),
        ));
    };
    if new_short == 0 || new_long == 0 {
        return Err(Error::invalid(
            "size",
            format!("resizing {width}x{height} to shorter side {size} gives an empty image"),
        ));
    }
    Ok(if width <= height {
        (new_long, new_short)
    } else {
        (new_short, new_long)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filter_choice_is_uniform_and_one_filter_draws_nothing() {
        use crate::rng::sample_rng;
        let random = FilterChoice::new(&[Filter::Bilinear, Filter::Bicubic]).expect("valid");
        assert_eq!(random.filters(), &[Filter::Bilinear, Filter::Bicubic]);
        let n = 20_000u64;
        let mut counts = [0u64; 2];
        let mut rng = sample_rng(5, 0, 0);
        for _ in 0..n {
            counts[random.draw_index(&mut rng)] += 1;
        }
        // Binomial(n, 1/2): a standard deviation of ~71; within 4 of them.
        let dev = counts[0].abs_diff(n / 2);
        assert!(dev < 4 * 71, "{counts:?}");
        // A repeated filter weighs twice, as `random.choice` over the list does.
        let weighted = FilterChoice::new(&[Filter::Box, Filter::Box, Filter::Lanczos]).expect("ok");
        let boxes = (0..n)
            .filter(|_| weighted.draw(&mut rng) == Filter::Box)
            .count() as f64;
        assert!((boxes / n as f64 - 2.0 / 3.0).abs() < 0.015, "{boxes}");
        // One filter (either way it is built): no draw, the generator untouched.
        for one in [
            FilterChoice::one(Filter::Hamming),
            FilterChoice::new(&[Filter::Hamming]).expect("valid"),
        ] {
            let (mut a, mut b) = (sample_rng(9, 1, 2), sample_rng(9, 1, 2));
            assert_eq!(one.draw(&mut a), Filter::Hamming);
            assert!(!one.draws());
            assert_eq!(a.randint(1 << 30), b.randint(1 << 30));
        }
        assert!(FilterChoice::new(&[]).is_err());
        assert!(FilterChoice::new(&[Filter::Box; MAX_FILTER_CHOICES]).is_ok());
        let err = FilterChoice::new(&[Filter::Box; MAX_FILTER_CHOICES + 1]).expect_err("too many");
        assert!(err.to_string().contains("interpolation"), "{err}");
    }

    #[test]
    fn py_round_is_half_to_even() {
        assert_eq!(py_round(0.5), 0.0);
        assert_eq!(py_round(1.5), 2.0);
        assert_eq!(py_round(2.5), 2.0);
        assert_eq!(py_round(2.5000001), 3.0);
        assert_eq!(py_round(75.5), 76.0);
    }

    #[test]
    fn python_int_division_truncates() {
        assert_eq!(py_int_div_trunc(10, 3).ok(), Some(3));
        assert_eq!(py_int_div_trunc(224 * 500, 375).ok(), Some(298));
        // Just below an integer, still below 2^53: truncates like Python's int(a / b).
        assert_eq!(py_int_div_trunc((1 << 52) - 1, 1 << 52).ok(), Some(0));
        assert_eq!(py_int_div_trunc((1 << 53) - 1, 1).ok(), Some((1 << 53) - 1));
        assert!(py_int_div_trunc(1 << 53, 3).is_err());
        assert!(py_int_div_trunc(1, 0).is_err());
    }

    #[test]
    fn invalid_configs_are_rejected() {
        let bad = [
            ((0, 224), DEFAULT_SCALE, DEFAULT_RATIO),
            ((224, 224), (1.0, 0.08), DEFAULT_RATIO),
            ((224, 224), DEFAULT_SCALE, (4.0 / 3.0, 0.75)),
            ((224, 224), (-0.1, 1.0), DEFAULT_RATIO),
            ((224, 224), (0.1, f64::NAN), DEFAULT_RATIO),
            ((224, 224), DEFAULT_SCALE, (0.0, 1.0)),
            ((224, 224), DEFAULT_SCALE, (0.5, f64::INFINITY)),
        ];
        for (size, scale, ratio) in bad {
            assert!(
                matches!(
                    RandomResizedCrop::new(size, scale, ratio),
                    Err(Error::InvalidArgument { .. })
                ),
                "{size:?} {scale:?} {ratio:?}"
            );
        }
        assert!(RandomResizedCrop::new((1, 1), (0.5, 0.5), (1.0, 1.0)).is_ok());
    }

    #[test]
    fn empty_image_gives_empty_rect_without_panicking() {
        let rrc = RandomResizedCrop::with_defaults((224, 224)).expect("valid");
        let mut rng = crate::rng::sample_rng(0, 0, 0);
        assert_eq!(rrc.get_params(0, 10, &mut rng), CropRect::full(0, 10));
    }
}
