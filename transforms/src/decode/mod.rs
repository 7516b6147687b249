//! Bytes in, packed 8-bit RGB out, with the pixels Pillow's `Image.open(f).convert("RGB")` gives.
//!
//! What it is for: the first op of every sample. JPEG goes through libjpeg-turbo (the default,
//! bit-exact with Pillow, which uses the same library with the same settings) or zune-jpeg (pure
//! Rust, close but not exact); PNG, BMP, GIF (first frame), WebP, TIFF and PNM (PBM, PGM, PPM;
//! binary or plain) go through the `image` crate and are converted to RGB with Pillow's rules.
//! A JPEG can also be decoded only around a crop rectangle (exact), or DCT-scaled around it
//! (fast, not exact).
//!
//! What it must not do: read files, spawn threads, panic on any input, or allocate pixel memory for
//! an image before its header has been checked against [`DecodeOptions::max_pixels`]. The loader
//! keeps one [`DecodeContext`] per worker thread and reuses it and the output [`RgbImage`], so
//! once warm a decode allocates no pixel buffers (the C library's small work areas aside).
//!
//! A TIFF comes out transposed per its orientation tag, as Pillow loads it. With
//! [`DecodeOptions::exif_transpose`] every image comes out transposed per its EXIF
//! Orientation (exif.rs finds it where Pillow's `getexif()` does) exactly as
//! `PIL.ImageOps.exif_transpose` transposes it: sizes, region rectangles and the decoded pixels
//! are all in the transposed frame; a region decode maps its rectangle back to the stored image,
//! decodes that region and transposes it into the output.
//!
//! Where this differs from Pillow, on purpose or because a backend cannot do better:
//! - Corrupt JPEG data that libjpeg only warns about decodes (to the same pixels as Pillow, which
//!   ignores libjpeg's warnings); a JPEG that ends before its EOI marker is [`Error::Truncated`],
//!   as Pillow's "image file is truncated".
//! - A GIF whose first frame does not cover the logical screen gets black outside the frame
//!   (the `image` crate's choice), where Pillow paints the background/transparent index.
//! - zune-jpeg differs from libjpeg by up to 5 levels inside the image (IDCT and upsampling
//!   rounding) and by more in the last two columns/rows of chroma-subsampled images, where its
//!   upsampler reads MCU padding instead of replicating the edge; `tests/decode_parity.rs`
//!   measures and bounds it.
//! - A PGM or PPM whose maxval is not 255 is [`Error::Unsupported`]: Pillow rescales such samples
//!   (and opens 16-bit gray as mode "I"), which the `image` crate does not do the same way.
//! - PNM headers and plain (ASCII) rasters are parsed by the `image` crate's rules, stricter than
//!   Pillow's in places and looser in others: a `#` comment inside a plain raster or a number
//!   written with a `+` sign (Pillow takes both) is [`Error::Corrupt`] here, while a number
//!   longer than 10 characters (`000000000017`) or garbage after a plain PBM's last pixel, which
//!   Pillow refuses, decodes here. Where both decode a file, the pixels are the same.

mod convert;
pub mod exif;
mod markers;
mod other;
pub(crate) mod turbo;
mod zune;

use crate::error::{Error, Result};
use crate::image::{CropRect, RgbImage};

pub use exif::{transpose, Orientation};

/// Which library decodes JPEG. Other formats always go through the `image` crate.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Decoder {
    /// libjpeg-turbo: bit-exact with Pillow, supports region and DCT-scaled decodes.
    #[default]
    Turbo,
    /// zune-jpeg: pure Rust, a few levels off Pillow, always decodes the whole image.
    Zune,
}

/// An image format, told by magic bytes (never by file extension).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// JPEG (JFIF, Exif, Adobe): `FF D8 FF`.
    Jpeg,
    /// PNG: `89 'PNG' 0D 0A 1A 0A`.
    Png,
    /// Windows bitmap: `'BM'`.
    Bmp,
    /// GIF87a / GIF89a; only the first frame is decoded.
    Gif,
    /// WebP, lossy or lossless: `'RIFF' size 'WEBP'`.
    WebP,
    /// TIFF or BigTIFF, either byte order: `'II' 2A 00`, `'MM' 00 2A` (`2B` for BigTIFF).
    Tiff,
    /// Netpbm: PBM (`P1` plain, `P4` binary), PGM (`P2`, `P5`) and PPM (`P3`, `P6`), the magic
    /// followed by a whitespace byte. PGM and PPM decode only with maxval 255 (see the module
    /// doc); PAM (`P7`) and Pillow's own extensions (`Pf`, `P0CMYK`, `Py..`) are not PNM here.
    Pnm,
}

impl Format {
    /// The format whose signature `bytes` starts with, if any.
    pub fn sniff(bytes: &[u8]) -> Option<Format> {
        if bytes.starts_with(&[0xFF, 0xD8, 0xFF]) {
            Some(Format::Jpeg)
        } else if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
            Some(Format::Png)
        } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
            Some(Format::Gif)
        } else if bytes.len() >= 12 && bytes.starts_with(b"RIFF") && &bytes[8..12] == b"WEBP" {
            Some(Format::WebP)
        } else if [b"II*\0", b"MM\0*", b"II+\0", b"MM\0+"]
            .iter()
            .any(|magic| bytes.starts_with(*magic))
        {
            Some(Format::Tiff)
        } else if is_pnm_magic(bytes) {
            Some(Format::Pnm)
        } else if bytes.starts_with(b"BM") {
            Some(Format::Bmp)
        } else {
            None
        }
    }

    /// Lower-case name, as used in error messages ("jpeg", "png", ...).
    pub fn name(self) -> &'static str {
        match self {
            Format::Jpeg => "jpeg",
            Format::Png => "png",
            Format::Bmp => "bmp",
            Format::Gif => "gif",
            Format::WebP => "webp",
            Format::Tiff => "tiff",
            Format::Pnm => "pnm",
        }
    }
}

/// `P1` to `P6` and a whitespace byte. Pillow reads the magic up to the first whitespace, so
/// `P6` glued to anything else (`P6x`, `P65`) is no PNM to it either; its whitespace set includes
/// vertical tab, which `u8::is_ascii_whitespace` does not.
fn is_pnm_magic(bytes: &[u8]) -> bool {
    matches!(
        bytes,
        [
            b'P',
            b'1'..=b'6',
            b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r',
            ..
        ]
    )
}

/// Pillow's `Image.MAX_IMAGE_PIXELS`: the default decode-bomb limit.
pub const DEFAULT_MAX_PIXELS: u64 = 178_956_970;

/// How a [`DecodeContext`] decodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct DecodeOptions {
    /// JPEG backend. Default: [`Decoder::Turbo`].
    pub decoder: Decoder,
    /// Largest `width * height` decoded; larger images are [`Error::TooLarge`], checked from the
    /// header before any pixel memory is touched. Default: 178_956_970 (Pillow's
    /// `Image.MAX_IMAGE_PIXELS`; Pillow only warns up to twice that, we refuse).
    pub max_pixels: u64,
    /// Transpose each image per its EXIF Orientation as `PIL.ImageOps.exif_transpose` does
    /// (what Hugging Face `datasets` applies on decode). Default: `false`, the pixels as
    /// stored, as torchvision's `ImageFolder` loader gives them.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub exif_transpose: bool,
}

impl Default for DecodeOptions {
    fn default() -> Self {
        DecodeOptions {
            decoder: Decoder::Turbo,
            max_pixels: DEFAULT_MAX_PIXELS,
            exif_transpose: false,
        }
    }
}

impl DecodeOptions {
    /// Sets [`DecodeOptions::decoder`].
    pub fn decoder(mut self, decoder: Decoder) -> Self {
        self.decoder = decoder;
        self
    }

    /// Sets [`DecodeOptions::max_pixels`].
    pub fn max_pixels(mut self, max_pixels: u64) -> Self {
        self.max_pixels = max_pixels;
        self
    }

    /// Sets [`DecodeOptions::exif_transpose`].
    pub fn exif_transpose(mut self, on: bool) -> Self {
        self.exif_transpose = on;
        self
    }
}

/// What a header says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ImageInfo {
    /// Width in pixels (of the full image, whatever part was decoded; after the EXIF
    /// transposition when the context applies it).
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// The format the magic bytes named.
    pub format: Format,
    /// The transposition applied ([`Orientation::Normal`] unless
    /// [`DecodeOptions::exif_transpose`] is set and the image has an orientation of 2..=8).
    pub orientation: Orientation,
}

/// A decoder for one thread: owns the libjpeg-turbo handle and scratch buffers, reused across
/// images. `Send`, not `Sync`: one per worker.
pub struct DecodeContext {
    options: DecodeOptions,
    /// Present when `options.decoder` is [`Decoder::Turbo`].
    turbo: Option<turbo::Turbo>,
    /// Intermediate pixels (CMYK, gray, 16-bit, alpha) before conversion to RGB; only grows.
    scratch: Vec<u8>,
    /// The image (or region) as stored, before its EXIF transposition into the output; only
    /// grows, and stays empty unless an image needs transposing.
    stored: RgbImage,
}

impl std::fmt::Debug for DecodeContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecodeContext")
            .field("options", &self.options)
            .field("scratch_capacity", &self.scratch.capacity())
            .finish_non_exhaustive()
    }
}

impl DecodeContext {
    /// Bytes of its conversion buffer, kept for the largest image so far.
    pub fn retained_bytes(&self) -> usize {
        self.scratch.capacity() + self.stored.retained_bytes()
    }

    /// A context decoding with `options`. Fails if `max_pixels` is 0 or libjpeg-turbo cannot
    /// start.
    pub fn new(options: DecodeOptions) -> Result<Self> {
        if options.max_pixels == 0 {
            return Err(Error::invalid("max_pixels", "must be at least 1"));
        }
        let turbo = match options.decoder {
            Decoder::Turbo => Some(turbo::Turbo::new(options.max_pixels)?),
            Decoder::Zune => None,
        };
        Ok(DecodeContext {
            options,
            turbo,
            scratch: Vec::new(),
            stored: RgbImage::new(),
        })
    }

    /// The options this context was made with.
    pub fn options(&self) -> &DecodeOptions {
        &self.options
    }

    /// The transposition this context applies to `bytes`: [`Orientation::Normal`] unless
    /// [`DecodeOptions::exif_transpose`] is set, or the image is a TIFF: Pillow 13 transposes
    /// a TIFF per its orientation tag when it loads one (`TiffImageFile.load_end`), so
    /// `Image.open(f).convert("RGB")` is transposed already, whatever the option.
    pub fn orientation(&self, bytes: &[u8]) -> Orientation {
        if self.options.exif_transpose || Format::sniff(bytes) == Some(Format::Tiff) {
            exif::orientation(bytes)
        } else {
            Orientation::Normal
        }
    }

    /// Reads only the header: format, size (transposed when the context transposes) and
    /// orientation. Cheap; enforces no limit and does not check that the rest of the data is
    /// decodable.
    pub fn info(&mut self, bytes: &[u8]) -> Result<ImageInfo> {
        let info = self.stored_info(bytes)?;
        Ok(oriented(info, self.orientation(bytes)))
    }

    /// [`DecodeContext::info`] of the image as stored.
    fn stored_info(&mut self, bytes: &[u8]) -> Result<ImageInfo> {
        let format = sniff(bytes)?;
        let (width, height) = match format {
            Format::Jpeg => {
                let frame = markers::read_frame(bytes)?;
                (frame.width, frame.height)
            }
            _ => other::dimensions(format, bytes, self.options.max_pixels)?,
        };
        Ok(ImageInfo {
            width,
            height,
            format,
            orientation: Orientation::Normal,
        })
    }

    /// Decodes the whole image into `out` (resized to the image; its allocation is reused),
    /// transposed per its EXIF orientation when the context transposes.
    /// On error `out` is untouched when a header check refused the data (unknown format, pixel
    /// limit, JPEG truncation) and unspecified otherwise.
    pub fn decode(&mut self, bytes: &[u8], out: &mut RgbImage) -> Result<ImageInfo> {
        let orientation = self.orientation(bytes);
        if orientation == Orientation::Normal {
            return self.decode_stored(bytes, out);
        }
        let mut stored = std::mem::take(&mut self.stored);
        let decoded = self.decode_stored(bytes, &mut stored).and_then(|info| {
            transpose(stored.view(), orientation, out)?;
            Ok(oriented(info, orientation))
        });
        self.stored = stored;
        decoded
    }

    /// [`DecodeContext::decode`] without the transposition.
    fn decode_stored(&mut self, bytes: &[u8], out: &mut RgbImage) -> Result<ImageInfo> {
        let format = sniff(bytes)?;
        if format != Format::Jpeg {
            let (width, height) = other::decode(
                format,
                bytes,
                self.options.max_pixels,
                out,
                &mut self.scratch,
            )?;
            return Ok(ImageInfo {
                width,
                height,
                format,
                orientation: Orientation::Normal,
            });
        }
        let frame = checked_jpeg(bytes, self.options.max_pixels)?;
        match self.turbo.as_mut() {
            Some(turbo) => {
                let decoded = turbo.read_header(bytes, &frame).and_then(|header| {
                    turbo.decode(bytes, &header, turbo::Plan::full(), out, &mut self.scratch)
                });
                self.renew_turbo_after(decoded)?;
            }
            None => zune::decode(bytes, &frame, out, &mut self.scratch)?,
        }
        Ok(ImageInfo {
            width: frame.width,
            height: frame.height,
            format,
            orientation: Orientation::Normal,
        })
    }

    /// Decodes at least `rect` (plus a margin, aligned as libjpeg-turbo requires) into `out` and
    /// returns where `rect` lies inside `out`.
    ///
    /// Guarantee: `out.crop_view(returned)` equals the full decode cropped to `rect`, bit for bit.
    /// A file the full decode rejects is rejected here too when the damage lies in the headers,
    /// in the rows down to `rect`'s last (libjpeg-turbo entropy-decodes the rows above and beside
    /// a region), or anywhere in a progressive JPEG; damage in the entropy-coded data below
    /// `rect` of a sequential JPEG goes unseen, because libjpeg-turbo stops reading there (seeing
    /// it would cost the decode the region saves). Non-JPEG images and [`Decoder::Zune`] decode
    /// the whole image and return `rect`. `rect` must fit in the image
    /// ([`Error::InvalidArgument`] otherwise).
    pub fn decode_region(
        &mut self,
        bytes: &[u8],
        rect: CropRect,
        out: &mut RgbImage,
    ) -> Result<CropRect> {
        self.region(bytes, rect, None, out).map(|(inner, _)| inner)
    }

    /// Opt-in fast mode, NOT pixel exact: a DCT-scaled decode (1/2, 1/4 or 1/8) of the region
    /// around `rect`, at the smallest scale where the scaled `rect` is still at least
    /// `min_height` x `min_width` (so what follows is still a downscale). Returns where the
    /// scaled `rect` lies inside `out` and the scale denominator used (1, 2, 4 or 8).
    ///
    /// The scaled rect's edges are `rect`'s divided by the denominator and rounded to the nearest
    /// pixel, so it is off by at most half a scaled pixel on each side. With denominator 1 this
    /// is exactly [`DecodeContext::decode_region`]. Non-JPEG images and [`Decoder::Zune`]
    /// decode the whole image and return `(rect, 1)`.
    pub fn decode_region_scaled(
        &mut self,
        bytes: &[u8],
        rect: CropRect,
        min_height: u32,
        min_width: u32,
        out: &mut RgbImage,
    ) -> Result<(CropRect, u8)> {
        self.region(bytes, rect, Some((min_height, min_width)), out)
    }

    /// Both region paths: libjpeg-turbo crops (and, given a minimum size, DCT-scales) a JPEG;
    /// anything else is decoded whole and `rect` returned as it is. `rect` is in the
    /// transposed image's frame: for an orientation other than 1 it is mapped back to the
    /// stored image, that region decoded and transposed into `out`, which then holds exactly
    /// the (scaled) rect.
    fn region(
        &mut self,
        bytes: &[u8],
        rect: CropRect,
        min_size: Option<(u32, u32)>,
        out: &mut RgbImage,
    ) -> Result<(CropRect, u8)> {
        let orientation = self.orientation(bytes);
        let is_turbo_jpeg = Format::sniff(bytes) == Some(Format::Jpeg) && self.turbo.is_some();
        if orientation == Orientation::Normal || !is_turbo_jpeg {
            return self.stored_region(bytes, rect, min_size, out);
        }
        let frame = checked_jpeg(bytes, self.options.max_pixels)?;
        let (width, height) = orientation.oriented_size(frame.width, frame.height);
        check_rect(rect, width, height)?;
        let stored_rect = stored_rect(rect, orientation, frame.width, frame.height);
        let mut stored = std::mem::take(&mut self.stored);
        let decoded = self
            .stored_region(bytes, stored_rect, min_size, &mut stored)
            .and_then(|(inner, denom)| {
                transpose(stored.crop_view(inner)?, orientation, out)?;
                Ok((CropRect::full(out.width(), out.height()), denom))
            });
        self.stored = stored;
        decoded
    }

    /// [`DecodeContext::region`] of the image as stored (`rect` in its frame), but for a
    /// non-JPEG image, decoded whole and transposed.
    fn stored_region(
        &mut self,
        bytes: &[u8],
        rect: CropRect,
        min_size: Option<(u32, u32)>,
        out: &mut RgbImage,
    ) -> Result<(CropRect, u8)> {
        let turbo = match (Format::sniff(bytes), self.turbo.as_mut()) {
            (Some(Format::Jpeg), Some(turbo)) => turbo,
            _ => {
                let info = self.decode(bytes, out)?;
                check_rect(rect, info.width, info.height)?;
                return Ok((rect, 1));
            }
        };
        let frame = checked_jpeg(bytes, self.options.max_pixels)?;
        check_rect(rect, frame.width, frame.height)?;
        let decoded = turbo.read_header(bytes, &frame).and_then(|header| {
            let denom = match min_size {
                Some((min_height, min_width)) if header.scalable() => {
                    choose_scale(rect, min_height, min_width)
                }
                _ => 1,
            };
            let plan = turbo::Plan::region(&header, rect, denom);
            turbo
                .decode(bytes, &header, plan, out, &mut self.scratch)
                .map(|()| (plan.inner, denom))
        });
        self.renew_turbo_after(decoded)
    }

    /// After a failed libjpeg-turbo call the instance can keep state of the bad image (a corrupt
    /// Huffman table made every later image fail with "Bogus Huffman table definition"), so a
    /// failure replaces it with a fresh one; errors are rare, so this costs nothing per image.
    fn renew_turbo_after<T>(&mut self, result: Result<T>) -> Result<T> {
        if result.is_err() && self.turbo.is_some() {
            self.turbo = Some(turbo::Turbo::new(self.options.max_pixels)?);
        }
        result
    }
}

/// `info` with the size after `orientation`'s transposition.
fn oriented(info: ImageInfo, orientation: Orientation) -> ImageInfo {
    let (width, height) = orientation.oriented_size(info.width, info.height);
    ImageInfo {
        width,
        height,
        orientation,
        ..info
    }
}

/// The rectangle of a `width` x `height` stored image that `orientation`'s transposition moves
/// onto `rect` (in the transposed frame, inside it).
fn stored_rect(rect: CropRect, orientation: Orientation, width: u32, height: u32) -> CropRect {
    let (swap, mirror_x, mirror_y) = orientation.mapping();
    // Output x runs over the stored axis `a`, output y over `b` (swapped for 5..=8).
    let (a_start, a_len, b_start, b_len) = if swap {
        (rect.top, rect.height, rect.left, rect.width)
    } else {
        (rect.left, rect.width, rect.top, rect.height)
    };
    let left = if mirror_x {
        width - a_start - a_len
    } else {
        a_start
    };
    let top = if mirror_y {
        height - b_start - b_len
    } else {
        b_start
    };
    CropRect {
        top,
        left,
        height: b_len,
        width: a_len,
    }
}

/// Parses the JPEG frame header and applies the checks every JPEG path shares, before any decoder
/// touches the data: supported layout, the pixel limit, and Pillow's truncation rule.
fn checked_jpeg(bytes: &[u8], max_pixels: u64) -> Result<markers::Frame> {
    let frame = markers::read_frame(bytes)?;
    frame.check_supported()?;
    check_limit(frame.width, frame.height, max_pixels)?;
    markers::check_complete(bytes, frame.scan_start)?;
    Ok(frame)
}

/// The format of `bytes`, or [`Error::UnknownFormat`] with the first bytes for the message.
fn sniff(bytes: &[u8]) -> Result<Format> {
    Format::sniff(bytes).ok_or_else(|| Error::UnknownFormat {
        magic: bytes[..bytes.len().min(8)].to_vec(),
    })
}

/// [`Error::TooLarge`] when `width * height` exceeds `limit`.
fn check_limit(width: u32, height: u32, limit: u64) -> Result<()> {
    let pixels = u64::from(width) * u64::from(height);
    if pixels > limit {
        return Err(Error::TooLarge {
            width,
            height,
            pixels,
            limit,
        });
    }
    Ok(())
}

fn check_rect(rect: CropRect, width: u32, height: u32) -> Result<()> {
    if rect.fits_in(width, height) {
        Ok(())
    } else {
        Err(Error::invalid(
            "rect",
            format!("{rect:?} does not fit in a {width}x{height} image"),
        ))
    }
}

/// The largest DCT scaling denominator (8, 4, 2, else 1) at which `rect` divided by it is still
/// at least `min_height` x `min_width`.
fn choose_scale(rect: CropRect, min_height: u32, min_width: u32) -> u8 {
    for denom in [8u8, 4, 2] {
        let d = u64::from(denom);
        if u64::from(rect.height) >= u64::from(min_height) * d
            && u64::from(rect.width) >= u64::from(min_width) * d
        {
            return denom;
        }
    }
    1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sniffs_by_magic_not_name() {
        assert_eq!(Format::sniff(&[0xFF, 0xD8, 0xFF, 0xE0]), Some(Format::Jpeg));
        assert_eq!(Format::sniff(&[0xFF, 0xD8]), None);
        assert_eq!(Format::sniff(b"\x89PNG\r\n\x1a\n...."), Some(Format::Png));
        assert_eq!(Format::sniff(b"GIF89a.."), Some(Format::Gif));
        assert_eq!(Format::sniff(b"GIF87a.."), Some(Format::Gif));
        assert_eq!(Format::sniff(b"RIFF\0\0\0\0WEBPVP8 "), Some(Format::WebP));
        assert_eq!(Format::sniff(b"RIFF\0\0\0\0WAVEfmt "), None);
        assert_eq!(Format::sniff(b"II*\0...."), Some(Format::Tiff));
        assert_eq!(Format::sniff(b"MM\0*...."), Some(Format::Tiff));
        assert_eq!(Format::sniff(b"II+\0...."), Some(Format::Tiff));
        assert_eq!(Format::sniff(b"II\0*...."), None);
        assert_eq!(Format::sniff(b"BM......"), Some(Format::Bmp));
        assert_eq!(Format::sniff(b"<html>"), None);
        assert_eq!(Format::sniff(b""), None);
    }

    #[test]
    fn sniffs_pnm_magic_followed_by_whitespace() {
        for magic in [&b"P1"[..], b"P2", b"P3", b"P4", b"P5", b"P6"] {
            for space in [b' ', b'\t', b'\n', b'\x0b', b'\x0c', b'\r'] {
                let mut header = magic.to_vec();
                header.push(space);
                assert_eq!(Format::sniff(&header), Some(Format::Pnm), "{header:?}");
            }
        }
        assert_eq!(Format::sniff(b"P6\n3 2\n255\n"), Some(Format::Pnm));
        assert_eq!(Format::Pnm.name(), "pnm");
        for not_pnm in [
            &b"P7\nWIDTH 1\n"[..],
            b"P9\n",
            b"Px\n",
            b"P0\n",
            b"Pf\n",
            b"PK\x03\x04",
            b"P6",
            b"P6x",
            b"P65 ",
            b"P6#c\n",
            b"p6\n",
            b" P6\n",
        ] {
            assert_eq!(Format::sniff(not_pnm), None, "{not_pnm:?}");
        }
    }

    #[test]
    fn unknown_format_keeps_the_first_bytes() {
        let mut ctx = DecodeContext::new(DecodeOptions::default()).expect("context");
        let mut out = RgbImage::new();
        match ctx.decode(b"<!DOCTYPE html><html>", &mut out) {
            Err(Error::UnknownFormat { magic }) => assert_eq!(magic, b"<!DOCTYP"),
            other => panic!("expected UnknownFormat, got {other:?}"),
        }
        match ctx.info(b"") {
            Err(Error::UnknownFormat { magic }) => assert!(magic.is_empty()),
            other => panic!("expected UnknownFormat, got {other:?}"),
        }
    }

    #[test]
    fn options_default_and_setters() {
        let o = DecodeOptions::default();
        assert_eq!(o.decoder, Decoder::Turbo);
        assert_eq!(o.max_pixels, 178_956_970);
        let o = o.decoder(Decoder::Zune).max_pixels(10);
        assert_eq!((o.decoder, o.max_pixels), (Decoder::Zune, 10));
        assert!(DecodeContext::new(o.max_pixels(0)).is_err());
        let json = serde_json::to_string(&o).expect("serialize");
        assert_eq!(json, r#"{"decoder":"zune","max_pixels":10}"#);
        let back: DecodeOptions = serde_json::from_str(r#"{"decoder":"turbo"}"#).expect("parse");
        assert_eq!(back, DecodeOptions::default());
    }

    #[test]
    fn scale_choice_keeps_a_downscale() {
        let rect = CropRect {
            top: 0,
            left: 0,
            height: 400,
            width: 300,
        };
        assert_eq!(choose_scale(rect, 224, 224), 1);
        assert_eq!(choose_scale(rect, 150, 150), 2);
        assert_eq!(choose_scale(rect, 100, 75), 4);
        assert_eq!(choose_scale(rect, 50, 37), 8);
        assert_eq!(choose_scale(rect, 0, 0), 8);
        assert_eq!(choose_scale(rect, u32::MAX, 1), 1);
    }
}
