//! JPEG through zune-jpeg 0.4: the pure-Rust backend (no C, no `unsafe` of ours).
//!
//! Not bit-exact with Pillow: zune's IDCT and chroma upsampling round differently from libjpeg's
//! ISLOW + fancy upsampling; `tests/decode_parity.rs` measures and bounds the difference. Color
//! conversion of 4-component images is ours (convert.rs), so CMYK/YCCK follow Pillow's formula.
//! It must not be used for region or scaled decodes: it always decodes the whole image.

use std::panic::{catch_unwind, AssertUnwindSafe};

use zune_core::colorspace::ColorSpace;
use zune_core::options::DecoderOptions;
use zune_jpeg::errors::DecodeErrors;
use zune_jpeg::JpegDecoder;

use super::convert;
use super::markers::Frame;
use crate::error::{Error, Result};
use crate::image::{grow_zeroed, RgbImage};

const FORMAT: &str = "jpeg";

/// Same progressive-scan cap as the libjpeg-turbo path.
const MAX_SCANS: usize = 500;

fn options() -> DecoderOptions {
    DecoderOptions::default()
        // The frame header was checked against our pixel limit; JPEG caps each side at 65535.
        .set_max_width(usize::from(u16::MAX))
        .set_max_height(usize::from(u16::MAX))
        // Lenient like libjpeg/Pillow: recover from corrupt entropy data instead of failing.
        // Truncation is judged before decoding (markers.rs), so leniency cannot hide it.
        .set_strict_mode(false)
        .jpeg_set_max_scans(MAX_SCANS)
}

/// Decodes the whole JPEG into `out` as RGB (`frame` from the marker walk, already checked).
pub(crate) fn decode(
    bytes: &[u8],
    frame: &Frame,
    out: &mut RgbImage,
    scratch: &mut Vec<u8>,
) -> Result<()> {
    // zune-jpeg is fuzzed, but a panic on one bad file must not take a training run down with
    // it: report it as corrupt data instead.
    catch_unwind(AssertUnwindSafe(|| {
        decode_inner(bytes, frame, out, scratch)
    }))
    .unwrap_or_else(|_| {
        Err(Error::Corrupt {
            format: FORMAT,
            detail: "zune-jpeg panicked on this input".to_string(),
        })
    })
}

fn decode_inner(
    bytes: &[u8],
    frame: &Frame,
    out: &mut RgbImage,
    scratch: &mut Vec<u8>,
) -> Result<()> {
    let mut decoder = JpegDecoder::new_with_options(bytes, options());
    decoder.decode_headers().map_err(map_error)?;
    let Some((w, h)) = decoder.dimensions() else {
        return Err(corrupt("zune-jpeg read no dimensions".to_string()));
    };
    if (w, h) != (frame.width as usize, frame.height as usize) {
        return Err(corrupt(format!(
            "zune-jpeg reads {w}x{h}, the frame header says {}x{}",
            frame.width, frame.height
        )));
    }
    let input = decoder
        .get_input_colorspace()
        .unwrap_or(ColorSpace::Unknown);
    // Ask for the components undecoded where Pillow's conversion differs from zune's (gray is
    // replicated, CMYK/YCCK converted the Pillow way); YCbCr and RGB come out as RGB. The
    // component count decides first: zune reports an Adobe transform-0 file as CMYK even with
    // three components (it switches to RGB only while decoding).
    let (output, channels) = match (frame.components, input) {
        (1, _) => (ColorSpace::Luma, 1),
        (3, _) => (ColorSpace::RGB, 3),
        (4, ColorSpace::YCCK) => (ColorSpace::YCCK, 4),
        (4, _) => (ColorSpace::CMYK, 4),
        (n, other) => {
            return Err(Error::Unsupported {
                format: FORMAT,
                detail: format!("zune-jpeg: {n} components in {other:?}"),
            })
        }
    };
    decoder.set_options(options().jpeg_set_out_colorspace(output));
    let (w32, h32) = (frame.width, frame.height);
    let len = channels * w * h;
    if channels == 3 {
        decoder
            .decode_into(out.try_reset(w32, h32)?)
            .map_err(map_error)?;
        return Ok(());
    }
    grow_zeroed(scratch, len)?;
    let raw = &mut scratch[..len];
    decoder.decode_into(raw).map_err(map_error)?;
    let dst = out.try_reset(w32, h32)?;
    match output {
        ColorSpace::Luma => convert::gray_to_rgb(raw, dst),
        ColorSpace::CMYK => convert::adobe_cmyk_to_rgb(raw, dst),
        _ => convert::ycck_to_rgb(raw, dst),
    }
    Ok(())
}

fn corrupt(detail: String) -> Error {
    Error::Corrupt {
        format: FORMAT,
        detail,
    }
}

/// zune's errors to ours. Truncation is normally caught before zune runs; `ExhaustedData` is
/// zune saying the same thing.
fn map_error(e: DecodeErrors) -> Error {
    match e {
        DecodeErrors::ExhaustedData => Error::Truncated {
            format: FORMAT,
            detail: e.to_string(),
        },
        DecodeErrors::Unsupported(_) | DecodeErrors::LargeDimensions(_) => Error::Unsupported {
            format: FORMAT,
            detail: e.to_string(),
        },
        _ => corrupt(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zune_jpeg::errors::UnsupportedSchemes;

    #[test]
    fn error_kinds() {
        assert!(matches!(
            map_error(DecodeErrors::ExhaustedData),
            Error::Truncated { .. }
        ));
        assert!(matches!(
            map_error(DecodeErrors::Unsupported(
                UnsupportedSchemes::LosslessHuffman
            )),
            Error::Unsupported { .. }
        ));
        assert!(matches!(
            map_error(DecodeErrors::HuffmanDecode("bad".into())),
            Error::Corrupt { .. }
        ));
    }
}
