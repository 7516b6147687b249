//! RandomResizedCrop, center crop and Resize(int) geometry: properties over random inputs, and
//! cases worked out by hand from torchvision's code (`RandomResizedCrop.get_params`,
//! `F.center_crop`, `_compute_resized_output_size`).

use ferroloader_transforms::crop::{
    center_crop, center_crop_rect, resize_shorter_side, RandomResizedCrop, DEFAULT_RATIO,
    DEFAULT_SCALE,
};
use ferroloader_transforms::rng::{sample_rng, SampleRng, TorchDraws};
use ferroloader_transforms::{CropRect, Error};
use proptest::prelude::*;

use crate::scripted;
use scripted::Scripted;

/// Passes draws through to a real generator, counting the integer draws: an accepted attempt
/// makes exactly two, the fallback none.
struct Counting {
    rng: SampleRng,
    ints: usize,
}

impl TorchDraws for Counting {
    fn uniform_f32(&mut self, from: f32, to: f32) -> f32 {
        self.rng.uniform_f32(from, to)
    }

    fn randint(&mut self, high: u32) -> u32 {
        self.ints += 1;
        self.rng.randint(high)
    }
}

fn rect(top: u32, left: u32, height: u32, width: u32) -> CropRect {
    CropRect {
        top,
        left,
        height,
        width,
    }
}

fn rrc_default() -> RandomResizedCrop {
    RandomResizedCrop::with_defaults((224, 224)).expect("valid")
}

#[test]
fn accepted_first_attempt_by_hand() {
    // 500x375, area 187500. Scale draw 0.5 -> target area 93750; log-ratio draw 0 -> ratio 1;
    // w = h = round(sqrt(93750) = 306.19) = 306. Fits, so i ~ randint(0, 375 - 306 + 1 = 70)
    // and j ~ randint(0, 500 - 306 + 1 = 195).
    let mut d = Scripted::in_range(&[0.5, 0.0], &[13, 42]);
    let got = rrc_default().get_params(500, 375, &mut d);
    assert_eq!(got, rect(13, 42, 306, 306));
    assert_eq!(d.int_highs, [70, 195]);
    // The draws' ranges are torch's: scale as float32, log of the float32 ratios.
    assert_eq!(d.uniform_ranges[0], (0.08f32, 1.0f32));
    assert_eq!(
        d.uniform_ranges[1],
        ((0.75f32).ln(), (4.0f32 / 3.0f32).ln())
    );
}

#[test]
fn python_rounds_half_to_even() {
    // 8x8, area 64. Scale 25/256 (in [0.08, 1)) -> area 6.25 -> sqrt 2.5 -> round() gives 2,
    // not 3; i, j ~ randint(0, 7).
    let mut d = Scripted::in_range(&[25.0 / 256.0, 0.0], &[0, 0]);
    let got = rrc_default().get_params(8, 8, &mut d);
    assert_eq!((got.width, got.height), (2, 2));
    assert_eq!(d.int_highs, [7, 7]);
    // Scale 49/256 -> area 12.25 -> sqrt 3.5 -> round() gives 4.
    let mut d = Scripted::in_range(&[49.0 / 256.0, 0.0], &[1, 2]);
    let got = rrc_default().get_params(8, 8, &mut d);
    assert_eq!(got, rect(1, 2, 4, 4));
    assert_eq!(d.int_highs, [5, 5]);
}

#[test]
fn rejected_attempt_then_accepted_by_hand() {
    // 100x10, area 1000. Attempt 1: scale 0.9 -> 900, ratio exp(0.25 as f32) = 1.2840254:
    // w = round(sqrt(1155.6)) = 34, h = round(sqrt(700.9) = 26.47) = 26 > 10: rejected, no
    // integer draws. Attempt 2: scale 0.08 -> 80, ratio 1: w = h = round(8.94) = 9, fits:
    // i ~ randint(0, 2), j ~ randint(0, 92).
    let mut d = Scripted::in_range(&[0.9, 0.25, 0.08, 0.0], &[1, 90]);
    let got = rrc_default().get_params(100, 10, &mut d);
    assert_eq!(got, rect(1, 90, 9, 9));
    assert_eq!(d.int_highs, [2, 92]);
    assert!(d.uniforms.is_empty());
}

#[test]
fn fallback_by_hand() {
    // Ten attempts at 99% of the area never fit these images.
    let ten = |log_ratio: f32| [0.99f32, log_ratio].repeat(10);
    // Wide 100x10: ratio 1 gives w = h = round(sqrt(990) = 31.46) = 31 > 10, ten times.
    // in_ratio 10 > 4/3, so h = 10, w = int(round(10 * 4/3 = 13.33)) = 13,
    // i = (10 - 10) // 2 = 0, j = (100 - 13) // 2 = 43.
    let mut d = Scripted::in_range(&ten(0.0), &[]);
    assert_eq!(
        rrc_default().get_params(100, 10, &mut d),
        rect(0, 43, 10, 13)
    );
    assert!(d.int_highs.is_empty());
    assert_eq!(d.uniform_ranges.len(), 20);
    // Tall 10x100: in_ratio 0.1 < 3/4, so w = 10, h = int(round(10 / 0.75 = 13.33)) = 13,
    // i = (100 - 13) // 2 = 43, j = 0.
    let mut d = Scripted::in_range(&ten(0.0), &[]);
    assert_eq!(
        rrc_default().get_params(10, 100, &mut d),
        rect(43, 0, 13, 10)
    );
    // Half to even in the fallback: ratio (2, 3) on 5x100 (the attempts: area 495, ratio
    // exp(ln 2) = 2, w = round(31.46) = 31 > 5): h = round(5 / 2 = 2.5) = 2, i = 49.
    let rrc = RandomResizedCrop::new((8, 8), DEFAULT_SCALE, (2.0, 3.0)).expect("valid");
    let mut d = Scripted::in_range(&ten(2.0f32.ln()), &[]);
    assert_eq!(rrc.get_params(5, 100, &mut d), rect(49, 0, 2, 5));
    // In range: the whole image. 100x90, area 9000: w = h = round(sqrt(8910) = 94.4) = 94 > 90.
    let mut d = Scripted::in_range(&ten(0.0), &[]);
    assert_eq!(
        rrc_default().get_params(100, 90, &mut d),
        rect(0, 0, 90, 100)
    );
    // The fallback as its own function agrees.
    assert_eq!(rrc_default().fallback(100, 10), rect(0, 43, 10, 13));
}

#[test]
fn empty_fallback_is_widened_to_one_pixel() {
    // torchvision would return h = round(1 / 3) = 0 here and fail in the resize.
    let rrc = RandomResizedCrop::new((8, 8), (5.0, 6.0), (3.0, 4.0)).expect("valid");
    let got = rrc.fallback(1, 50);
    assert_eq!(got, rect(24, 0, 1, 1));
    assert!(got.fits_in(1, 50));
}

#[test]
fn center_crop_by_hand() {
    // int(round(151 / 2.0 = 75.5)) = 76, int(round(276 / 2.0)) = 138.
    assert_eq!(
        center_crop_rect(500, 375, 224, 224).expect("fits"),
        rect(76, 138, 224, 224)
    );
    // 1.5 -> 2 and 2.5 -> 2 (half to even).
    assert_eq!(
        center_crop_rect(7, 5, 2, 2).expect("fits"),
        rect(2, 2, 2, 2)
    );
    assert_eq!(
        center_crop_rect(6, 6, 3, 3).expect("fits"),
        rect(2, 2, 3, 3)
    );
    assert_eq!(
        center_crop_rect(256, 256, 224, 224).expect("fits"),
        rect(16, 16, 224, 224)
    );
    assert_eq!(
        center_crop_rect(9, 9, 9, 9).expect("fits"),
        rect(0, 0, 9, 9)
    );
    // torchvision pads here: center_crop_rect, the window alone, refuses.
    assert!(matches!(
        center_crop_rect(100, 100, 101, 50),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(center_crop_rect(100, 100, 0, 50).is_err());
}

#[test]
fn center_crop_pads_as_torchvision_by_hand() {
    // A 40x53 (w x h) image to 64x64: width short by 24 -> 12 + 12, height by 11 -> 5 + 6;
    // the padded image is the crop, so the window is all of it.
    let c = center_crop(40, 53, 64, 64).expect("pads");
    assert!(c.pads());
    assert_eq!(c.padding, [12, 5, 12, 6]);
    assert_eq!(c.rect, rect(0, 0, 64, 64));
    // Padded on one axis only: height 101 from 100 pads (0, 1) below; the width 50 of 100 is
    // cropped as usual, left = round(50 / 2.0) = 25.
    let c = center_crop(100, 100, 101, 50).expect("pads");
    assert_eq!(c.padding, [0, 0, 0, 1]);
    assert_eq!(c.rect, rect(0, 25, 101, 50));
    // Fits: no padding, the window of center_crop_rect.
    let c = center_crop(500, 375, 224, 224).expect("fits");
    assert!(!c.pads());
    assert_eq!(c.rect, rect(76, 138, 224, 224));
    assert!(center_crop(100, 100, 0, 50).is_err());
}

#[test]
fn resize_shorter_side_by_hand() {
    // Landscape 500x375 to 256: new_long = int(256 * 500 / 375 = 341.33) = 341 -> [256, 341].
    assert_eq!(
        resize_shorter_side(500, 375, 256, None).ok(),
        Some((256, 341))
    );
    // Portrait: [341, 256]. Square: [256, 256].
    assert_eq!(
        resize_shorter_side(375, 500, 256, None).ok(),
        Some((341, 256))
    );
    assert_eq!(
        resize_shorter_side(300, 300, 256, None).ok(),
        Some((256, 256))
    );
    // int(224 * 640 / 480 = 298.67) = 298: truncation, not rounding.
    assert_eq!(
        resize_shorter_side(640, 480, 224, None).ok(),
        Some((224, 298))
    );
    // max_size: 1000x100 to 50 gives long 500 > 300, so short = int(300 * 50 / 500) = 30.
    assert_eq!(
        resize_shorter_side(1000, 100, 50, Some(300)).ok(),
        Some((30, 300))
    );
    // Under max_size nothing changes.
    assert_eq!(
        resize_shorter_side(500, 375, 256, Some(400)).ok(),
        Some((256, 341))
    );
    // torchvision raises when max_size <= size.
    assert!(resize_shorter_side(500, 375, 256, Some(256)).is_err());
    assert!(resize_shorter_side(0, 375, 256, None).is_err());
    assert!(resize_shorter_side(500, 375, 0, None).is_err());
    // A side that comes out empty: 10000x1 to 1 with max_size 2 -> short int(2 * 1 / 10000) = 0.
    assert!(resize_shorter_side(10_000, 1, 1, Some(2)).is_err());
}

fn valid_config() -> impl Strategy<Value = RandomResizedCrop> {
    (0.01f64..1.0, 0.0f64..1.0, 0.2f64..3.0, 0.0f64..3.0).prop_map(|(s0, ds, r0, dr)| {
        RandomResizedCrop::new((224, 224), (s0, (s0 + ds).min(1.0)), (r0, r0 + dr))
            .expect("valid by construction")
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn crop_is_inside_and_within_bounds(
        width in 1u32..3000,
        height in 1u32..3000,
        seed in any::<u64>(),
        index in 0u64..1_000_000,
        rrc in valid_config(),
    ) {
        let mut draws = Counting { rng: sample_rng(seed, 0, index), ints: 0 };
        let got = rrc.get_params(width, height, &mut draws);
        prop_assert!(got.fits_in(width, height), "{got:?} in {width}x{height}");
        let (w, h) = (f64::from(got.width), f64::from(got.height));
        if draws.ints == 2 {
            // An accepted attempt: w and h are rounded from w' h' = A and w' / h' = r with
            // A in scale * area and r in ratio (bounds as float32, hence the slack).
            let area = f64::from(width) * f64::from(height);
            let (s0, s1) = rrc.scale();
            let (r0, r1) = rrc.ratio();
            let slack = 1e-6;
            let (a_lo, a_hi) = ((w - 0.5) * (h - 0.5), (w + 0.5) * (h + 0.5));
            prop_assert!(a_hi >= s0 * area * (1.0 - slack) && a_lo <= s1 * area * (1.0 + slack),
                "area of {got:?} vs scale {s0}..{s1} of {area}");
            let (q_lo, q_hi) = ((w - 0.5) / (h + 0.5), (w + 0.5) / (h - 0.5));
            prop_assert!(q_hi >= r0 * (1.0 - slack) && q_lo <= r1 * (1.0 + slack),
                "ratio of {got:?} vs {r0}..{r1}");
        } else {
            // The fallback: centered, and the same as calling it directly.
            prop_assert_eq!(draws.ints, 0);
            prop_assert_eq!(got, rrc.fallback(width, height));
            prop_assert_eq!(got.top, (height - got.height) / 2);
            prop_assert_eq!(got.left, (width - got.width) / 2);
            let in_ratio = f64::from(width) / f64::from(height);
            let (r0, r1) = rrc.ratio();
            if in_ratio < r0 {
                prop_assert_eq!(got.width, width);
            } else if in_ratio > r1 {
                prop_assert_eq!(got.height, height);
            } else {
                prop_assert_eq!(got, CropRect::full(width, height));
            }
        }
    }

    #[test]
    fn same_sample_same_crop(
        width in 1u32..2000,
        height in 1u32..2000,
        seed in any::<u64>(),
        epoch in 0u64..100,
        index in any::<u64>(),
    ) {
        let rrc = rrc_default();
        let a = rrc.get_params(width, height, &mut sample_rng(seed, epoch, index));
        let b = rrc.get_params(width, height, &mut sample_rng(seed, epoch, index));
        prop_assert_eq!(a, b);
    }

    #[test]
    fn center_crop_is_centered(
        width in 1u32..5000,
        height in 1u32..5000,
        fh in 0.0f64..1.0,
        fw in 0.0f64..1.0,
    ) {
        let out_h = ((f64::from(height) * fh) as u32).max(1);
        let out_w = ((f64::from(width) * fw) as u32).max(1);
        let r = center_crop_rect(width, height, out_h, out_w).expect("fits");
        prop_assert!(r.fits_in(width, height));
        // Margins differ by at most one pixel, the extra one going where half-to-even says.
        let (top, bottom) = (r.top, height - r.bottom());
        let (left, right) = (r.left, width - r.right());
        prop_assert!(top.abs_diff(bottom) <= 1 && left.abs_diff(right) <= 1);
        let d = height - out_h;
        // d / 2 exactly when d is even; (d - 1) / 2 + 0.5 rounds to the even neighbour.
        let odd_and_rounds_up = d % 2 == 1 && (d / 2) % 2 == 1;
        let expect_top = d / 2 + u32::from(odd_and_rounds_up);
        prop_assert_eq!(top, expect_top);
    }

    #[test]
    fn center_crop_padding_is_torchvisions(
        width in 1u32..3000,
        height in 1u32..3000,
        out_h in 1u32..3000,
        out_w in 1u32..3000,
    ) {
        let c = center_crop(width, height, out_h, out_w).expect("valid");
        let [l, t, r, b] = c.padding;
        // torchvision: (crop - side) // 2 before and (crop - side + 1) // 2 (the ceiling)
        // after, where the crop is longer; the window then lies in the padded image.
        let before_after = |side: u32, out: u32| {
            if out > side { ((out - side) / 2, (out - side).div_ceil(2)) } else { (0, 0) }
        };
        prop_assert_eq!((l, r), before_after(width, out_w));
        prop_assert_eq!((t, b), before_after(height, out_h));
        prop_assert!(c.rect.fits_in(width + l + r, height + t + b));
        prop_assert_eq!((c.rect.height, c.rect.width), (out_h, out_w));
        if !c.pads() {
            prop_assert_eq!(Some(c.rect), center_crop_rect(width, height, out_h, out_w).ok());
        }
    }

    #[test]
    fn resize_shorter_side_keeps_the_aspect(
        width in 1u32..10_000,
        height in 1u32..10_000,
        size in 1u32..1000,
    ) {
        let (h, w) = resize_shorter_side(width, height, size, None).expect("valid");
        let (short, long) = if width <= height { (w, h) } else { (h, w) };
        prop_assert_eq!(short, size);
        // long = floor(size * long_in / short_in) (exact here: the operands are small).
        let (s_in, l_in) = (width.min(height), width.max(height));
        prop_assert_eq!(u64::from(long), u64::from(size) * u64::from(l_in) / u64::from(s_in));
    }
}

#[test]
fn many_seeds_reach_both_accept_and_fallback() {
    // A guard on the property test above: both branches must actually be exercised.
    // On 1000x300 an attempt fits only when the area draw is small for its ratio.
    let rrc = RandomResizedCrop::new((224, 224), (0.3, 1.0), DEFAULT_RATIO).expect("valid");
    let (mut accepted, mut fallback) = (0, 0);
    for index in 0..2000 {
        let mut d = Counting {
            rng: sample_rng(1, 0, index),
            ints: 0,
        };
        let _ = rrc.get_params(1000, 300, &mut d);
        if d.ints == 2 {
            accepted += 1;
        } else {
            fallback += 1;
        }
    }
    assert!(accepted > 100 && fallback > 100, "{accepted} {fallback}");
}
