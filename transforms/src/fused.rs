//! The fused per-sample kernel: crop + Pillow resize (bilinear, bicubic or nearest) +
//! horizontal flip + to-tensor + normalize, written straight into the caller's output slot (a
//! slot of a batch buffer).
//!
//! It produces exactly the numbers of the op-by-op chain
//! `crop -> Resizer::resize -> hflip -> to_float -> Normalize::apply`:
//! - the resize is the same code ([`Resizer::resize_into`]); the crop is a view;
//! - the flip is folded into the resize's horizontal pass, which writes its outputs in
//!   mirrored order (each output is the same integer sum, so this is exact);
//! - each float is either looked up in a per-channel table of the 256 possible results, built
//!   with the very functions the op-by-op path calls ([`to_float_value`] with the kind's
//!   [`Scaling`], [`normalize_value`]),
//!   or computed by SIMD arithmetic without divisions that was checked, at table-building
//!   time, to give the table's bits for all 256 inputs of every channel. No arithmetic is
//!   reordered or folded without that proof.
//!
//! Must not allocate per sample: the scratch row, the tables and the resizer's buffers live in
//! [`FusedKernel`] and are reused. Must not decide anything random: the crop and the flip come
//! in as arguments, drawn by the caller from the sample's RNG.

use crate::cpu;
use crate::error::{Error, Result};
use crate::image::{CropRect, RgbView};
use crate::resize::{Filter, Resizer, RowSink, SimdLevel};
use crate::tensor::{normalize_value, to_float_value, Normalize, Scaling};

/// What a sample becomes in its batch slot.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum OutputKind {
    /// float32 CHW, `(x / 255 - mean) / std` per channel: `ToTensor()` + `Normalize(mean, std)`
    /// (or v2's `ToDtype(torch.float32, scale=True)` + `Normalize`, by `scaling`).
    F32Chw {
        /// Per-channel means (float32, as torch converts them).
        mean: [f32; 3],
        /// Per-channel standard deviations; none may be zero.
        std: [f32; 3],
        /// How `x / 255` is computed (absent in JSON: [`Scaling::Divide`], `ToTensor`'s).
        #[serde(default)]
        scaling: Scaling,
    },
    /// float32 CHW, `x / 255`: `ToTensor()` (or v2's `ToDtype`, by `scaling`) without
    /// `Normalize`.
    F32ChwUnnormalized {
        /// How `x / 255` is computed (absent in JSON: [`Scaling::Divide`], `ToTensor`'s).
        #[serde(default)]
        scaling: Scaling,
    },
    /// uint8 CHW (`PILToTensor()`), for normalizing on the GPU.
    U8Chw,
    /// uint8 HWC, the packed RGB pixels.
    U8Hwc,
}

impl OutputKind {
    /// Values per sample of `h` x `w` pixels (all kinds have 3 channels).
    pub fn elements_per_sample(&self, h: u32, w: u32) -> usize {
        3 * h as usize * w as usize
    }

    /// Bytes per value: 4 for the float32 kinds, 1 for the uint8 ones.
    pub fn element_size(&self) -> usize {
        if self.is_f32() {
            4
        } else {
            1
        }
    }

    /// Bytes per sample of `h` x `w` pixels.
    pub fn bytes_per_sample(&self, h: u32, w: u32) -> usize {
        self.elements_per_sample(h, w) * self.element_size()
    }

    /// Whether the values are float32 (else uint8).
    pub fn is_f32(&self) -> bool {
        self.scaling().is_some()
    }

    /// The float kinds' arithmetic for `x / 255`; `None` for the uint8 kinds.
    pub fn scaling(&self) -> Option<Scaling> {
        match *self {
            OutputKind::F32Chw { scaling, .. } | OutputKind::F32ChwUnnormalized { scaling } => {
                Some(scaling)
            }
            OutputKind::U8Chw | OutputKind::U8Hwc => None,
        }
    }

    /// Errors if a `std` is zero or a mean/std is not finite.
    pub fn validate(&self) -> Result<()> {
        if let OutputKind::F32Chw { mean, std, .. } = *self {
            Normalize::new(mean, std)?;
        }
        Ok(())
    }
}

/// The caller's output slot for one sample, typed by element.
#[derive(Debug)]
pub enum OutputSlot<'a> {
    /// For [`OutputKind::F32Chw`] and [`OutputKind::F32ChwUnnormalized`].
    F32(&'a mut [f32]),
    /// For [`OutputKind::U8Chw`] and [`OutputKind::U8Hwc`].
    U8(&'a mut [u8]),
}

impl OutputSlot<'_> {
    fn len(&self) -> usize {
        match self {
            OutputSlot::F32(s) => s.len(),
            OutputSlot::U8(s) => s.len(),
        }
    }
}

/// Which table is loaded, by the bits of its parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LutKey {
    Empty,
    Unnormalized(Scaling),
    Normalized([u32; 6], Scaling),
}

/// Per-worker context of the fused kernel. Reuse it for every sample.
#[derive(Debug)]
pub struct FusedKernel {
    resizer: Resizer,
    /// One resized row, packed RGB, before conversion.
    row: Vec<u8>,
    /// `lut[c][v]`: the float32 output for channel `c` and pixel value `v`.
    lut: Box<[[f32; 256]; 3]>,
    lut_key: LutKey,
    /// The SIMD arithmetic for the loaded float kind, when it was verified to give the
    /// table's bits for all 256 inputs of every channel (and the CPU has AVX2 and FMA).
    fast: Option<convert::FastFloat>,
    /// The widest kernels the resize and the byte conversions may use (the float conversion's
    /// AVX2+FMA arithmetic is chosen by `fast`).
    simd: SimdLevel,
}

/// The kernels a [`FusedKernel`] uses unless told otherwise: on AMD's CPUs the 512-bit
/// AVX-512 kernels ([`SimdLevel::Avx512`]), on others AVX-512's instructions on 256-bit
/// registers ([`SimdLevel::Avx512Ymm`]); AVX2 on CPUs without them.
///
/// Alone, the 512-bit kernels are the fastest everywhere; in the pipeline it depends on the
/// core. Intel's cores run the code after 512-bit instructions at a lower clock, and that code
/// is the next sample's decode (libjpeg-turbo's AVX2, most of a sample's time), so the 512-bit
/// kernels make every sample slower there, while the 256-bit form leaves the decode's speed
/// alone. Zen 4 runs 512-bit operations as two 256-bit halves at an unchanged clock, so the
/// 512-bit kernels are the faster choice there. The measurements behind this are in
/// `benches/train_ratio.rs`.
///
/// (glibc makes a similar choice for its string functions: its `Prefer_No_AVX512` flag is set
/// on Intel's AVX-512 CPUs without AVX-VNNI, not on AMD's.)
pub fn default_simd() -> SimdLevel {
    if cpu::amd() {
        SimdLevel::Avx512
    } else {
        SimdLevel::Avx512Ymm
    }
}

impl Default for FusedKernel {
    fn default() -> Self {
        Self::new()
    }
}

impl FusedKernel {
    /// An empty context.
    pub fn new() -> Self {
        let mut kernel = FusedKernel {
            resizer: Resizer::new(),
            row: Vec::new(),
            lut: Box::new([[0.0; 256]; 3]),
            lut_key: LutKey::Empty,
            fast: None,
            simd: default_simd(),
        };
        kernel.set_simd_limit(kernel.simd);
        kernel
    }

    /// Uses kernels up to `limit` at most ([`default_simd`] unless set). The results are
    /// identical at every level.
    pub fn set_simd_limit(&mut self, limit: SimdLevel) {
        self.simd = limit;
        self.resizer.set_simd_limit(limit);
    }

    /// Resizes with `filter` from now on ([`Filter::Bilinear`] unless set).
    pub fn set_filter(&mut self, filter: Filter) {
        self.resizer.set_filter(filter);
    }

    /// Resizes as torchvision's `api` resizes a uint8 tensor from now on (`None`, the default:
    /// Pillow's); see [`Resizer::set_tensor_api`].
    pub fn set_tensor_api(&mut self, api: Option<crate::augment::policy::Api>) {
        self.resizer.set_tensor_api(api);
    }

    /// The kernels the conversions run: the limit, or less where the CPU lacks them.
    fn level(&self) -> SimdLevel {
        self.simd.min(SimdLevel::detected())
    }

    /// Crops `crop` (in `src`'s coordinates) out of `src`, resizes it to `size` = `(h, w)`
    /// with Pillow's filter (see [`FusedKernel::set_filter`]), mirrors it if `flip`, and
    /// writes it as `kind` into `out`, which must hold exactly `kind.elements_per_sample(h, w)`
    /// values of the kind's element type.
    ///
    /// Errors (`InvalidArgument`) if the crop does not fit in `src`, a size is 0, the slot has
    /// the wrong type or length, or `kind` has a zero or non-finite std or mean.
    pub fn run(
        &mut self,
        src: RgbView<'_>,
        crop: CropRect,
        size: (u32, u32),
        flip: bool,
        kind: &OutputKind,
        out: OutputSlot<'_>,
    ) -> Result<()> {
        let (h, w) = size;
        let view = src.crop(crop)?;
        let expected = kind.elements_per_sample(h, w);
        if out.len() != expected {
            return Err(Error::invalid(
                "out",
                format!(
                    "slot of {} values for a {kind:?} sample of {h}x{w}, expected {expected}",
                    out.len()
                ),
            ));
        }
        let row_len = 3 * w as usize;
        let level = self.level();
        match (kind, out) {
            (
                OutputKind::F32Chw { .. } | OutputKind::F32ChwUnnormalized { .. },
                OutputSlot::F32(out),
            ) => {
                self.load_lut(kind)?;
                if self.row.len() < row_len {
                    self.row.resize(row_len, 0);
                }
                let mut sink = F32ChwSink {
                    out,
                    row: &mut self.row[..row_len],
                    lut: &self.lut,
                    fast: self.fast,
                    level,
                    width: w as usize,
                    plane: h as usize * w as usize,
                };
                self.resizer.resize_into(view, h, w, flip, &mut sink)
            }
            (OutputKind::U8Chw, OutputSlot::U8(out)) => {
                if self.row.len() < row_len {
                    self.row.resize(row_len, 0);
                }
                let mut sink = U8ChwSink {
                    out,
                    row: &mut self.row[..row_len],
                    width: w as usize,
                    plane: h as usize * w as usize,
                    level,
                };
                self.resizer.resize_into(view, h, w, flip, &mut sink)
            }
            (OutputKind::U8Hwc, OutputSlot::U8(out)) => {
                let mut sink = U8HwcSink { out, row_len };
                self.resizer.resize_into(view, h, w, flip, &mut sink)
            }
            (kind, out) => Err(Error::invalid(
                "out",
                format!(
                    "a {} slot cannot hold a {kind:?} sample",
                    match out {
                        OutputSlot::F32(_) => "float32",
                        OutputSlot::U8(_) => "uint8",
                    }
                ),
            )),
        }
    }

    /// Fills the table for a float kind unless it is already loaded.
    fn load_lut(&mut self, kind: &OutputKind) -> Result<()> {
        let scaling = kind.scaling().unwrap_or_default();
        let key = match *kind {
            OutputKind::F32Chw { mean, std, .. } => {
                let b = |v: f32| v.to_bits();
                LutKey::Normalized(
                    [
                        b(mean[0]),
                        b(mean[1]),
                        b(mean[2]),
                        b(std[0]),
                        b(std[1]),
                        b(std[2]),
                    ],
                    scaling,
                )
            }
            _ => LutKey::Unnormalized(scaling),
        };
        if key == self.lut_key {
            return Ok(());
        }
        let fast = |quotient| match *kind {
            OutputKind::F32Chw { mean, std, .. } => {
                convert::FastFloat::normalized(mean, std, scaling, quotient)
            }
            _ => convert::FastFloat::unnormalized(scaling, quotient),
        };
        match *kind {
            OutputKind::F32Chw { mean, std, .. } => {
                Normalize::new(mean, std)?;
                for (c, table) in self.lut.iter_mut().enumerate() {
                    for (v, slot) in table.iter_mut().enumerate() {
                        let x = to_float_value(v as u8, scaling);
                        *slot = normalize_value(x, mean[c], std[c]);
                    }
                }
            }
            _ => {
                for table in self.lut.iter_mut() {
                    for (v, slot) in table.iter_mut().enumerate() {
                        *slot = to_float_value(v as u8, scaling);
                    }
                }
            }
        }
        // Only 256 values per channel can occur, so checking them all proves the fast
        // arithmetic equal to torch's for this kind; the cheaper form first, and where neither
        // is equal, the table.
        self.fast = [convert::Quotient::Split, convert::Quotient::Corrected]
            .into_iter()
            .map(fast)
            .find(|f| cpu::avx2_fma() && f.matches(&self.lut));
        self.lut_key = key;
        Ok(())
    }
}

/// The three `width`-long rows `y` of the planes of a CHW sample.
fn plane_rows<T>(out: &mut [T], plane: usize, width: usize, y: usize) -> [&mut [T]; 3] {
    let (r, gb) = out.split_at_mut(plane);
    let (g, b) = gb.split_at_mut(plane);
    let at = y * width..(y + 1) * width;
    [&mut r[at.clone()], &mut g[at.clone()], &mut b[at]]
}

/// Converts each resized row into the three float planes, with the verified SIMD arithmetic
/// or through the tables. (The flip happened in the resize.)
struct F32ChwSink<'a> {
    out: &'a mut [f32],
    row: &'a mut [u8],
    lut: &'a [[f32; 256]; 3],
    fast: Option<convert::FastFloat>,
    /// The conversion kernels to run (the CPU has them).
    level: SimdLevel,
    width: usize,
    plane: usize,
}

impl RowSink for F32ChwSink<'_> {
    fn row_mut(&mut self, _y: usize) -> &mut [u8] {
        self.row
    }

    fn row_done(&mut self, y: usize) {
        let planes = plane_rows(self.out, self.plane, self.width, y);
        convert::f32_row(self.fast.as_ref(), self.level, self.row, self.lut, planes);
    }
}

/// Splits each resized row into the three uint8 planes.
struct U8ChwSink<'a> {
    out: &'a mut [u8],
    row: &'a mut [u8],
    width: usize,
    plane: usize,
    /// The split kernels to run (the CPU has them).
    level: SimdLevel,
}

impl RowSink for U8ChwSink<'_> {
    fn row_mut(&mut self, _y: usize) -> &mut [u8] {
        self.row
    }

    fn row_done(&mut self, y: usize) {
        let planes = plane_rows(self.out, self.plane, self.width, y);
        convert::u8_row(self.level, self.row, planes);
    }
}

/// Resizes straight into the slot's rows.
struct U8HwcSink<'a> {
    out: &'a mut [u8],
    row_len: usize,
}

impl RowSink for U8HwcSink<'_> {
    fn row_mut(&mut self, y: usize) -> &mut [u8] {
        &mut self.out[y * self.row_len..(y + 1) * self.row_len]
    }

    fn row_done(&mut self, _y: usize) {}
}

mod convert;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::RgbImage;

    #[test]
    fn sizes_per_sample() {
        let n = OutputKind::F32Chw {
            mean: [0.5; 3],
            std: [0.5; 3],
            scaling: Scaling::Divide,
        };
        assert_eq!(n.elements_per_sample(224, 224), 150_528);
        assert_eq!(n.bytes_per_sample(224, 224), 602_112);
        assert_eq!(OutputKind::U8Hwc.bytes_per_sample(2, 3), 18);
        let unnormalized = OutputKind::F32ChwUnnormalized {
            scaling: Scaling::Reciprocal,
        };
        assert_eq!(unnormalized.element_size(), 4);
        assert_eq!(OutputKind::U8Chw.element_size(), 1);
    }

    #[test]
    fn serde_names_are_stable() {
        let k = OutputKind::F32Chw {
            mean: [0.5, 0.25, 0.0],
            std: [1.0, 2.0, 4.0],
            scaling: Scaling::Reciprocal,
        };
        let s = serde_json::to_string(&k).expect("serializes");
        assert_eq!(
            s,
            r#"{"kind":"f32_chw","mean":[0.5,0.25,0.0],"std":[1.0,2.0,4.0],"scaling":"reciprocal"}"#
        );
        assert_eq!(serde_json::from_str::<OutputKind>(&s).ok(), Some(k));
        // Older JSON, without the field, keeps meaning ToTensor's division.
        let old: OutputKind =
            serde_json::from_str(r#"{"kind":"f32_chw","mean":[0.5,0.25,0.0],"std":[1.0,2.0,4.0]}"#)
                .expect("parses");
        assert_eq!(old.scaling(), Some(Scaling::Divide));
        let u: OutputKind = serde_json::from_str(r#"{"kind":"u8_hwc"}"#).expect("parses");
        assert_eq!(u, OutputKind::U8Hwc);
        let f: OutputKind =
            serde_json::from_str(r#"{"kind":"f32_chw_unnormalized"}"#).expect("parses");
        assert_eq!(
            f,
            OutputKind::F32ChwUnnormalized {
                scaling: Scaling::Divide
            }
        );
    }

    /// torch's formulas, written out here rather than through the functions the kernel
    /// calls: `x.div(255)` or `x.mul(float32(1 / 255))`, then `sub_(mean).div_(std)`.
    fn formula(v: u8, scaling: Scaling) -> f32 {
        match scaling {
            Scaling::Divide => f32::from(v) / 255.0,
            Scaling::Reciprocal => f32::from(v) * ((1.0f64 / 255.0) as f32),
        }
    }

    fn reference_lut(mean: [f32; 3], std: [f32; 3], scaling: Scaling) -> [[f32; 256]; 3] {
        let mut lut = [[0.0; 256]; 3];
        for (c, table) in lut.iter_mut().enumerate() {
            for (v, slot) in table.iter_mut().enumerate() {
                *slot = (formula(v as u8, scaling) - mean[c]) / std[c];
            }
        }
        lut
    }

    fn unit_lut(scaling: Scaling) -> [[f32; 256]; 3] {
        let mut unit = [[0.0; 256]; 3];
        for table in unit.iter_mut() {
            for (v, slot) in table.iter_mut().enumerate() {
                *slot = formula(v as u8, scaling);
            }
        }
        unit
    }

    #[test]
    fn loaded_tables_follow_the_formulas_at_every_level() {
        let (mean, std) = ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]);
        let img = RgbImage::from_raw(1, 1, vec![0, 0, 0]).expect("sizes match");
        let mut kernel = FusedKernel::new();
        let mut out = [0f32; 3];
        for scaling in [Scaling::Divide, Scaling::Reciprocal, Scaling::Divide] {
            for (kind, want) in [
                (
                    OutputKind::F32Chw { mean, std, scaling },
                    reference_lut(mean, std, scaling),
                ),
                (
                    OutputKind::F32ChwUnnormalized { scaling },
                    unit_lut(scaling),
                ),
            ] {
                let full = CropRect::full(1, 1);
                kernel
                    .run(
                        img.view(),
                        full,
                        (1, 1),
                        false,
                        &kind,
                        OutputSlot::F32(&mut out),
                    )
                    .expect("runs");
                let bits = |l: &[[f32; 256]; 3]| l.map(|t| t.map(f32::to_bits));
                assert_eq!(bits(&kernel.lut), bits(&want), "{kind:?}");
                // Both scalings take the SIMD arithmetic, not the slower lookups.
                assert_eq!(kernel.fast.is_some(), cpu::avx2_fma(), "{kind:?}");
            }
        }
        // The two scalings are different tables: the key tells them apart.
        assert_ne!(
            unit_lut(Scaling::Divide).map(|t| t.map(f32::to_bits)),
            unit_lut(Scaling::Reciprocal).map(|t| t.map(f32::to_bits))
        );
    }

    #[test]
    fn fast_float_arithmetic_is_verified_exhaustively() {
        // The usual normalizations take the division-free path...
        let quotients = [convert::Quotient::Split, convert::Quotient::Corrected];
        for (mean, std) in [
            ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
            ([0.5, 0.5, 0.5], [0.5, 0.5, 0.5]),
            ([0.4914, 0.4822, 0.4465], [0.247, 0.2435, 0.2616]),
        ] {
            for q in quotients {
                for scaling in [Scaling::Divide, Scaling::Reciprocal] {
                    let fast = convert::FastFloat::normalized(mean, std, scaling, q);
                    assert!(
                        fast.matches(&reference_lut(mean, std, scaling)),
                        "{mean:?} {std:?} {scaling:?} {q:?}"
                    );
                }
            }
        }
        for scaling in [Scaling::Divide, Scaling::Reciprocal] {
            for q in quotients {
                let fast = convert::FastFloat::unnormalized(scaling, q);
                assert!(fast.matches(&unit_lut(scaling)), "{scaling:?} {q:?}");
            }
        }
        // ...and the check does catch arithmetic that is off by an ulp somewhere, the other
        // scaling's included.
        let (mean, std) = ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]);
        for scaling in [Scaling::Divide, Scaling::Reciprocal] {
            let mut lut = reference_lut(mean, std, scaling);
            lut[1][200] = f32::from_bits(lut[1][200].to_bits() + 1);
            for q in quotients {
                let fast = convert::FastFloat::normalized(mean, std, scaling, q);
                assert!(!fast.matches(&lut));
            }
        }
        for q in quotients {
            let divide = convert::FastFloat::unnormalized(Scaling::Divide, q);
            assert!(!divide.matches(&unit_lut(Scaling::Reciprocal)));
            let reciprocal = convert::FastFloat::unnormalized(Scaling::Reciprocal, q);
            assert!(!reciprocal.matches(&unit_lut(Scaling::Divide)));
        }
    }

    #[test]
    fn conversion_kernels_equal_the_tables() {
        // Every kernel this CPU runs (AVX-512, AVX2, tables) must give the tables' bits, for
        // every byte value in every channel and for rows with and without a tail.
        let kinds = [
            Some(([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])),
            Some(([0.5, 0.5, 0.5], [0.5, 0.5, 0.5])),
            None,
        ];
        let quotients = [convert::Quotient::Split, convert::Quotient::Corrected];
        let scalings = [Scaling::Divide, Scaling::Reciprocal];
        for (params, q, scaling) in kinds.into_iter().flat_map(|k| {
            quotients
                .into_iter()
                .flat_map(move |q| scalings.map(move |s| (k, q, s)))
        }) {
            let (lut, fast) = match params {
                Some((mean, std)) => (
                    reference_lut(mean, std, scaling),
                    convert::FastFloat::normalized(mean, std, scaling, q),
                ),
                None => (
                    unit_lut(scaling),
                    convert::FastFloat::unnormalized(scaling, q),
                ),
            };
            assert!(fast.matches(&lut));
            for px in [1usize, 7, 8, 15, 16, 17, 33, 224, 261] {
                // Pixel x, channel c: (97 x + 31 c) mod 256, every value once per 256 pixels.
                let row: Vec<u8> = (0..3 * px)
                    .map(|i| ((i / 3 * 97 + i % 3 * 31) % 256) as u8)
                    .collect();
                let levels: Vec<SimdLevel> = [
                    SimdLevel::Portable,
                    SimdLevel::Avx2,
                    SimdLevel::Avx512Ymm,
                    SimdLevel::Avx512,
                ]
                .into_iter()
                .filter(|&l| l <= SimdLevel::detected())
                .collect();
                let mut variants = vec![(None, SimdLevel::Portable)];
                if cpu::avx2_fma() {
                    variants.extend(levels.iter().map(|&l| (Some(&fast), l)));
                }
                for (f, level) in variants {
                    let mut out = vec![f32::NAN; 3 * px];
                    let (r, gb) = out.split_at_mut(px);
                    let (g, b) = gb.split_at_mut(px);
                    convert::f32_row(f, level, &row, &lut, [r, g, b]);
                    for (x, p) in row.chunks_exact(3).enumerate() {
                        for c in 0..3 {
                            let want = lut[c][usize::from(p[c])].to_bits();
                            let got = out[c * px + x].to_bits();
                            assert_eq!(
                                got,
                                want,
                                "{px} px, fast {}, {level:?}, {scaling:?}",
                                f.is_some()
                            );
                        }
                    }
                }
                for &level in &levels {
                    let mut out = vec![0xAAu8; 3 * px];
                    let (r, gb) = out.split_at_mut(px);
                    let (g, b) = gb.split_at_mut(px);
                    convert::u8_row(level, &row, [r, g, b]);
                    for (x, p) in row.chunks_exact(3).enumerate() {
                        for c in 0..3 {
                            assert_eq!(out[c * px + x], p[c], "{px} px, {level:?}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn every_simd_level_gives_the_same_sample() {
        // A textured 301x217 image, cropped off-center, shrunk and enlarged, both flips.
        let (iw, ih) = (301u32, 217u32);
        // With saturated 0/255 bands, where the cubic's lobes overshoot.
        let pixels: Vec<u8> = (0..3 * iw * ih)
            .map(|i| match (i / 3 % iw / 5 + i / (3 * iw) / 7) % 6 {
                0 => 255,
                1 => 0,
                _ => ((i * 37 + (i / 903) * 11) % 251) as u8,
            })
            .collect();
        let img = RgbImage::from_raw(iw, ih, pixels).expect("sizes match");
        let crop = CropRect {
            top: 13,
            left: 29,
            height: 181,
            width: 250,
        };
        let float = OutputKind::F32Chw {
            mean: [0.485, 0.456, 0.406],
            std: [0.229, 0.224, 0.225],
            scaling: Scaling::Divide,
        };
        let v2_float = OutputKind::F32Chw {
            mean: [0.485, 0.456, 0.406],
            std: [0.229, 0.224, 0.225],
            scaling: Scaling::Reciprocal,
        };
        // Widths that are not a multiple of 8 pixels too: the float planes' last group is
        // partial where the kernels convert 8 pixels at a time. Every filter: bicubic's
        // SIMD kernels clamp overshooting sums before the conversion sees the rows.
        let sizes = [(64, 48), (224, 224), (300, 400), (45, 61), (200, 221)];
        let filters = Filter::ALL;
        for ((h, w), filter) in sizes
            .into_iter()
            .flat_map(|s| filters.into_iter().map(move |f| (s, f)))
        {
            for flip in [false, true] {
                let run = |level: SimdLevel| {
                    let mut kernel = FusedKernel::new();
                    kernel.set_simd_limit(level);
                    kernel.set_filter(filter);
                    let mut sample = |kind: &OutputKind, slot: OutputSlot<'_>| {
                        kernel
                            .run(img.view(), crop, (h, w), flip, kind, slot)
                            .expect("runs")
                    };
                    let mut f = vec![0f32; float.elements_per_sample(h, w)];
                    sample(&float, OutputSlot::F32(&mut f));
                    let mut f1 = vec![0f32; float.elements_per_sample(h, w)];
                    let unnormalized = OutputKind::F32ChwUnnormalized {
                        scaling: Scaling::Divide,
                    };
                    sample(&unnormalized, OutputSlot::F32(&mut f1));
                    let mut f2 = vec![0f32; float.elements_per_sample(h, w)];
                    sample(&v2_float, OutputSlot::F32(&mut f2));
                    let mut u = vec![0u8; OutputKind::U8Chw.elements_per_sample(h, w)];
                    sample(&OutputKind::U8Chw, OutputSlot::U8(&mut u));
                    let bits = |f: Vec<f32>| f.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                    (bits(f), bits(f1), bits(f2), u)
                };
                let portable = run(SimdLevel::Portable);
                let what = format!("{h}x{w} {filter:?} flip {flip}");
                assert_eq!(run(SimdLevel::Avx2), portable, "{what}: AVX2");
                assert_eq!(
                    run(SimdLevel::Avx512Ymm),
                    portable,
                    "{what}: AVX-512 at 256 bits"
                );
                assert_eq!(run(SimdLevel::Avx512), portable, "{what}: AVX-512");
                assert_eq!(run(default_simd()), portable, "{what}: default");
            }
        }
    }

    #[test]
    fn bad_slots_and_params_are_errors() {
        let img = RgbImage::from_raw(4, 4, vec![7; 48]).expect("sizes match");
        let mut k = FusedKernel::new();
        let full = CropRect::full(4, 4);
        let mut f = vec![0.0f32; 12];
        let mut b = vec![0u8; 12];
        // Wrong element type.
        assert!(k
            .run(
                img.view(),
                full,
                (2, 2),
                false,
                &OutputKind::U8Chw,
                OutputSlot::F32(&mut f)
            )
            .is_err());
        // Wrong length.
        assert!(k
            .run(
                img.view(),
                full,
                (2, 3),
                false,
                &OutputKind::U8Hwc,
                OutputSlot::U8(&mut b)
            )
            .is_err());
        // Zero std.
        let zero = OutputKind::F32Chw {
            mean: [0.0; 3],
            std: [1.0, 0.0, 1.0],
            scaling: Scaling::Divide,
        };
        assert!(zero.validate().is_err());
        assert!(k
            .run(
                img.view(),
                full,
                (2, 2),
                false,
                &zero,
                OutputSlot::F32(&mut f)
            )
            .is_err());
        // Crop outside the image.
        let outside = CropRect {
            top: 3,
            left: 0,
            height: 2,
            width: 2,
        };
        assert!(k
            .run(
                img.view(),
                outside,
                (2, 2),
                false,
                &OutputKind::U8Hwc,
                OutputSlot::U8(&mut b)
            )
            .is_err());
        // And a valid call works after the failures.
        k.run(
            img.view(),
            full,
            (2, 2),
            true,
            &OutputKind::U8Hwc,
            OutputSlot::U8(&mut b),
        )
        .expect("valid");
        assert!(b.iter().all(|&v| v == 7));
    }
}
