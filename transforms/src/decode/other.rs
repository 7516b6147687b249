//! PNG, BMP, GIF (first frame), WebP, TIFF and PNM through the `image` crate, converted to RGB
//! with Pillow's rules (convert.rs).
//!
//! The size is read from the header and checked against the pixel limit before `read_image`
//! allocates or decodes anything; the `image` crate's own allocation limit is a second guard.
//! Must not be used for JPEG (turbo.rs / zune.rs do that), nor decode a PNM whose samples Pillow
//! would rescale (see [`check_pnm_kind`]).

use std::io::Cursor;
use std::panic::{catch_unwind, AssertUnwindSafe};

use image::codecs::bmp::BmpDecoder;
use image::codecs::gif::GifDecoder;
use image::codecs::png::PngDecoder;
use image::codecs::pnm::{PnmDecoder, PnmHeader, PnmSubtype, SampleEncoding};
use image::codecs::tiff::TiffDecoder;
use image::codecs::webp::WebPDecoder;
use image::error::ImageError;
use image::{ColorType, ImageDecoder, Limits};

use super::{check_limit, convert, Format};
use crate::error::{Error, Result};
use crate::image::{grow_zeroed, RgbImage};

/// The `image` crate's default allocation cap (512 MiB), raised so a 16-bit RGBA image right at
/// the pixel limit still fits: 8 bytes a pixel, twice for the decoder's working buffers.
fn limits(max_pixels: u64) -> Limits {
    let mut limits = Limits::default();
    limits.max_alloc = Some(max_pixels.saturating_mul(16).max(512 << 20));
    limits
}

/// Width and height from the header only.
pub(crate) fn dimensions(format: Format, bytes: &[u8], max_pixels: u64) -> Result<(u32, u32)> {
    guarded(format, || {
        with_decoder(
            format,
            bytes,
            max_pixels,
            |decoder| Ok(decoder.dimensions()),
        )
    })
}

/// Decodes `bytes` into `out` as RGB and returns the size.
pub(crate) fn decode(
    format: Format,
    bytes: &[u8],
    max_pixels: u64,
    out: &mut RgbImage,
    scratch: &mut Vec<u8>,
) -> Result<(u32, u32)> {
    match format {
        Format::WebP => check_webp_frames(bytes, max_pixels)?,
        Format::Gif => check_gif_frame(bytes, max_pixels)?,
        Format::Pnm => guarded(format, || check_pnm_raster(bytes, max_pixels))?,
        _ => {}
    }
    guarded(format, || {
        with_decoder(format, bytes, max_pixels, |decoder| {
            read_rgb(format, decoder, max_pixels, out, scratch)
        })
    })
}

/// Holds every VP8 / VP8L frame of a WebP (top level, or inside an ANMF animation frame) to the
/// pixel limit. The canvas size (what `dimensions` reports and `read_rgb` checks) says nothing
/// about them, and image-webp allocates a frame's planes from its own header: a 177x119 canvas
/// over a VP8 frame claiming 5809x16258 made it allocate 95 MB before failing.
fn check_webp_frames(bytes: &[u8], max_pixels: u64) -> Result<()> {
    // RIFF header (12 bytes), then chunks: fourcc, little-endian size, payload padded to even.
    check_webp_chunks(bytes.get(12..).unwrap_or_default(), max_pixels, true)
}

fn check_webp_chunks(mut chunks: &[u8], max_pixels: u64, top: bool) -> Result<()> {
    while chunks.len() >= 8 {
        let size = u32::from_le_bytes([chunks[4], chunks[5], chunks[6], chunks[7]]) as usize;
        let payload = &chunks[8..8 + size.min(chunks.len() - 8)];
        let dims = match &chunks[..4] {
            // Frame tag (3 bytes), start code 9D 01 2A, then 14-bit width and height.
            b"VP8 " if payload.len() >= 10 && payload[3..6] == [0x9D, 0x01, 0x2A] => Some((
                u32::from(u16::from_le_bytes([payload[6], payload[7]]) & 0x3FFF),
                u32::from(u16::from_le_bytes([payload[8], payload[9]]) & 0x3FFF),
            )),
            // Signature 2F, then 14-bit width - 1 and height - 1.
            b"VP8L" if payload.len() >= 5 && payload[0] == 0x2F => {
                let bits = u32::from_le_bytes([payload[1], payload[2], payload[3], payload[4]]);
                Some(((bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1))
            }
            // An animation frame: 16 bytes of placement, then its own chunks.
            b"ANMF" if top => {
                check_webp_chunks(payload.get(16..).unwrap_or_default(), max_pixels, false)?;
                None
            }
            _ => None,
        };
        if let Some((width, height)) = dims {
            check_limit(width, height, max_pixels)?;
        }
        let next = 8usize.saturating_add(size).saturating_add(size & 1);
        chunks = chunks.get(next..).unwrap_or_default();
    }
    Ok(())
}

/// Holds the first GIF frame (the one decoded) to the pixel limit. Like a WebP frame, it may be
/// larger than the logical screen that `dimensions` reports and `read_rgb` checks, and `image`
/// allocates a buffer of the frame's own size: a 163x109 screen over a frame descriptor claiming
/// 1793x61443 made it allocate 440 MB. A stream the `gif` reader cannot get a frame header from
/// passes here; the decode proper reports what is wrong with it.
fn check_gif_frame(bytes: &[u8], max_pixels: u64) -> Result<()> {
    let mut options = gif::DecodeOptions::new();
    // Reading the header does not decode pixels; the frame's pixels are never read here.
    options.skip_frame_decoding(true);
    let Ok(mut reader) = options.read_info(bytes) else {
        return Ok(());
    };
    match reader.next_frame_info() {
        Ok(Some(frame)) => check_limit(u32::from(frame.width), u32::from(frame.height), max_pixels),
        _ => Ok(()),
    }
}

/// A PNM's header, and the bytes after it: the raster. A pixmap header whose image would take
/// more than 2^64 bytes is refused by the `image` crate here, as unsupported, not by our limit.
fn pnm_header(bytes: &[u8]) -> Result<(PnmHeader, &[u8])> {
    let decoder = PnmDecoder::new(bytes).map_err(|e| map_error(Format::Pnm, e))?;
    let (raster, header) = decoder.into_inner();
    Ok((header, raster))
}

/// Holds a PNM to what the `image` crate decodes to Pillow's pixels: bitmaps, and graymaps and
/// pixmaps with maxval 255. Pillow rescales any other maxval (`round(v / maxval * 255)` in
/// double precision, half to even; 16-bit gray becomes mode "I", clipped by `convert("RGB")`),
/// which the `image` crate does its own way, so those are refused rather than decoded close.
/// PAM (P7) is refused too: Pillow does not open it.
fn check_pnm_kind(header: &PnmHeader) -> Result<()> {
    let maxval = header.maximal_sample();
    let kind = match header.subtype() {
        PnmSubtype::Bitmap(_) => return Ok(()),
        PnmSubtype::Graymap(_) | PnmSubtype::Pixmap(_) if maxval == 255 => return Ok(()),
        PnmSubtype::Graymap(SampleEncoding::Ascii) => "PGM (P2)",
        PnmSubtype::Graymap(SampleEncoding::Binary) => "PGM (P5)",
        PnmSubtype::Pixmap(SampleEncoding::Ascii) => "PPM (P3)",
        PnmSubtype::Pixmap(SampleEncoding::Binary) => "PPM (P6)",
        PnmSubtype::ArbitraryMap => {
            return Err(Error::Unsupported {
                format: Format::Pnm.name(),
                detail: "PAM (P7): Pillow does not open it; not decoded natively".to_string(),
            })
        }
    };
    Err(Error::Unsupported {
        format: Format::Pnm.name(),
        detail: format!(
            "{kind} with maxval {maxval}: Pillow rescales its samples; not decoded natively"
        ),
    })
}

/// Refuses a binary PNM whose raster is shorter than its header says before anything is
/// allocated for it: the decode would fail the same way (Pillow's "image file is truncated"),
/// but only after allocating the whole image, which a few bytes claiming a megapixel must not
/// cost. A plain raster's length says nothing about its pixel count; the decode judges those.
fn check_pnm_raster(bytes: &[u8], max_pixels: u64) -> Result<()> {
    let (header, raster) = pnm_header(bytes)?;
    check_pnm_kind(&header)?;
    let (width, height) = (header.width(), header.height());
    check_limit(width, height, max_pixels)?;
    let row = match header.subtype() {
        // Rows of a bitmap are padded to whole bytes.
        PnmSubtype::Bitmap(SampleEncoding::Binary) => u64::from(width).div_ceil(8),
        PnmSubtype::Graymap(SampleEncoding::Binary) => u64::from(width),
        PnmSubtype::Pixmap(SampleEncoding::Binary) => 3 * u64::from(width),
        _ => return Ok(()),
    };
    let needed = row.saturating_mul(u64::from(height));
    let have = raster.len() as u64;
    if have < needed {
        return Err(Error::Truncated {
            format: Format::Pnm.name(),
            detail: format!("{width}x{height} image: the raster holds {have} of {needed} bytes"),
        });
    }
    Ok(())
}

/// Runs `f`, turning a panic inside the `image` crate into [`Error::Corrupt`]: one bad file must
/// not take a training run down.
fn guarded<T>(format: Format, f: impl FnOnce() -> Result<T>) -> Result<T> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
        Err(Error::Corrupt {
            format: format.name(),
            detail: "the image decoder panicked on this input".to_string(),
        })
    })
}

/// Builds the decoder for `format` (which reads the header) and hands it to `f`.
fn with_decoder<T>(
    format: Format,
    bytes: &[u8],
    max_pixels: u64,
    f: impl FnOnce(Box<dyn ImageDecoder + '_>) -> Result<T>,
) -> Result<T> {
    let cursor = Cursor::new(bytes);
    let err = |e| map_error(format, e);
    let mut decoder: Box<dyn ImageDecoder> = match format {
        Format::Png => Box::new(PngDecoder::with_limits(cursor, limits(max_pixels)).map_err(err)?),
        Format::Bmp => Box::new(BmpDecoder::new(cursor).map_err(err)?),
        Format::Gif => Box::new(GifDecoder::new(cursor).map_err(err)?),
        Format::WebP => Box::new(WebPDecoder::new(cursor).map_err(err)?),
        Format::Tiff => Box::new(TiffDecoder::new(cursor).map_err(err)?),
        Format::Pnm => {
            let decoder = PnmDecoder::new(cursor).map_err(err)?;
            check_pnm_kind(decoder.header())?;
            Box::new(decoder)
        }
        Format::Jpeg => {
            return Err(Error::invalid(
                "format",
                "JPEG is decoded by turbo.rs or zune.rs",
            ))
        }
    };
    decoder.set_limits(limits(max_pixels)).map_err(err)?;
    f(decoder)
}

fn read_rgb(
    format: Format,
    decoder: Box<dyn ImageDecoder + '_>,
    max_pixels: u64,
    out: &mut RgbImage,
    scratch: &mut Vec<u8>,
) -> Result<(u32, u32)> {
    let (w, h) = decoder.dimensions();
    check_limit(w, h, max_pixels)?;
    if w == 0 || h == 0 {
        return Err(Error::Corrupt {
            format: format.name(),
            detail: format!("header claims {w}x{h}"),
        });
    }
    let color = decoder.color_type();
    let err = |e| map_error(format, e);
    if color == ColorType::Rgb8 {
        decoder.read_image(out.try_reset(w, h)?).map_err(err)?;
        return Ok((w, h));
    }
    let convert: fn(&[u8], &mut [u8]) = match color {
        ColorType::L8 => convert::gray_to_rgb,
        ColorType::La8 => convert::gray_alpha_to_rgb,
        ColorType::Rgba8 => convert::rgba_to_rgb,
        ColorType::L16 => convert::gray16_to_rgb,
        ColorType::La16 => |s, d| convert::high_bytes_to_rgb(s, 2, d),
        ColorType::Rgb16 => |s, d| convert::high_bytes_to_rgb(s, 3, d),
        ColorType::Rgba16 => |s, d| convert::high_bytes_to_rgb(s, 4, d),
        other => {
            return Err(Error::Unsupported {
                format: format.name(),
                detail: format!("{other:?} pixels"),
            })
        }
    };
    let len = usize::try_from(decoder.total_bytes()).map_err(|_| Error::TooLarge {
        width: w,
        height: h,
        pixels: u64::from(w) * u64::from(h),
        limit: max_pixels,
    })?;
    grow_zeroed(scratch, len)?;
    let raw = &mut scratch[..len];
    decoder.read_image(raw).map_err(err)?;
    convert(raw, out.try_reset(w, h)?);
    Ok((w, h))
}

/// Whether an error in the chain says the data ended early.
fn is_eof(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::UnexpectedEof {
                return true;
            }
        }
        let text = err.to_string().to_ascii_lowercase();
        // "not enough data": the PNM reader's words for a plain raster that ends early.
        if text.contains("unexpected end")
            || text.contains("unexpected eof")
            || text.contains("not enough data")
        {
            return true;
        }
        cur = err.source();
    }
    false
}

fn map_error(format: Format, e: ImageError) -> Error {
    let name = format.name();
    let detail = e.to_string();
    match &e {
        ImageError::Unsupported(_) => Error::Unsupported {
            format: name,
            detail,
        },
        ImageError::Limits(_) => Error::Unsupported {
            format: name,
            detail: format!("decoder memory limit: {detail}"),
        },
        _ if is_eof(&e) => Error::Truncated {
            format: name,
            detail,
        },
        _ => Error::Corrupt {
            format: name,
            detail,
        },
    }
}
