//! Pixel conversions to packed RGB, each one exactly what Pillow's `convert("RGB")` computes for
//! the mode Pillow would have opened the image in.
//!
//! Must not: composite alpha (Pillow drops it), round where Pillow truncates, or guess: every rule
//! here is pinned by a fixture decoded by Pillow in `tests/decode_parity.rs`.

/// Pillow's `MULDIV255(a, b)`: `(a * b + 127) / 255` the fast way, bit-exact with its C macro.
#[inline]
fn muldiv255(a: i32, b: i32) -> i32 {
    let t = a * b + 128;
    ((t >> 8) + t) >> 8
}

/// Adobe CMYK (as stored in JPEGs and returned raw by libjpeg) to RGB, like Pillow: the
/// JPEG plugin opens 4-component JPEGs with rawmode "CMYK;I" (every byte inverted), then
/// `cmyk2rgb` computes `nk = 255 - k; out = nk - MULDIV255(c, nk)` per channel.
pub(crate) fn adobe_cmyk_to_rgb(src: &[u8], dst: &mut [u8]) {
    for (s, d) in src.chunks_exact(4).zip(dst.chunks_exact_mut(3)) {
        // Inverted by "CMYK;I", then inverted again by nk = 255 - k: nk is the stored byte.
        let nk = i32::from(s[3]);
        for (dc, &sc) in d.iter_mut().zip(&s[..3]) {
            let cyan = 255 - i32::from(sc);
            *dc = (nk - muldiv255(cyan, nk)).clamp(0, 255) as u8;
        }
    }
}

/// libjpeg's YCbCr->RGB tables (jdcolor.c, 16-bit fixed point), for YCCK data a backend hands
/// over undecoded: R = Y + 1.402 Cr', G = Y - 0.34414 Cb' - 0.71414 Cr', B = Y + 1.772 Cb'.
struct YccTables {
    cr_r: [i32; 256],
    cb_b: [i32; 256],
    cr_g: [i32; 256],
    cb_g: [i32; 256],
}

const SCALEBITS: i32 = 16;
const ONE_HALF: i32 = 1 << (SCALEBITS - 1);

const fn fix(x: f64) -> i32 {
    (x * (1 << SCALEBITS) as f64 + 0.5) as i32
}

const YCC: YccTables = {
    let mut t = YccTables {
        cr_r: [0; 256],
        cb_b: [0; 256],
        cr_g: [0; 256],
        cb_g: [0; 256],
    };
    let mut i = 0;
    while i < 256 {
        let x = i as i32 - 128;
        t.cr_r[i] = (fix(1.40200) * x + ONE_HALF) >> SCALEBITS;
        t.cb_b[i] = (fix(1.77200) * x + ONE_HALF) >> SCALEBITS;
        t.cr_g[i] = -fix(0.71414) * x;
        t.cb_g[i] = -fix(0.34414) * x + ONE_HALF;
        i += 1;
    }
    t
};

/// YCCK (Adobe transform 2, components as decoded, before color conversion) to RGB: libjpeg's
/// `ycck_cmyk_convert` (CMY = 255 - YCbCr->RGB, K unchanged) followed by
/// [`adobe_cmyk_to_rgb`], so a backend that cannot convert YCCK itself lands on Pillow's pixels.
pub(crate) fn ycck_to_rgb(src: &[u8], dst: &mut [u8]) {
    for (s, d) in src.chunks_exact(4).zip(dst.chunks_exact_mut(3)) {
        let y = i32::from(s[0]);
        let cb = usize::from(s[1]);
        let cr = usize::from(s[2]);
        let rgb = [
            (y + YCC.cr_r[cr]).clamp(0, 255),
            (y + ((YCC.cb_g[cb] + YCC.cr_g[cr]) >> SCALEBITS)).clamp(0, 255),
            (y + YCC.cb_b[cb]).clamp(0, 255),
        ];
        let nk = i32::from(s[3]);
        for (dc, cyan) in d.iter_mut().zip(rgb) {
            // The CMYK byte is 255 - rgb; Pillow inverts it back, so rgb is its "cyan".
            *dc = (nk - muldiv255(cyan, nk)).clamp(0, 255) as u8;
        }
    }
}

/// Gray to RGB by replication (Pillow's L->RGB).
pub(crate) fn gray_to_rgb(src: &[u8], dst: &mut [u8]) {
    for (&v, d) in src.iter().zip(dst.chunks_exact_mut(3)) {
        d.fill(v);
    }
}

/// Gray + alpha to RGB: replicate gray, drop alpha (Pillow's LA->RGB does not composite).
pub(crate) fn gray_alpha_to_rgb(src: &[u8], dst: &mut [u8]) {
    for (s, d) in src.chunks_exact(2).zip(dst.chunks_exact_mut(3)) {
        d.fill(s[0]);
    }
}

/// RGBA to RGB: drop alpha (Pillow's RGBA->RGB does not composite).
pub(crate) fn rgba_to_rgb(src: &[u8], dst: &mut [u8]) {
    for (s, d) in src.chunks_exact(4).zip(dst.chunks_exact_mut(3)) {
        d.copy_from_slice(&s[..3]);
    }
}

fn u16_at(s: &[u8], i: usize) -> u16 {
    u16::from_ne_bytes([s[2 * i], s[2 * i + 1]])
}

/// 16-bit gray to RGB as Pillow does it: a 16-bit gray PNG/TIFF opens as mode "I;16", and
/// I;16->RGB *clips* (values above 255 become 255; it does not scale). `src` is native-endian.
pub(crate) fn gray16_to_rgb(src: &[u8], dst: &mut [u8]) {
    for (s, d) in src.chunks_exact(2).zip(dst.chunks_exact_mut(3)) {
        d.fill(u16_at(s, 0).min(255) as u8);
    }
}

/// 16-bit samples with `channels` channels to RGB: Pillow opens 16-bit RGB/RGBA/LA PNGs with the
/// "RGB;16B" / "RGBA;16B" / "LA;16B" raw modes, which keep each sample's high byte (truncation,
/// no rounding). Gray+alpha replicates gray; alpha is dropped. `src` is native-endian.
pub(crate) fn high_bytes_to_rgb(src: &[u8], channels: usize, dst: &mut [u8]) {
    for (s, d) in src.chunks_exact(2 * channels).zip(dst.chunks_exact_mut(3)) {
        if channels < 3 {
            d.fill((u16_at(s, 0) >> 8) as u8);
        } else {
            for (c, dc) in d.iter_mut().enumerate() {
                *dc = (u16_at(s, c) >> 8) as u8;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn muldiv255_is_rounded_division() {
        for a in 0..=255 {
            for b in 0..=255 {
                let exact = (a * b) as f64 / 255.0;
                assert!(
                    (muldiv255(a, b) as f64 - exact).abs() <= 0.5 + 1e-9,
                    "{a} {b}"
                );
            }
        }
    }

    #[test]
    fn cmyk_extremes() {
        let mut out = [0u8; 9];
        // Stored Adobe bytes: 255 means "no ink". White, black (K ink), pure cyan ink.
        adobe_cmyk_to_rgb(
            &[255, 255, 255, 255, 255, 255, 255, 0, 0, 255, 255, 255],
            &mut out,
        );
        assert_eq!(out, [255, 255, 255, 0, 0, 0, 0, 255, 255]);
    }

    #[test]
    fn ycck_neutral_gray_is_cmyk_of_its_inverse() {
        // Y=200, Cb=Cr=128 is RGB (200,200,200): libjpeg stores C=M=Y=55; Pillow inverts to 200.
        let mut a = [0u8; 3];
        let mut b = [0u8; 3];
        for k in [0u8, 17, 128, 255] {
            ycck_to_rgb(&[200, 128, 128, k], &mut a);
            adobe_cmyk_to_rgb(&[55, 55, 55, k], &mut b);
            assert_eq!(a, b, "k={k}");
        }
        // The tables match libjpeg's at the extremes (jdcolor.c values).
        assert_eq!((YCC.cr_r[0], YCC.cr_r[255]), (-179, 178));
        assert_eq!((YCC.cb_b[0], YCC.cb_b[255]), (-227, 225));
    }

    #[test]
    fn sixteen_bit_rules() {
        let mut out = [0u8; 9];
        let src: Vec<u8> = [100u16, 256, 65535]
            .iter()
            .flat_map(|v| v.to_ne_bytes())
            .collect();
        gray16_to_rgb(&src, &mut out);
        assert_eq!(out, [100, 100, 100, 255, 255, 255, 255, 255, 255]);
        let src: Vec<u8> = [0x12ffu16, 0xab00, 0x00ff, 0xffff]
            .iter()
            .flat_map(|v| v.to_ne_bytes())
            .collect();
        let mut out = [0u8; 3];
        high_bytes_to_rgb(&src, 4, &mut out);
        assert_eq!(out, [0x12, 0xab, 0x00]);
        let mut out = [0u8; 6];
        high_bytes_to_rgb(&src, 2, &mut out);
        assert_eq!(out, [0x12, 0x12, 0x12, 0x00, 0x00, 0x00]);
    }

    #[test]
    fn alpha_is_dropped_not_composited() {
        let mut out = [0u8; 6];
        rgba_to_rgb(&[10, 20, 30, 0, 40, 50, 60, 128], &mut out);
        assert_eq!(out, [10, 20, 30, 40, 50, 60]);
        gray_alpha_to_rgb(&[7, 0, 9, 255], &mut out);
        assert_eq!(out, [7, 7, 7, 9, 9, 9]);
        gray_to_rgb(&[1, 2], &mut out);
        assert_eq!(out, [1, 1, 1, 2, 2, 2]);
    }
}
