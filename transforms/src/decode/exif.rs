//! The EXIF Orientation of an encoded image, found where Pillow's `Image.getexif()` finds it,
//! and the transposition `PIL.ImageOps.exif_transpose` applies for it.
//!
//! Where Pillow 13 looks, per format the decoders take:
//! - JPEG: every APP1 segment before the first scan that starts with `Exif\0\0`, the first one
//!   whole and the later ones without their 6-byte header, concatenated (Pillow's
//!   `info["exif"]`); else the last APP1 XMP packet (`http://ns.adobe.com/xap/1.0/\0`).
//! - PNG: the last `eXIf` chunk; else the last uncompressed `iTXt` chunk `XML:com.adobe.xmp`.
//! - WebP (extended, `VP8X`): the first `EXIF` chunk; else the first `XMP ` chunk; each only
//!   where the `VP8X` flags announce it (libwebp's demuxer skips it otherwise).
//! - TIFF: the first IFD itself (tag 274), classic or BigTIFF.
//! - GIF, BMP, PNM: nowhere.
//!
//! An EXIF block is read as Pillow's `Exif.load` reads it: a leading `Exif\0\0` (once or
//! twice) dropped, an 8-byte classic TIFF header (`II*\0`, `MM\0*`, or the byte-swapped magic
//! Pillow also takes), IFD0's entries in order, each kept or skipped by Pillow's rules (an
//! unknown type, a zero count, out-of-line data past the block's length summed over the
//! entries: skipped; out-of-line data that runs past the end, or an entry cut short: the walk
//! stops, keeping what it had). The first kept tag 274 is the Orientation; its first value
//! selects a transposition when it equals 2..=8 (as a Python dict lookup sees it: an integer,
//! a float or a rational of that value), anything else (1, 0, 9, a string, bytes) is present
//! but leaves the image as stored. Only where IFD0 holds no kept tag 274 does Pillow look at
//! XMP: the first `tiff:Orientation="D` or `tiff:Orientation>D` (one ASCII digit D).
//! Pillow never raises for a malformed block here (checked in the tests); neither does this.
//!
//! Not followed, as rare and each costing more than a header scan: more than [`MAX_PARTS`]
//! Exif APP1 segments in one JPEG (the rest are ignored), a PNG's `zTXt`/`tEXt`
//! "Raw profile type exif" (ImageMagick's hex dump) and compressed `iTXt` XMP, a TIFF's XMP
//! tag 700.
//!
//! The scan must not allocate, decode pixels or fail: it runs on every sample. [`transpose`]
//! moves pixels only, into a buffer that is reused.

use super::Format;
use crate::error::Result;
use crate::image::{RgbImage, RgbView};

/// How many Exif APP1 segments of one JPEG are concatenated (Pillow takes them all; real files
/// have one, extended EXIF a few).
pub const MAX_PARTS: usize = 8;

/// An EXIF orientation value, 1..=8, and the transposition `exif_transpose` applies for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Orientation {
    /// 1 (or absent, or any other value): as stored.
    #[default]
    Normal,
    /// 2: `FLIP_LEFT_RIGHT`.
    FlipLeftRight,
    /// 3: `ROTATE_180`.
    Rotate180,
    /// 4: `FLIP_TOP_BOTTOM`.
    FlipTopBottom,
    /// 5: `TRANSPOSE` (mirror across the main diagonal).
    Transpose,
    /// 6: `ROTATE_270` (90 degrees clockwise).
    Rotate270,
    /// 7: `TRANSVERSE` (mirror across the anti-diagonal).
    Transverse,
    /// 8: `ROTATE_90` (90 degrees counter-clockwise).
    Rotate90,
}

impl Orientation {
    /// The orientation an EXIF value names; `None` for values with no transposition (1 too).
    pub fn from_value(value: u64) -> Option<Orientation> {
        Some(match value {
            2 => Orientation::FlipLeftRight,
            3 => Orientation::Rotate180,
            4 => Orientation::FlipTopBottom,
            5 => Orientation::Transpose,
            6 => Orientation::Rotate270,
            7 => Orientation::Transverse,
            8 => Orientation::Rotate90,
            _ => return None,
        })
    }

    /// The EXIF value, 1..=8.
    pub fn value(self) -> u8 {
        match self {
            Orientation::Normal => 1,
            Orientation::FlipLeftRight => 2,
            Orientation::Rotate180 => 3,
            Orientation::FlipTopBottom => 4,
            Orientation::Transpose => 5,
            Orientation::Rotate270 => 6,
            Orientation::Transverse => 7,
            Orientation::Rotate90 => 8,
        }
    }

    /// Whether the transposed image has width and height swapped (5..=8).
    pub fn swaps_axes(self) -> bool {
        matches!(
            self,
            Orientation::Transpose
                | Orientation::Rotate270
                | Orientation::Transverse
                | Orientation::Rotate90
        )
    }

    /// `(swap, mirror_x, mirror_y)`: output pixel `(x, y)` is stored pixel `(sx, sy)` where
    /// `(a, b) = swap ? (y, x) : (x, y)`, `sx = mirror_x ? W - 1 - a : a` and
    /// `sy = mirror_y ? H - 1 - b : b` (`W` x `H`: the stored size).
    pub(crate) fn mapping(self) -> (bool, bool, bool) {
        match self {
            Orientation::Normal => (false, false, false),
            Orientation::FlipLeftRight => (false, true, false),
            Orientation::Rotate180 => (false, true, true),
            Orientation::FlipTopBottom => (false, false, true),
            Orientation::Transpose => (true, false, false),
            Orientation::Rotate270 => (true, false, true),
            Orientation::Transverse => (true, true, true),
            Orientation::Rotate90 => (true, true, false),
        }
    }

    /// The size after the transposition of a `width` x `height` image, `(width, height)`.
    pub fn oriented_size(self, width: u32, height: u32) -> (u32, u32) {
        if self.swaps_axes() {
            (height, width)
        } else {
            (width, height)
        }
    }
}

/// Writes `src` transposed per `orientation` into `out` (resized to the transposed size): the
/// pixel moves of `PIL.Image.transpose`, nothing else. Fails only where `out` cannot grow.
pub fn transpose(src: RgbView<'_>, orientation: Orientation, out: &mut RgbImage) -> Result<()> {
    let (w, h) = (src.width() as usize, src.height() as usize);
    let (swap, mirror_x, mirror_y) = orientation.mapping();
    let (ow, oh) = orientation.oriented_size(src.width(), src.height());
    let dst = out.try_reset(ow, oh)?;
    let out_stride = 3 * ow as usize;
    if !swap {
        for (y, row) in dst.chunks_exact_mut(out_stride).enumerate() {
            let sy = if mirror_y { h - 1 - y } else { y };
            let from = src.row(sy as u32);
            if mirror_x {
                for (d, s) in row.chunks_exact_mut(3).zip(from.chunks_exact(3).rev()) {
                    d.copy_from_slice(s);
                }
            } else {
                row.copy_from_slice(&from[..out_stride]);
            }
        }
        return Ok(());
    }
    // Swapped axes: output (x, y) is stored (sx(y), sy(x)). Tiles keep the stored rows read
    // (a column of each) and the output rows written in cache. A pixel moves as 4 bytes, the
    // fourth overwritten by the next pixel written; the last pixel of an output row (whose
    // fourth byte would be the next row's) and a read past the stored buffer's end move 3.
    const TILE: usize = 32;
    let (ow, oh) = (ow as usize, oh as usize);
    let (bytes, stride) = (src.bytes(), src.stride());
    for ty in (0..oh).step_by(TILE) {
        for tx in (0..ow).step_by(TILE) {
            let x_end = (tx + TILE).min(ow);
            for y in ty..(ty + TILE).min(oh) {
                let sx = if mirror_x { w - 1 - y } else { y };
                let row = &mut dst[y * out_stride..(y + 1) * out_stride];
                for x in tx..x_end {
                    let sy = if mirror_y { h - 1 - x } else { x };
                    let (s, d) = (sy * stride + 3 * sx, 3 * x);
                    match (bytes.get(s..s + 4), row.get_mut(d..d + 4)) {
                        (Some(from), Some(to)) => to.copy_from_slice(from),
                        _ => row[d..d + 3].copy_from_slice(&bytes[s..s + 3]),
                    }
                }
            }
        }
    }
    Ok(())
}

/// The orientation of `bytes` as Pillow's `exif_transpose` would apply it:
/// [`Orientation::Normal`] where there is no EXIF/XMP orientation, where it is 1 or any value
/// other than 2..=8, and where the metadata is malformed. A scan of header bytes only.
pub fn orientation(bytes: &[u8]) -> Orientation {
    let found = match Format::sniff(bytes) {
        Some(Format::Jpeg) => jpeg(bytes),
        Some(Format::Png) => png(bytes),
        Some(Format::WebP) => webp(bytes),
        Some(Format::Tiff) => tiff(bytes),
        _ => None,
    };
    found.and_then(Orientation::from_value).unwrap_or_default()
}

/// What one format's metadata says: `Some(value)` where a tag 274 (or an XMP orientation) was
/// found, the value as a transposition lookup sees it (0 where it matches no 2..=8).
type Found = Option<u64>;

/// Up to [`MAX_PARTS`] byte slices read as one stream (JPEG's concatenated Exif segments).
#[derive(Clone, Copy)]
struct Stream<'a> {
    parts: [&'a [u8]; MAX_PARTS],
    count: usize,
}

impl<'a> Stream<'a> {
    fn one(bytes: &'a [u8]) -> Self {
        let mut parts: [&[u8]; MAX_PARTS] = [&[]; MAX_PARTS];
        parts[0] = bytes;
        Stream { parts, count: 1 }
    }

    fn push(&mut self, part: &'a [u8]) {
        if self.count < MAX_PARTS {
            self.parts[self.count] = part;
            self.count += 1;
        }
    }

    fn len(&self) -> u64 {
        self.parts[..self.count]
            .iter()
            .map(|p| p.len() as u64)
            .sum()
    }

    /// The byte at `at`.
    fn byte(&self, mut at: u64) -> Option<u8> {
        for part in &self.parts[..self.count] {
            let len = part.len() as u64;
            if at < len {
                return part.get(usize::try_from(at).ok()?).copied();
            }
            at -= len;
        }
        None
    }

    /// `N` bytes at `at`, or `None` where the stream ends first.
    fn array<const N: usize>(&self, at: u64) -> Option<[u8; N]> {
        // The common case, in one part: a slice copy.
        if self.count == 1 {
            let start = usize::try_from(at).ok()?;
            let end = start.checked_add(N)?;
            return self.parts[0].get(start..end)?.try_into().ok();
        }
        let mut out = [0u8; N];
        for (i, b) in out.iter_mut().enumerate() {
            *b = self.byte(at.checked_add(i as u64)?)?;
        }
        Some(out)
    }

    /// The stream from `at` on.
    fn skip(self, mut at: u64) -> Self {
        let mut first = 0;
        while first < self.count && at >= self.parts[first].len() as u64 {
            at -= self.parts[first].len() as u64;
            first += 1;
        }
        let mut out = Stream {
            parts: [&[]; MAX_PARTS],
            count: 0,
        };
        for i in first..self.count {
            let part = self.parts[i];
            // `at` is below the first remaining part's length, so it fits in usize.
            let start = if i == first { at as usize } else { 0 };
            out.push(part.get(start..).unwrap_or_default());
        }
        out
    }

    fn starts_with(&self, prefix: &[u8]) -> bool {
        prefix
            .iter()
            .enumerate()
            .all(|(i, &b)| self.byte(i as u64) == Some(b))
    }
}

/// Byte order of a TIFF structure.
#[derive(Clone, Copy)]
struct Endian {
    little: bool,
}

impl Endian {
    fn u16(self, b: [u8; 2]) -> u16 {
        if self.little {
            u16::from_le_bytes(b)
        } else {
            u16::from_be_bytes(b)
        }
    }

    fn u32(self, b: [u8; 4]) -> u32 {
        if self.little {
            u32::from_le_bytes(b)
        } else {
            u32::from_be_bytes(b)
        }
    }

    fn u64(self, b: [u8; 8]) -> u64 {
        if self.little {
            u64::from_le_bytes(b)
        } else {
            u64::from_be_bytes(b)
        }
    }
}

/// An EXIF block (Pillow's `info["exif"]`): `Exif\0\0` dropped once or twice, then a classic
/// TIFF header (Pillow reads 8 bytes and takes BigTIFF's magic, then fails on its 16-byte
/// header: no orientation) and IFD0.
fn exif_block(stream: Stream<'_>) -> Found {
    let mut stream = stream;
    for _ in 0..2 {
        if stream.starts_with(b"Exif\0\0") {
            stream = stream.skip(6);
        }
    }
    let head: [u8; 8] = stream.array(0)?;
    let little = match &head[..4] {
        b"II*\0" | b"II\0*" => true,
        b"MM\0*" | b"MM*\0" => false,
        _ => return None,
    };
    let endian = Endian { little };
    let ifd0 = u64::from(endian.u32([head[4], head[5], head[6], head[7]]));
    walk_ifd(stream, endian, false, ifd0).orientation
}

/// What a walk of one IFD found.
#[derive(Default)]
struct Walk {
    /// The first kept tag 274's value, as [`Found`].
    orientation: Found,
}

/// Tags kept so far in one IFD: Pillow skips a later entry for a tag it kept, before that
/// entry's data counts against the size budget or is read, so the walk must know them. The
/// first [`Seen::INLINE`] in a list; past that, a bitset over all 65536 tags (one 8 KiB
/// allocation, made only for such an IFD: real ones keep a dozen tags before the orientation).
struct Seen {
    inline: [u16; Seen::INLINE],
    len: usize,
    bits: Option<Box<[u64; 1024]>>,
}

impl Seen {
    const INLINE: usize = 32;

    fn new() -> Self {
        Seen {
            inline: [0; Seen::INLINE],
            len: 0,
            bits: None,
        }
    }

    fn contains(&self, tag: u16) -> bool {
        match &self.bits {
            Some(bits) => bits[usize::from(tag / 64)] & (1 << (tag % 64)) != 0,
            None => self.inline[..self.len].contains(&tag),
        }
    }

    fn insert(&mut self, tag: u16) {
        if self.bits.is_none() && self.len < Seen::INLINE {
            self.inline[self.len] = tag;
            self.len += 1;
            return;
        }
        // An IFD with more than 32 kept tags before its orientation: rare enough (and bounded
        // by the file's size) that one 8 KiB allocation for it is no steady-state cost.
        let bits = self.bits.get_or_insert_with(|| {
            let mut bits = Box::new([0u64; 1024]);
            for &t in &self.inline[..self.len] {
                bits[usize::from(t / 64)] |= 1 << (t % 64);
            }
            bits
        });
        bits[usize::from(tag / 64)] |= 1 << (tag % 64);
    }
}

/// Bytes per value of a TIFF field type Pillow reads; `None` for types it skips.
fn unit_size(typ: u16) -> Option<u64> {
    Some(match typ {
        1 | 2 | 6 | 7 => 1,
        3 | 8 => 2,
        4 | 9 | 11 | 13 => 4,
        5 | 10 | 12 | 16 => 8,
        _ => return None,
    })
}

const ORIENTATION: u16 = 274;

/// Walks the IFD at `offset` of `stream` as Pillow's `ImageFileDirectory_v2.load` does, up to
/// the first kept tag 274.
fn walk_ifd(stream: Stream<'_>, endian: Endian, big: bool, offset: u64) -> Walk {
    let mut walk = Walk::default();
    let limit = stream.len();
    let (entry_size, inline) = if big { (20u64, 8u64) } else { (12, 4) };
    let count = if big {
        stream.array::<8>(offset).map(|b| endian.u64(b))
    } else {
        stream.array::<2>(offset).map(|b| u64::from(endian.u16(b)))
    };
    let Some(count) = count else {
        return walk;
    };
    let first = offset + if big { 8 } else { 2 };
    let mut seen = Seen::new();
    let mut total_size: u64 = 0;
    for i in 0..count {
        // An entry cut short ends the walk (Pillow's "Corrupt EXIF data" OSError).
        let Some(at) = i.checked_mul(entry_size).and_then(|o| o.checked_add(first)) else {
            return walk;
        };
        let Some(head) = stream.array::<4>(at) else {
            return walk;
        };
        let tag = endian.u16([head[0], head[1]]);
        let typ = endian.u16([head[2], head[3]]);
        let (value_count, field_at) = if big {
            let Some(c) = stream.array::<8>(at + 4) else {
                return walk;
            };
            (endian.u64(c), at + 12)
        } else {
            let Some(c) = stream.array::<4>(at + 4) else {
                return walk;
            };
            (u64::from(endian.u32(c)), at + 8)
        };
        // The field itself must be there too, for every entry.
        if stream.byte(field_at + inline - 1).is_none() {
            return walk;
        }
        if seen.contains(tag) {
            continue;
        }
        let Some(unit) = unit_size(typ) else {
            continue;
        };
        // Pillow's sizes are unbounded integers: saturate, no real size comes near.
        let size = value_count.saturating_mul(unit);
        let data_at = if size > inline {
            let data_offset = if big {
                stream.array::<8>(field_at).map(|b| endian.u64(b))
            } else {
                stream
                    .array::<4>(field_at)
                    .map(|b| u64::from(endian.u32(b)))
            };
            let Some(data_offset) = data_offset else {
                return walk;
            };
            if data_offset >= 1 << 63 {
                continue;
            }
            total_size = total_size.saturating_add(size);
            if total_size > limit {
                continue;
            }
            // Data that runs past the end: Pillow's "Truncated File Read", which ends the walk.
            match data_offset.checked_add(size) {
                Some(end) if end <= limit => data_offset,
                _ => return walk,
            }
        } else {
            field_at
        };
        if size == 0 {
            continue;
        }
        seen.insert(tag);
        if tag == ORIENTATION {
            walk.orientation = Some(first_value(stream, endian, typ, data_at).unwrap_or(0));
            return walk;
        }
    }
    walk
}

/// The first value of a kept field, as the integer 2..=8 a dict lookup would match it to, or 0
/// (a value that matches none: bytes, a string, NaN, 6.5, 1).
fn first_value(stream: Stream<'_>, endian: Endian, typ: u16, at: u64) -> Option<u64> {
    let integer = |v: i128| u64::try_from(v).ok().filter(|v| (2..=8).contains(v));
    let whole = |v: f64| (v.fract() == 0.0 && (2.0..=8.0).contains(&v)).then_some(v as u64);
    let value = match typ {
        3 => integer(i128::from(endian.u16(stream.array(at)?))),
        8 => integer(i128::from(endian.u16(stream.array(at)?) as i16)),
        4 | 13 => integer(i128::from(endian.u32(stream.array(at)?))),
        9 => integer(i128::from(endian.u32(stream.array(at)?) as i32)),
        16 => integer(i128::from(endian.u64(stream.array(at)?))),
        6 => integer(i128::from(stream.byte(at)? as i8)),
        11 => whole(f64::from(f32::from_bits(endian.u32(stream.array(at)?)))),
        12 => whole(f64::from_bits(endian.u64(stream.array(at)?))),
        5 | 10 => {
            let num = endian.u32(stream.array(at)?);
            let den = endian.u32(stream.array(at + 4)?);
            let (num, den) = if typ == 10 {
                (i128::from(num as i32), i128::from(den as i32))
            } else {
                (i128::from(num), i128::from(den))
            };
            // A zero denominator is NaN to Pillow's IFDRational; else the exact fraction.
            (2..=8).find(|k| den != 0 && num == i128::from(*k) * den)
        }
        // BYTE, ASCII, UNDEFINED: bytes or a string, which no integer key matches.
        _ => None,
    };
    Some(value.unwrap_or(0))
}

/// The first `tiff:Orientation="D` or `tiff:Orientation>D` in an XMP packet: D's value.
fn xmp(packet: &[u8]) -> Found {
    const KEY: &[u8] = b"tiff:Orientation";
    let mut rest = packet;
    while let Some(at) = memchr::memmem::find(rest, KEY) {
        let after = &rest[at + KEY.len()..];
        let digit = match after {
            [b'=', b'"', d, ..] | [b'>', d, ..] => Some(*d),
            _ => None,
        };
        if let Some(d @ b'0'..=b'9') = digit {
            return Some(u64::from(d - b'0'));
        }
        rest = &rest[at + 1..];
    }
    None
}

const XMP_APP1: &[u8] = b"http://ns.adobe.com/xap/1.0/\0";

/// JPEG: the Exif APP1 segments before the first scan, else the last XMP APP1.
fn jpeg(bytes: &[u8]) -> Found {
    let mut exif: Option<Stream<'_>> = None;
    let mut xmp_packet: Option<&[u8]> = None;
    super::markers::for_each_segment(bytes, |marker, body| {
        if marker != 0xE1 {
            return;
        }
        if body.starts_with(b"Exif\0\0") {
            match exif.as_mut() {
                Some(stream) => stream.push(body.get(6..).unwrap_or_default()),
                None => exif = Some(Stream::one(body)),
            }
        } else if let Some(packet) = body.strip_prefix(XMP_APP1) {
            xmp_packet = Some(packet);
        }
    });
    exif.and_then(exif_block)
        .or_else(|| xmp_packet.and_then(xmp))
}

/// PNG: the last `eXIf` chunk (after the image data too: Pillow reads those on `load()`),
/// else the last uncompressed `iTXt` XMP.
fn png(bytes: &[u8]) -> Found {
    let mut exif: Option<&[u8]> = None;
    let mut xmp_packet: Option<&[u8]> = None;
    let mut rest = bytes.get(8..).unwrap_or_default();
    while rest.len() >= 8 {
        let len = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        let kind = &rest[4..8];
        let Some(data) = rest.get(8..).and_then(|r| r.get(..len)) else {
            break;
        };
        match kind {
            b"eXIf" => exif = Some(data),
            b"iTXt" => {
                // keyword\0, compression flag, method, language\0, translated keyword\0, text.
                if let Some(text) = data.strip_prefix(b"XML:com.adobe.xmp\0\0") {
                    let packet = text.get(1..).and_then(skip_nul).and_then(skip_nul);
                    xmp_packet = packet.or(xmp_packet);
                }
            }
            b"IEND" => break,
            _ => {}
        }
        // Length, type, data, CRC.
        rest = rest.get(len.saturating_add(12)..).unwrap_or_default();
    }
    exif.and_then(|data| exif_block(Stream::one(data)))
        .or_else(|| xmp_packet.and_then(xmp))
}

fn skip_nul(bytes: &[u8]) -> Option<&[u8]> {
    let at = bytes.iter().position(|&b| b == 0)?;
    bytes.get(at + 1..)
}

/// WebP: the first `EXIF` chunk, else the first `XMP ` chunk, each only where the extended
/// header (`VP8X`, the first chunk) sets its flag: libwebp's demuxer, which Pillow reads them
/// through, skips them otherwise.
fn webp(bytes: &[u8]) -> Found {
    const XMP_FLAG: u8 = 0x04;
    const EXIF_FLAG: u8 = 0x08;
    let mut exif: Option<&[u8]> = None;
    let mut xmp_packet: Option<&[u8]> = None;
    let mut chunks = bytes.get(12..).unwrap_or_default();
    let flags = match chunks {
        [b'V', b'P', b'8', b'X', _, _, _, _, flags, ..] => *flags,
        _ => return None,
    };
    while chunks.len() >= 8 {
        let size = u32::from_le_bytes([chunks[4], chunks[5], chunks[6], chunks[7]]) as usize;
        let payload = &chunks[8..8 + size.min(chunks.len() - 8)];
        match &chunks[..4] {
            b"EXIF" if exif.is_none() && flags & EXIF_FLAG != 0 => exif = Some(payload),
            b"XMP " if xmp_packet.is_none() && flags & XMP_FLAG != 0 => xmp_packet = Some(payload),
            _ => {}
        }
        let next = 8usize.saturating_add(size).saturating_add(size & 1);
        chunks = chunks.get(next..).unwrap_or_default();
    }
    exif.and_then(|data| exif_block(Stream::one(data)))
        .or_else(|| xmp_packet.and_then(xmp))
}

/// TIFF: tag 274 of the first IFD, read from the file itself.
fn tiff(bytes: &[u8]) -> Found {
    let stream = Stream::one(bytes);
    let little = bytes.starts_with(b"II");
    let endian = Endian { little };
    let big = bytes
        .get(2..4)
        .is_some_and(|m| m == [0x2B, 0] || m == [0, 0x2B]);
    let offset = if big {
        endian.u64(stream.array(8)?)
    } else {
        u64::from(endian.u32(stream.array(4)?))
    };
    walk_ifd(stream, endian, big, offset).orientation
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An Exif block: header, IFD0 at 8 with `entries` (tag, type, count, 4-byte field), then
    /// `tail` (out-of-line data, at offset 8 + 2 + 12 * n + 4).
    fn block(little: bool, entries: &[(u16, u16, u32, [u8; 4])], tail: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        let e = Endian { little };
        let u16b = |x: u16| {
            if e.little {
                x.to_le_bytes()
            } else {
                x.to_be_bytes()
            }
        };
        let u32b = |x: u32| {
            if e.little {
                x.to_le_bytes()
            } else {
                x.to_be_bytes()
            }
        };
        v.extend_from_slice(if little { b"II*\0" } else { b"MM\0*" });
        v.extend_from_slice(&u32b(8));
        v.extend_from_slice(&u16b(entries.len() as u16));
        for &(tag, typ, count, field) in entries {
            v.extend_from_slice(&u16b(tag));
            v.extend_from_slice(&u16b(typ));
            v.extend_from_slice(&u32b(count));
            v.extend_from_slice(&field);
        }
        v.extend_from_slice(&u32b(0));
        v.extend_from_slice(tail);
        v
    }

    fn short(little: bool, value: u16) -> [u8; 4] {
        let b = if little {
            value.to_le_bytes()
        } else {
            value.to_be_bytes()
        };
        [b[0], b[1], 0, 0]
    }

    fn found(block: &[u8]) -> Orientation {
        exif_block(Stream::one(block))
            .and_then(Orientation::from_value)
            .unwrap_or_default()
    }

    #[test]
    fn reads_each_value_in_both_byte_orders() {
        for little in [true, false] {
            for value in 0..=10u16 {
                let b = block(little, &[(274, 3, 1, short(little, value))], &[]);
                let want = Orientation::from_value(u64::from(value)).unwrap_or_default();
                assert_eq!(found(&b), want, "value {value} little {little}");
                let mut prefixed = b"Exif\0\0".to_vec();
                prefixed.extend_from_slice(&b);
                assert_eq!(found(&prefixed), want);
            }
        }
    }

    #[test]
    fn values_as_a_dict_lookup_sees_them() {
        let le = |v: u32| v.to_le_bytes();
        // LONG, SLONG, SSHORT, SBYTE, FLOAT: the integer value matches.
        assert_eq!(
            found(&block(true, &[(274, 4, 1, le(6))], &[])),
            Orientation::Rotate270
        );
        assert_eq!(
            found(&block(true, &[(274, 9, 1, le(8))], &[])),
            Orientation::Rotate90
        );
        assert_eq!(
            found(&block(true, &[(274, 8, 1, le(3))], &[])),
            Orientation::Rotate180
        );
        assert_eq!(
            found(&block(true, &[(274, 6, 1, le(5))], &[])),
            Orientation::Transpose
        );
        let f = 6.0f32.to_bits().to_le_bytes();
        assert_eq!(
            found(&block(true, &[(274, 11, 1, f)], &[])),
            Orientation::Rotate270
        );
        let f = 6.5f32.to_bits().to_le_bytes();
        assert_eq!(
            found(&block(true, &[(274, 11, 1, f)], &[])),
            Orientation::Normal
        );
        // Two SHORTs: the first one (Pillow warns and keeps it).
        assert_eq!(
            found(&block(true, &[(274, 3, 2, [8, 0, 1, 0])], &[])),
            Orientation::Rotate90
        );
        // BYTE, ASCII, UNDEFINED: present, but never a transposition.
        assert_eq!(
            found(&block(true, &[(274, 1, 1, le(6))], &[])),
            Orientation::Normal
        );
        assert_eq!(
            found(&block(true, &[(274, 2, 2, *b"6\0\0\0")], &[])),
            Orientation::Normal
        );
        // RATIONAL 12/2 (out of line, just past the IFD) is 6; x/0 is NaN.
        let rational = |num: u32, den: u32| {
            let mut tail = num.to_le_bytes().to_vec();
            tail.extend_from_slice(&den.to_le_bytes());
            block(true, &[(274, 5, 1, le(26))], &tail)
        };
        assert_eq!(found(&rational(12, 2)), Orientation::Rotate270);
        assert_eq!(found(&rational(13, 2)), Orientation::Normal);
        assert_eq!(found(&rational(6, 0)), Orientation::Normal);
        // An unknown type or a zero count is skipped: a later entry is read.
        let b = block(
            true,
            &[(274, 99, 1, le(6)), (274, 3, 0, le(6)), (274, 3, 1, le(3))],
            &[],
        );
        assert_eq!(found(&b), Orientation::Rotate180);
        // A kept tag shadows a later one of the same number.
        let b = block(true, &[(274, 3, 1, le(1)), (274, 3, 1, le(6))], &[]);
        assert_eq!(found(&b), Orientation::Normal);
    }

    #[test]
    fn hostile_blocks_are_ignored_not_errors() {
        let good = block(true, &[(274, 3, 1, short(true, 6))], &[]);
        // Truncated anywhere before the entry ends: no orientation.
        for cut in 0..good.len() - 4 {
            assert_eq!(found(&good[..cut]), Orientation::Normal, "cut at {cut}");
        }
        // Cut after the entry (the next-IFD pointer missing): the tag was kept.
        assert_eq!(found(&good[..good.len() - 4]), Orientation::Rotate270);
        // Bad magic, BigTIFF in an Exif block, IFD offset past the end or wrapping.
        let mut bad = good.clone();
        bad[0] = b'X';
        assert_eq!(found(&bad), Orientation::Normal);
        let mut big = good.clone();
        big[2] = 0x2B;
        assert_eq!(found(&big), Orientation::Normal);
        let mut far = good.clone();
        far[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(found(&far), Orientation::Normal);
        // An IFD that points at its own header (a loop): read once, nothing found.
        let mut looped = good.clone();
        looped[4..8].copy_from_slice(&0u32.to_le_bytes());
        assert_eq!(found(&looped), Orientation::Normal);
        // Out-of-line data past the end stops the walk; a huge count is skipped.
        let le = |v: u32| v.to_le_bytes();
        let b = block(true, &[(270, 2, 10, le(1000)), (274, 3, 1, le(6))], &[]);
        assert_eq!(found(&b), Orientation::Normal);
        let b = block(true, &[(270, 2, u32::MAX, le(8)), (274, 3, 1, le(6))], &[]);
        assert_eq!(found(&b), Orientation::Rotate270);
        // A huge entry count over a short IFD: the walk ends where the data does.
        let mut many = good.clone();
        many[8..10].copy_from_slice(&u16::MAX.to_le_bytes());
        assert_eq!(found(&many), Orientation::Rotate270);
        assert_eq!(found(b""), Orientation::Normal);
        assert_eq!(found(b"Exif\0\0"), Orientation::Normal);
        assert_eq!(found(b"Exif\0\0Exif\0\0Exif\0\0"), Orientation::Normal);
    }

    #[test]
    fn a_stream_of_parts_reads_across_them() {
        let b = block(false, &[(274, 3, 1, short(false, 8))], &[]);
        for split in 0..b.len() {
            let mut s = Stream::one(&b[..split]);
            s.push(&b[split..]);
            assert_eq!(
                exif_block(s).and_then(Orientation::from_value),
                Some(Orientation::Rotate90),
                "split at {split}"
            );
        }
    }

    #[test]
    fn more_than_32_kept_tags_before_the_orientation() {
        let le = |v: u32| v.to_le_bytes();
        let mut entries: Vec<(u16, u16, u32, [u8; 4])> =
            (0..40).map(|t| (1000 + t, 3, 1, le(1))).collect();
        // A duplicate of a kept tag whose data would run past the end: skipped, not an end.
        entries.push((1001, 2, 10, le(100_000)));
        entries.push((274, 3, 1, le(7)));
        assert_eq!(found(&block(true, &entries, &[])), Orientation::Transverse);
    }

    /// A PNG chunk: length, type, data, a CRC nobody here checks.
    fn png_chunk(kind: &[u8; 4], data: &[u8]) -> Vec<u8> {
        let mut v = (data.len() as u32).to_be_bytes().to_vec();
        v.extend_from_slice(kind);
        v.extend_from_slice(data);
        v.extend_from_slice(&[0; 4]);
        v
    }

    #[test]
    fn png_takes_the_last_exif_chunk_then_xmp() {
        let exif = |k| block(false, &[(274, 3, 1, short(false, k))], &[]);
        let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
        png.extend(png_chunk(b"IHDR", &[0; 13]));
        png.extend(png_chunk(b"eXIf", &exif(6)));
        png.extend(png_chunk(b"IDAT", &[1, 2, 3]));
        assert_eq!(orientation(&png), Orientation::Rotate270);
        let mut after = png.clone();
        after.extend(png_chunk(b"eXIf", &exif(3)));
        after.extend(png_chunk(b"IEND", &[]));
        assert_eq!(orientation(&after), Orientation::Rotate180);
        let mut xmp = b"\x89PNG\r\n\x1a\n".to_vec();
        xmp.extend(png_chunk(
            b"iTXt",
            b"XML:com.adobe.xmp\0\0\0en\0\0<x tiff:Orientation=\"8\"/>",
        ));
        assert_eq!(orientation(&xmp), Orientation::Rotate90);
        // Compressed XMP is not read; a chunk claiming more than the file ends the walk.
        let mut zipped = b"\x89PNG\r\n\x1a\n".to_vec();
        zipped.extend(png_chunk(b"iTXt", b"XML:com.adobe.xmp\0\x01\0\0\0x"));
        assert_eq!(orientation(&zipped), Orientation::Normal);
        let mut cut = png.clone();
        cut.truncate(cut.len() - 5);
        cut.extend_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(orientation(&cut), Orientation::Rotate270);
    }

    #[test]
    fn webp_reads_chunks_its_vp8x_flags_announce() {
        let exif = block(true, &[(274, 3, 1, short(true, 6))], &[]);
        let webp = |flags: u8, chunks: &[(&[u8; 4], &[u8])]| {
            let mut v = b"RIFF\0\0\0\0WEBPVP8X\x0a\0\0\0".to_vec();
            v.extend_from_slice(&[flags, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
            for (kind, data) in chunks {
                v.extend_from_slice(*kind);
                v.extend_from_slice(&(data.len() as u32).to_le_bytes());
                v.extend_from_slice(data);
                if data.len() % 2 == 1 {
                    v.push(0);
                }
            }
            v
        };
        let xmp: &[u8] = b"<x tiff:Orientation=\"3\"/>";
        assert_eq!(
            orientation(&webp(0x08, &[(b"EXIF", &exif)])),
            Orientation::Rotate270
        );
        assert_eq!(
            orientation(&webp(0x00, &[(b"EXIF", &exif)])),
            Orientation::Normal
        );
        assert_eq!(
            orientation(&webp(0x0C, &[(b"XMP ", xmp), (b"EXIF", &exif)])),
            Orientation::Rotate270
        );
        assert_eq!(
            orientation(&webp(0x04, &[(b"EXIF", &exif), (b"XMP ", xmp)])),
            Orientation::Rotate180
        );
        // A simple (VP8) WebP has no metadata.
        let mut simple = b"RIFF\0\0\0\0WEBPEXIF".to_vec();
        simple.extend_from_slice(&(exif.len() as u32).to_le_bytes());
        simple.extend_from_slice(&exif);
        assert_eq!(orientation(&simple), Orientation::Normal);
    }

    #[test]
    fn tiff_reads_its_first_ifd_in_either_order_and_bigtiff() {
        for little in [true, false] {
            let file = block(
                little,
                &[(256, 3, 1, short(little, 5)), (274, 3, 1, short(little, 8))],
                &[],
            );
            assert_eq!(orientation(&file), Orientation::Rotate90);
        }
        // BigTIFF: header 16 bytes, IFD0 at 16: count (8), entries of 20 bytes.
        let mut big = b"II+\0\x08\0\0\0\x10\0\0\0\0\0\0\0".to_vec();
        big.extend_from_slice(&1u64.to_le_bytes());
        big.extend_from_slice(&274u16.to_le_bytes());
        big.extend_from_slice(&3u16.to_le_bytes());
        big.extend_from_slice(&1u64.to_le_bytes());
        big.extend_from_slice(&[7, 0, 0, 0, 0, 0, 0, 0]);
        big.extend_from_slice(&0u64.to_le_bytes());
        assert_eq!(orientation(&big), Orientation::Transverse);
        assert_eq!(orientation(&big[..30]), Orientation::Normal);
        // GIF, BMP, PNM and unknown bytes carry none.
        for other in [&b"GIF89a\x01\0\x01\0"[..], b"BM", b"P6\n1 1\n255\n", b""] {
            assert_eq!(orientation(other), Orientation::Normal);
        }
    }

    #[test]
    fn jpeg_concatenates_exif_segments_and_falls_back_to_xmp() {
        let app1 = |body: &[u8]| {
            let mut v = vec![0xFF, 0xE1];
            v.extend_from_slice(&(body.len() as u16 + 2).to_be_bytes());
            v.extend_from_slice(body);
            v
        };
        let mut exif = b"Exif\0\0".to_vec();
        exif.extend(block(true, &[(274, 3, 1, short(true, 6))], &[]));
        let (first, rest) = exif.split_at(15);
        let mut second = b"Exif\0\0".to_vec();
        second.extend_from_slice(rest);
        let mut jpeg = vec![0xFF, 0xD8];
        jpeg.extend(app1(first));
        jpeg.extend(app1(&second));
        jpeg.extend_from_slice(&[0xFF, 0xDA, 0, 2, 0xFF, 0xD9]);
        assert_eq!(orientation(&jpeg), Orientation::Rotate270);
        // A segment after the first scan is not read.
        let mut late = vec![0xFF, 0xD8, 0xFF, 0xDA, 0, 2];
        late.extend(app1(&exif));
        assert_eq!(orientation(&late), Orientation::Normal);
        let mut xmp = vec![0xFF, 0xD8];
        xmp.extend(app1(
            b"http://ns.adobe.com/xap/1.0/\0<x tiff:Orientation=\"2\"/>",
        ));
        assert_eq!(orientation(&xmp), Orientation::FlipLeftRight);
        // An Exif block with no tag 274 leaves the XMP in force; one with it overrides.
        let mut other = b"Exif\0\0".to_vec();
        other.extend(block(true, &[(271, 2, 4, *b"abc\0")], &[]));
        let mut both = xmp.clone();
        both.extend(app1(&other));
        assert_eq!(orientation(&both), Orientation::FlipLeftRight);
        let mut one = b"Exif\0\0".to_vec();
        one.extend(block(true, &[(274, 3, 1, short(true, 1))], &[]));
        let mut overridden = xmp.clone();
        overridden.extend(app1(&one));
        assert_eq!(orientation(&overridden), Orientation::Normal);
    }

    #[test]
    fn xmp_orientation() {
        assert_eq!(xmp(b"<x tiff:Orientation=\"6\"/>"), Some(6));
        assert_eq!(xmp(b"<tiff:Orientation>8</tiff:Orientation>"), Some(8));
        assert_eq!(xmp(b"tiff:Orientation=6 tiff:Orientation=\"3\""), Some(3));
        assert_eq!(xmp(b"tiff:Orientation=\"x\""), None);
        assert_eq!(xmp(b"tiff:Orientation"), None);
        assert_eq!(xmp(b""), None);
    }

    #[test]
    fn transpose_moves_pixels_as_pillow_names_them() {
        for (w, h) in [(1u32, 1u32), (1, 5), (7, 1), (33, 65), (70, 40)] {
            // A view with a stride wider than its rows, as a region decode hands over.
            let (full_w, left) = (w + 5, 3usize);
            let mut backing = RgbImage::new();
            for (i, b) in backing.reset(full_w, h).iter_mut().enumerate() {
                *b = (i * 7 % 251) as u8;
            }
            let rect = crate::image::CropRect {
                top: 0,
                left: left as u32,
                height: h,
                width: w,
            };
            let view = backing.crop_view(rect).expect("fits");
            for value in 1..=8u64 {
                let o = Orientation::from_value(value).unwrap_or_default();
                let mut out = RgbImage::new();
                transpose(view, o, &mut out).expect("transposes");
                let (ow, oh) = o.oriented_size(w, h);
                assert_eq!((out.width(), out.height()), (ow, oh));
                let (wu, hu) = (w as usize, h as usize);
                for y in 0..oh as usize {
                    for x in 0..ow as usize {
                        // PIL.Image.Transpose's definitions, per EXIF value.
                        let (sx, sy) = match value {
                            2 => (wu - 1 - x, y),
                            3 => (wu - 1 - x, hu - 1 - y),
                            4 => (x, hu - 1 - y),
                            5 => (y, x),
                            6 => (y, hu - 1 - x),
                            7 => (wu - 1 - y, hu - 1 - x),
                            8 => (wu - 1 - y, x),
                            _ => (x, y),
                        };
                        let got = &out.as_raw()[3 * (y * ow as usize + x)..][..3];
                        assert_eq!(
                            got,
                            &view.row(sy as u32)[3 * sx..3 * sx + 3],
                            "{w}x{h} {o:?}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn mapping_matches_the_named_transpositions() {
        // Output pixel (0, 0) of a 2x1 image [A, B] (stored W=2, H=1).
        for (o, swapped) in [
            (Orientation::FlipLeftRight, false),
            (Orientation::Rotate270, true),
            (Orientation::Rotate90, true),
        ] {
            assert_eq!(o.swaps_axes(), swapped);
            assert_eq!(o.oriented_size(2, 1), if swapped { (1, 2) } else { (2, 1) });
            assert_eq!(Orientation::from_value(u64::from(o.value())), Some(o));
        }
        assert_eq!(Orientation::from_value(1), None);
        assert_eq!(Orientation::from_value(9), None);
    }
}
