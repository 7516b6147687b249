//! The parameters of torchvision's random single ops, as their v1 `get_params` / `forward`
//! draw them: `ColorJitter`, `RandomRotation`, `RandomAffine`, `RandomPerspective`, `GaussianBlur`,
//! `RandomErasing`, `RandomCrop`, `RandomApply`, `RandomChoice`, `RandomOrder`, and the ops
//! that only decide whether to run (`RandomGrayscale`, `RandomVerticalFlip`, `RandomInvert`,
//! `RandomPosterize`, `RandomSolarize`, `RandomEqualize`, `RandomAutocontrast`,
//! `RandomAdjustSharpness`: [`draw_p`] or [`draw_p_item`], as each compares).
//!
//! Uniform draws are torch's float32 `uniform_(lo, hi)` with the bounds narrowed to float32,
//! then widened (`.item()`, `float(...)`) for the float64 arithmetic that follows, as in
//! torchvision. Must not reorder or drop draws (see the module doc of [`super`]).

use crate::error::{Error, Result};
use crate::image::CropRect;
use crate::rng::TorchDraws;

/// `torch.rand(1) < p`, compared in float32 (a float32 tensor against a Python float): whether
/// v1's `RandomGrayscale`, `RandomVerticalFlip` or `RandomErasing` runs, and every v2
/// single op with a `p` (`_RandomApplyTransform` skips when `torch.rand(1) >= p`). Always one
/// draw. For the v1 ops that compare `.item()` use [`draw_p_item`].
pub fn draw_p<D: TorchDraws + ?Sized>(draws: &mut D, p: f64) -> bool {
    draws.uniform_f32(0.0, 1.0) < p as f32
}

/// `torch.rand(1).item() < p`, compared in float64: whether v1's `RandomInvert`,
/// `RandomPosterize`, `RandomSolarize`, `RandomAdjustSharpness`, `RandomAutocontrast` or
/// `RandomEqualize` runs. Differs from [`draw_p`] only for the one draw equal to `p` narrowed
/// to float32 when that rounds down (e.g. `p = 0.7`): there this runs and [`draw_p`] does
/// not. Always one draw.
pub fn draw_p_item<D: TorchDraws + ?Sized>(draws: &mut D, p: f64) -> bool {
    f64::from(draws.uniform_f32(0.0, 1.0)) < p
}

/// `RandomApply(transforms, p)`: runs unless `p < torch.rand(1)`, so a draw equal to `p`
/// runs (unlike [`draw_p`]). Always one draw. v2's `RandomApply` skips when
/// `torch.rand(1) >= p`, which is [`draw_p`].
pub fn draw_apply<D: TorchDraws + ?Sized>(draws: &mut D, p: f64) -> bool {
    draws.uniform_f32(0.0, 1.0) <= p as f32
}

fn check_range(name: &'static str, (lo, hi): (f64, f64)) -> Result<()> {
    if !(lo.is_finite() && hi.is_finite() && lo <= hi) {
        return Err(Error::invalid(
            name,
            format!("({lo}, {hi}) is not a finite range with min <= max"),
        ));
    }
    Ok(())
}

/// torchvision's `ColorJitter(brightness, contrast, saturation, hue)`, each range already
/// resolved by `_check_input` (see [`ColorJitter::from_scalars`]); `None` means off.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ColorJitter {
    brightness: Option<(f64, f64)>,
    contrast: Option<(f64, f64)>,
    saturation: Option<(f64, f64)>,
    hue: Option<(f64, f64)>,
}

/// One step of a [`ColorJitterPlan`], with its factor.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ColorStep {
    /// `F.adjust_brightness(img, factor)`.
    Brightness(f64),
    /// `F.adjust_contrast(img, factor)`.
    Contrast(f64),
    /// `F.adjust_saturation(img, factor)`.
    Saturation(f64),
    /// `F.adjust_hue(img, factor)`, factor in `[-0.5, 0.5]`.
    Hue(f64),
}

/// A `ColorJitter` draw: the order `fn_idx` (a permutation of 0..4: brightness, contrast,
/// saturation, hue) and the factors of the enabled adjustments.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ColorJitterPlan {
    /// `torch.randperm(4)`.
    pub order: [u8; 4],
    /// Brightness factor, if enabled.
    pub brightness: Option<f64>,
    /// Contrast factor, if enabled.
    pub contrast: Option<f64>,
    /// Saturation factor, if enabled.
    pub saturation: Option<f64>,
    /// Hue factor, if enabled.
    pub hue: Option<f64>,
}

impl ColorJitterPlan {
    /// The enabled steps in `order`: what `forward` applies.
    pub fn steps(&self) -> impl Iterator<Item = ColorStep> + '_ {
        self.order.iter().filter_map(|&i| match i {
            0 => self.brightness.map(ColorStep::Brightness),
            1 => self.contrast.map(ColorStep::Contrast),
            2 => self.saturation.map(ColorStep::Saturation),
            3 => self.hue.map(ColorStep::Hue),
            _ => None,
        })
    }
}

/// `_check_input` for one argument given as a single number `v`: `[center - v, center + v]`,
/// the low end clipped at 0 when `clip`, `None` when the range is the no-op `(center, center)`.
fn jitter_range(
    name: &'static str,
    v: f64,
    center: f64,
    bound: (f64, f64),
    clip: bool,
) -> Result<Option<(f64, f64)>> {
    if v.is_nan() || v < 0.0 {
        return Err(Error::invalid(
            name,
            format!("{v}: a single number must be non negative"),
        ));
    }
    let lo = if clip {
        (center - v).max(0.0)
    } else {
        center - v
    };
    jitter_pair(name, (lo, center + v), center, bound)
}

fn jitter_pair(
    name: &'static str,
    (lo, hi): (f64, f64),
    center: f64,
    bound: (f64, f64),
) -> Result<Option<(f64, f64)>> {
    if !(bound.0 <= lo && lo <= hi && hi <= bound.1) {
        return Err(Error::invalid(
            name,
            format!("({lo}, {hi}) is not an ordered range within {bound:?}"),
        ));
    }
    Ok(if lo == center && hi == center {
        None
    } else {
        Some((lo, hi))
    })
}

impl ColorJitter {
    /// From the four single-number arguments (torchvision's defaults are all 0): brightness,
    /// contrast and saturation give `[max(0, 1 - v), 1 + v]`, hue `[-h, h]` with `h <= 0.5`.
    /// Zero turns an adjustment off (no draw).
    pub fn from_scalars(brightness: f64, contrast: f64, saturation: f64, hue: f64) -> Result<Self> {
        let inf = f64::INFINITY;
        Ok(ColorJitter {
            brightness: jitter_range("brightness", brightness, 1.0, (0.0, inf), true)?,
            contrast: jitter_range("contrast", contrast, 1.0, (0.0, inf), true)?,
            saturation: jitter_range("saturation", saturation, 1.0, (0.0, inf), true)?,
            hue: jitter_range("hue", hue, 0.0, (-0.5, 0.5), false)?,
        })
    }

    /// From `(min, max)` ranges (torchvision's tuple form); `None` is off, as is a range equal
    /// to the no-op `(1, 1)` (`(0, 0)` for hue).
    pub fn from_ranges(
        brightness: Option<(f64, f64)>,
        contrast: Option<(f64, f64)>,
        saturation: Option<(f64, f64)>,
        hue: Option<(f64, f64)>,
    ) -> Result<Self> {
        let inf = f64::INFINITY;
        let pair =
            |name, r: Option<(f64, f64)>, c, b| r.map_or(Ok(None), |r| jitter_pair(name, r, c, b));
        Ok(ColorJitter {
            brightness: pair("brightness", brightness, 1.0, (0.0, inf))?,
            contrast: pair("contrast", contrast, 1.0, (0.0, inf))?,
            saturation: pair("saturation", saturation, 1.0, (0.0, inf))?,
            hue: pair("hue", hue, 0.0, (-0.5, 0.5))?,
        })
    }

    /// The resolved ranges (brightness, contrast, saturation, hue).
    #[allow(clippy::type_complexity)]
    pub fn ranges(
        &self,
    ) -> (
        Option<(f64, f64)>,
        Option<(f64, f64)>,
        Option<(f64, f64)>,
        Option<(f64, f64)>,
    ) {
        (self.brightness, self.contrast, self.saturation, self.hue)
    }

    /// `get_params`: `torch.randperm(4)` (always, even with every adjustment off), then one
    /// float32 uniform per enabled adjustment in the order brightness, contrast, saturation,
    /// hue. v2 draws the same.
    pub fn draw<D: TorchDraws + ?Sized>(&self, draws: &mut D) -> ColorJitterPlan {
        let mut order = [0u8; 4];
        randperm(draws, &mut order);
        let mut factor = |r: Option<(f64, f64)>| {
            r.map(|(lo, hi)| f64::from(draws.uniform_f32(lo as f32, hi as f32)))
        };
        let brightness = factor(self.brightness);
        let contrast = factor(self.contrast);
        let saturation = factor(self.saturation);
        let hue = factor(self.hue);
        ColorJitterPlan {
            order,
            brightness,
            contrast,
            saturation,
            hue,
        }
    }
}

/// `torch.randperm(out.len())` into `out` (CPU, small n): the identity, then for each
/// `i < n - 1` a swap of `i` with `i + randint(n - i)`.
pub fn randperm<D: TorchDraws + ?Sized>(draws: &mut D, out: &mut [u8]) {
    for (i, v) in out.iter_mut().enumerate() {
        *v = i as u8;
    }
    let n = out.len();
    for i in 0..n.saturating_sub(1) {
        let z = draws.randint((n - i) as u32) as usize;
        out.swap(i, i + z);
    }
}

/// The most transforms [`RandomChoice`] and [`RandomOrder`] choose among.
pub const MAX_CHOICES: usize = 16;

fn check_count(name: &'static str, n: usize) -> Result<()> {
    if n == 0 || n > MAX_CHOICES {
        return Err(Error::invalid(
            name,
            format!("{n} transforms: must be 1 to {MAX_CHOICES}"),
        ));
    }
    Ok(())
}

/// torchvision v1's `RandomChoice(transforms, p=None)`: which one transform runs. Draws from
/// Python's `random` module, not torch ([`TorchDraws::py_random`]).
///
/// v2 draws `torch.multinomial(torch.tensor(p), 1)` instead (torch's generator; `p` defaults to
/// uniform): the same distribution.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RandomChoice {
    cum_weights: [f64; MAX_CHOICES],
    len: usize,
    weighted: bool,
}

impl RandomChoice {
    /// Over `n` transforms with weights `p` (`None`: uniform). Weights need not sum to 1 but
    /// must be non-negative, finite, one per transform, with a positive total.
    pub fn new(n: usize, p: Option<&[f64]>) -> Result<Self> {
        check_count("transforms", n)?;
        let mut cum_weights = [0.0; MAX_CHOICES];
        if let Some(p) = p {
            if p.len() != n || p.iter().any(|w| !(w.is_finite() && *w >= 0.0)) {
                return Err(Error::invalid(
                    "p",
                    format!("{p:?}: need {n} finite non-negative weights"),
                ));
            }
            let mut acc = 0.0;
            for (c, w) in cum_weights.iter_mut().zip(p) {
                acc += w;
                *c = acc;
            }
            if acc <= 0.0 {
                return Err(Error::invalid("p", "the weights sum to zero"));
            }
        }
        Ok(RandomChoice {
            cum_weights,
            len: n,
            weighted: p.is_some(),
        })
    }

    /// The index of the transform to run. `random.choices(population, weights)[0]`: one
    /// `random()` draw; without weights `floor(random() * n)`, with them
    /// `bisect_right(cum_weights, random() * total, 0, n - 1)`.
    pub fn draw<D: TorchDraws + ?Sized>(&self, draws: &mut D) -> usize {
        let u = draws.py_random();
        let n = self.len;
        if !self.weighted {
            return ((u * n as f64) as usize).min(n.saturating_sub(1));
        }
        let cum = self.cum_weights.get(..n).unwrap_or(&[]);
        let total = cum.last().copied().unwrap_or(0.0);
        let x = u * total;
        // bisect_right over cum[0..n-1]: the first index whose cumulative weight exceeds x.
        let hi = n.saturating_sub(1);
        cum.get(..hi).unwrap_or(&[]).partition_point(|&c| c <= x)
    }
}

/// A permutation of up to [`MAX_CHOICES`] indices, inline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Permutation {
    order: [u8; MAX_CHOICES],
    len: usize,
}

impl Permutation {
    /// The indices in the order to run the transforms.
    pub fn as_slice(&self) -> &[u8] {
        self.order.get(..self.len).unwrap_or(&[])
    }
}

/// torchvision v1's `RandomOrder(transforms)`: the order to run them in, by Python's
/// `random.shuffle` (`for i in reversed(range(1, n)): j = randbelow(i + 1); swap(i, j)`),
/// `randbelow` being [`TorchDraws::randint`] here (CPython rejection-samples
/// `getrandbits`; both uniform). v2 uses `torch.randperm(n)`: also uniform.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RandomOrder {
    len: usize,
}

impl RandomOrder {
    /// Over `n` transforms, 1 to [`MAX_CHOICES`].
    pub fn new(n: usize) -> Result<Self> {
        check_count("transforms", n)?;
        Ok(RandomOrder { len: n })
    }

    /// The order for one sample: `n - 1` draws.
    pub fn draw<D: TorchDraws + ?Sized>(&self, draws: &mut D) -> Permutation {
        let mut p = Permutation {
            order: [0; MAX_CHOICES],
            len: self.len,
        };
        for (i, v) in p.order.iter_mut().enumerate() {
            *v = i as u8;
        }
        for i in (1..self.len).rev() {
            let j = draws.randint(i as u32 + 1) as usize;
            p.order.swap(i, j);
        }
        p
    }
}

/// torchvision's `RandomRotation(degrees)`: the angle.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RandomRotation {
    degrees: (f64, f64),
}

impl RandomRotation {
    /// From the `(min, max)` range; a single number `d` is `(-d, d)` ([`Self::symmetric`]).
    pub fn new(degrees: (f64, f64)) -> Result<Self> {
        check_range("degrees", degrees)?;
        Ok(RandomRotation { degrees })
    }

    /// From a single non-negative number `d`: `(-d, d)`.
    pub fn symmetric(degrees: f64) -> Result<Self> {
        if degrees.is_nan() || degrees < 0.0 {
            return Err(Error::invalid(
                "degrees",
                format!("{degrees}: a single number must be non negative"),
            ));
        }
        Self::new((-degrees, degrees))
    }

    /// `get_params`: one float32 uniform over the range, in degrees (counter-clockwise).
    pub fn draw<D: TorchDraws + ?Sized>(&self, draws: &mut D) -> f64 {
        f64::from(draws.uniform_f32(self.degrees.0 as f32, self.degrees.1 as f32))
    }
}

/// torchvision's `GaussianBlur(kernel_size, sigma=(0.1, 2.0))`: the sigma (used for both axes).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GaussianBlur {
    sigma: (f64, f64),
}

impl GaussianBlur {
    /// From the `(min, max)` sigma range, `0 < min <= max` (a single sigma `s` is `(s, s)`).
    pub fn new(sigma: (f64, f64)) -> Result<Self> {
        check_range("sigma", sigma)?;
        if sigma.0 <= 0.0 {
            return Err(Error::invalid(
                "sigma",
                format!("{} must be positive", sigma.0),
            ));
        }
        Ok(GaussianBlur { sigma })
    }

    /// `get_params`: one float32 uniform, drawn even when min equals max. v2 draws the same.
    pub fn draw<D: TorchDraws + ?Sized>(&self, draws: &mut D) -> f64 {
        f64::from(draws.uniform_f32(self.sigma.0 as f32, self.sigma.1 as f32))
    }
}

/// torchvision's `RandomAffine(degrees, translate, scale, shear)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RandomAffine {
    degrees: (f64, f64),
    translate: Option<(f64, f64)>,
    scale: Option<(f64, f64)>,
    shear: Option<[f64; 4]>,
    shear_y: bool,
}

/// A `RandomAffine` draw: `F.affine(img, angle, translate, scale, shear)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AffinePlan {
    /// Rotation in degrees.
    pub angle: f64,
    /// `(tx, ty)` in pixels, `int(round(u))` of a uniform draw (half to even).
    pub translate: (i32, i32),
    /// Scale factor (1.0 when off).
    pub scale: f64,
    /// `(shear_x, shear_y)` in degrees.
    pub shear: (f64, f64),
}

impl RandomAffine {
    /// `degrees` as a `(min, max)` range; `translate` as maximal fractions `(a, b)` in `[0, 1]`
    /// of width and height; `scale` as a positive `(min, max)`; `shear` as torchvision's
    /// sequence of 2 (x only) or 4 (x then y) bounds (a single number `s` is `[-s, s]`).
    pub fn new(
        degrees: (f64, f64),
        translate: Option<(f64, f64)>,
        scale: Option<(f64, f64)>,
        shear: Option<&[f64]>,
    ) -> Result<Self> {
        check_range("degrees", degrees)?;
        if let Some((a, b)) = translate {
            if !((0.0..=1.0).contains(&a) && (0.0..=1.0).contains(&b)) {
                return Err(Error::invalid(
                    "translate",
                    format!("({a}, {b}) must lie in [0, 1]"),
                ));
            }
        }
        if let Some(s) = scale {
            check_range("scale", s)?;
            if s.0 <= 0.0 {
                return Err(Error::invalid("scale", format!("{s:?} must be positive")));
            }
        }
        let (shear, shear_y) = match shear {
            None => (None, false),
            Some(&[lo, hi]) => (Some([lo, hi, 0.0, 0.0]), false),
            Some(&[a, b, c, d]) => (Some([a, b, c, d]), true),
            Some(other) => {
                return Err(Error::invalid(
                    "shear",
                    format!("{other:?}: need 2 or 4 bounds"),
                ))
            }
        };
        Ok(RandomAffine {
            degrees,
            translate,
            scale,
            shear,
            shear_y,
        })
    }

    /// `get_params` for a `width` x `height` image: the angle; with `translate`, `tx` then
    /// `ty` (bounds `a * width`, `b * height`); with `scale`, the scale; with `shear`, `x`
    /// then (4 bounds) `y`. One float32 uniform each, in that order. v2 draws the same.
    pub fn draw<D: TorchDraws + ?Sized>(
        &self,
        width: u32,
        height: u32,
        draws: &mut D,
    ) -> AffinePlan {
        let mut uniform = |lo: f64, hi: f64| f64::from(draws.uniform_f32(lo as f32, hi as f32));
        let angle = uniform(self.degrees.0, self.degrees.1);
        let translate = self.translate.map_or((0, 0), |(a, b)| {
            let max_dx = a * f64::from(width);
            let max_dy = b * f64::from(height);
            let tx = uniform(-max_dx, max_dx).round_ties_even() as i32;
            let ty = uniform(-max_dy, max_dy).round_ties_even() as i32;
            (tx, ty)
        });
        let scale = self.scale.map_or(1.0, |(lo, hi)| uniform(lo, hi));
        let shear = self.shear.map_or((0.0, 0.0), |[a, b, c, d]| {
            let x = uniform(a, b);
            let y = if self.shear_y { uniform(c, d) } else { 0.0 };
            (x, y)
        });
        AffinePlan {
            angle,
            translate,
            scale,
            shear,
        }
    }
}

/// torchvision's `RandomPerspective(distortion_scale, p)`: the coin, then the four corners.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RandomPerspective {
    distortion_scale: f64,
    p: f64,
}

/// A `RandomPerspective` draw that applies: `F.perspective(img, startpoints, endpoints)`,
/// corners `[top-left, top-right, bottom-right, bottom-left]` as `[x, y]` pixels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PerspectivePlan {
    /// The image's corners, `[[0, 0], [w - 1, 0], [w - 1, h - 1], [0, h - 1]]`.
    pub startpoints: [[u32; 2]; 4],
    /// Where they go.
    pub endpoints: [[u32; 2]; 4],
}

impl PerspectivePlan {
    /// The corners as doubles, for [`perspective_coeffs`](crate::augment::geometry::perspective_coeffs).
    pub fn corners(&self) -> ([[f64; 2]; 4], [[f64; 2]; 4]) {
        let f = |c: [[u32; 2]; 4]| c.map(|[x, y]| [f64::from(x), f64::from(y)]);
        (f(self.startpoints), f(self.endpoints))
    }
}

impl RandomPerspective {
    /// `distortion_scale` and `p` in `[0, 1]` (v2 checks both; v1 neither, and a scale above 1
    /// there can draw corners outside the image, which torchvision's `randint` refuses).
    pub fn new(distortion_scale: f64, p: f64) -> Result<Self> {
        if !(0.0..=1.0).contains(&distortion_scale) {
            return Err(Error::invalid(
                "distortion_scale",
                format!("{distortion_scale} must lie in [0, 1]"),
            ));
        }
        if !(0.0..=1.0).contains(&p) {
            return Err(Error::invalid("p", format!("{p} must lie in [0, 1]")));
        }
        Ok(RandomPerspective {
            distortion_scale,
            p,
        })
    }

    /// `forward` then `get_params` for a `width` x `height` image: one coin
    /// (`torch.rand(1) < p`, [`draw_p`]); when it says so, eight `randint` draws, `[x, y]` of
    /// top-left, top-right, bottom-right, bottom-left, each within
    /// `int(distortion_scale * (side // 2)) + 1` pixels of its corner. v2 (`make_params`)
    /// draws the same integers from the same ranges, in the same order.
    pub fn draw<D: TorchDraws + ?Sized>(
        &self,
        width: u32,
        height: u32,
        draws: &mut D,
    ) -> Option<PerspectivePlan> {
        if !draw_p(draws, self.p) {
            return None;
        }
        // Python's `int(distortion_scale * half)` truncates a non-negative double; it is at
        // most `half`, so `bound <= side / 2 + 1 <= side` for a side of 2 or more. A side of 1
        // gives a bound of 1 (torchvision's `randint(0, 1)`, and `randint(0, 1)` again for the
        // far corners), clamped here so that no draw leaves the image.
        let bound = |side: u32| -> u32 {
            let b = (self.distortion_scale * f64::from(side / 2)) as u32 + 1;
            b.min(side.max(1))
        };
        let (bw, bh) = (bound(width), bound(height));
        // torchvision's `randint(side - bound, side)`: the last `bound` pixels of the side.
        let (fx, fy) = (width.max(1) - bw, height.max(1) - bh);
        let tl = [draws.randint(bw), draws.randint(bh)];
        let tr = [fx + draws.randint(bw), draws.randint(bh)];
        let br = [fx + draws.randint(bw), fy + draws.randint(bh)];
        let bl = [draws.randint(bw), fy + draws.randint(bh)];
        let (r, b) = (width.saturating_sub(1), height.saturating_sub(1));
        Some(PerspectivePlan {
            startpoints: [[0, 0], [r, 0], [r, b], [0, b]],
            endpoints: [tl, tr, br, bl],
        })
    }
}

/// What `RandomErasing` writes into its rectangle (on the normalized CHW float tensor).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum EraseValue {
    /// One value for every channel (torchvision's default 0).
    Constant(f32),
    /// One value per RGB channel.
    PerChannel([f32; 3]),
    /// `value="random"`: standard normal values, `channels * height * width` of them in CHW
    /// order, which the kernel draws with [`TorchDraws::fill_standard_normal`] from the same
    /// sample draws right after the plan. torchvision draws them between the rectangle's size
    /// and its offsets; here they come after the offsets (same distribution, different stream
    /// order), so the plan stays small.
    Random,
}

/// The rectangle `RandomErasing` erases.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EraseRect {
    /// First row (`i`).
    pub top: u32,
    /// First column (`j`).
    pub left: u32,
    /// Rows (`h`).
    pub height: u32,
    /// Columns (`w`).
    pub width: u32,
}

impl EraseRect {
    /// The attempt torchvision's and timm's erasing share, once an area (in pixels) and an
    /// aspect (`h / w`) are drawn: the sides `sqrt(area * aspect)` and `sqrt(area / aspect)`
    /// rounded half to even (Python's `round`), kept only when strictly smaller than the
    /// image's (a NaN side fails, as Python would raise on it), then the offsets, top before
    /// left, each uniform among the positions that keep the rectangle inside. `None`, with
    /// nothing drawn, when it does not fit.
    pub(super) fn place<D: TorchDraws + ?Sized>(
        area: f64,
        aspect: f64,
        width: u32,
        height: u32,
        draws: &mut D,
    ) -> Option<EraseRect> {
        let h = (area * aspect).sqrt().round_ties_even();
        let w = (area / aspect).sqrt().round_ties_even();
        if !(h < f64::from(height) && w < f64::from(width)) {
            return None;
        }
        // 0 <= h < height and 0 <= w < width, so both fit u32. A 0-pixel side on a u32::MAX
        // image would ask for 2^32 offsets: saturate (one offset in 2^32 lost).
        let (h, w) = (h as u32, w as u32);
        let top = draws.randint((height - h).saturating_add(1));
        let left = draws.randint((width - w).saturating_add(1));
        Some(EraseRect {
            top,
            left,
            height: h,
            width: w,
        })
    }
}

/// torchvision's `RandomErasing(p=0.5, scale=(0.02, 0.33), ratio=(0.3, 3.3), value=0)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RandomErasing {
    p: f64,
    scale: (f64, f64),
    ratio: (f64, f64),
    value: EraseValue,
}

impl RandomErasing {
    /// torchvision's checks: `p` in `[0, 1]`, `scale` within `[0, 1]` and ordered, `ratio`
    /// positive and ordered (torchvision only warns on a reversed range; we refuse it).
    pub fn new(p: f64, scale: (f64, f64), ratio: (f64, f64), value: EraseValue) -> Result<Self> {
        if !(0.0..=1.0).contains(&p) {
            return Err(Error::invalid(
                "p",
                format!("{p} is not a probability in [0, 1]"),
            ));
        }
        check_range("scale", scale)?;
        if scale.0 < 0.0 || scale.1 > 1.0 {
            return Err(Error::invalid(
                "scale",
                format!("{scale:?} must lie in [0, 1]"),
            ));
        }
        check_range("ratio", ratio)?;
        if ratio.0 <= 0.0 {
            return Err(Error::invalid(
                "ratio",
                format!("{ratio:?} must be positive"),
            ));
        }
        Ok(RandomErasing {
            p,
            scale,
            ratio,
            value,
        })
    }

    /// The fill value.
    pub fn value(&self) -> EraseValue {
        self.value
    }

    /// `forward` on a `width` x `height` image: `torch.rand(1) < p`, then `get_params`: up to
    /// 10 attempts of `erase_area = area * uniform(scale)`, `aspect = exp(uniform(log ratio))`
    /// (float32 log and exp), `h = round(sqrt(erase_area * aspect))`,
    /// `w = round(sqrt(erase_area / aspect))` (half to even); the first with `h < height` and
    /// `w < width` draws `i = randint(height - h + 1)` then `j = randint(width - w + 1)`.
    ///
    /// `None` when the draw says not to erase or all 10 attempts fail (torchvision then
    /// "erases" the image with itself: a no-op). A 0 x 0 rectangle can be returned when the
    /// scale range allows it, as in torchvision (erasing nothing). v2 draws the same.
    ///
    /// The log-ratio bounds are the correctly rounded float32 `ln`; torch's vectorized float32
    /// log is within one unit in the last place and differs for some inputs (`ln 3.3`: torch
    /// 1.1939225, here 1.1939224), moving a bound by about 1e-7. Not reproduced: it would
    /// take a port of torch's vectorized log, and the distribution does not notice.
    pub fn draw<D: TorchDraws + ?Sized>(
        &self,
        width: u32,
        height: u32,
        draws: &mut D,
    ) -> Option<EraseRect> {
        if !draw_p(draws, self.p) {
            return None;
        }
        let area = f64::from(width) * f64::from(height);
        let log_lo = (self.ratio.0 as f32).ln();
        let log_hi = (self.ratio.1 as f32).ln();
        let (scale_lo, scale_hi) = (self.scale.0 as f32, self.scale.1 as f32);
        for _ in 0..10 {
            let erase_area = area * f64::from(draws.uniform_f32(scale_lo, scale_hi));
            let aspect = f64::from(draws.uniform_f32(log_lo, log_hi).exp());
            let placed = EraseRect::place(erase_area, aspect, width, height, draws);
            if placed.is_some() {
                return placed;
            }
        }
        None
    }
}

/// torchvision's `RandomCrop(size, padding=None, pad_if_needed=False)`: padding, then offsets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RandomCrop {
    size: (u32, u32),
    padding: [u32; 4],
    pad_if_needed: bool,
}

/// A `RandomCrop` draw: pad by `pad` (left, top, right, bottom; the sum of the fixed padding
/// and `pad_if_needed`'s), then crop `rect` (coordinates in the padded image).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RandomCropPlan {
    /// Padding `[left, top, right, bottom]` in pixels.
    pub pad: [u32; 4],
    /// The crop in the padded image.
    pub rect: CropRect,
}

impl RandomCrop {
    /// `size` as `(height, width)`, positive; `padding` as `[left, top, right, bottom]`
    /// (torchvision's int `p` is `[p; 4]`, its pair `(a, b)` is `[a, b, a, b]`).
    pub fn new(size: (u32, u32), padding: [u32; 4], pad_if_needed: bool) -> Result<Self> {
        if size.0 == 0 || size.1 == 0 {
            return Err(Error::invalid("size", format!("{size:?} must be positive")));
        }
        Ok(RandomCrop {
            size,
            padding,
            pad_if_needed,
        })
    }

    /// `forward` on a `width` x `height` image: the fixed padding; with `pad_if_needed`,
    /// `size_w - w` on *both* left and right when narrower (torchvision pads `[d, 0]`, i.e. d
    /// on each side), then likewise top and bottom; then `get_params`: no draw when the
    /// padded image is exactly the crop size, else `randint(h - th + 1)` (row) then
    /// `randint(w - tw + 1)` (column). An image still smaller than the crop is an error
    /// (torchvision raises `ValueError`). v2 pads the same but draws the row only when the
    /// padded height exceeds the crop's and the column only when the width does (v1 draws
    /// both unless both sides match, `randint(1)` included).
    pub fn draw<D: TorchDraws + ?Sized>(
        &self,
        width: u32,
        height: u32,
        draws: &mut D,
    ) -> Result<RandomCropPlan> {
        let [l, t, r, b] = self.padding;
        let mut pad = [l, t, r, b];
        let too_big = || Error::invalid("padding", "the padded size overflows u32");
        let mut w = width
            .checked_add(l)
            .and_then(|x| x.checked_add(r))
            .ok_or_else(too_big)?;
        let mut h = height
            .checked_add(t)
            .and_then(|x| x.checked_add(b))
            .ok_or_else(too_big)?;
        let (th, tw) = self.size;
        if self.pad_if_needed && w < tw {
            let d = tw - w;
            // The padded width bounds each side's padding, so once it fits neither side overflows.
            w = w
                .checked_add(d)
                .and_then(|x| x.checked_add(d))
                .ok_or_else(too_big)?;
            pad[0] += d;
            pad[2] += d;
        }
        if self.pad_if_needed && h < th {
            let d = th - h;
            h = h
                .checked_add(d)
                .and_then(|x| x.checked_add(d))
                .ok_or_else(too_big)?;
            pad[1] += d;
            pad[3] += d;
        }
        if h < th || w < tw {
            return Err(Error::invalid(
                "size",
                format!("crop ({th}, {tw}) is larger than the (padded) image ({h}, {w})"),
            ));
        }
        let rect = if h == th && w == tw {
            CropRect {
                top: 0,
                left: 0,
                height: h,
                width: w,
            }
        } else {
            let top = draws.randint(h - th + 1);
            let left = draws.randint(w - tw + 1);
            CropRect {
                top,
                left,
                height: th,
                width: tw,
            }
        };
        Ok(RandomCropPlan { pad, rect })
    }
}
