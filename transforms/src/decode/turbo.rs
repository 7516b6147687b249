//! JPEG through libjpeg-turbo's TurboJPEG 3 API (`tj3*`), configured as Pillow configures libjpeg
//! so that a full decode equals Pillow's pixels exactly.
//!
//! Pillow decodes with libjpeg's defaults: ISLOW integer IDCT, fancy (triangle) upsampling, the
//! colorspace libjpeg infers from the markers, warnings ignored. We set the same through `tj3Set`
//! and never change them. This module must stay the only place that touches the C library: every
//! `unsafe` block is here, next to the reason it is sound.

use std::ffi::{c_int, c_void, CStr};
use std::ptr::NonNull;

use turbojpeg_sys as tj;

use super::convert;
use super::markers::Frame;
use crate::error::{Error, Result};
use crate::image::{grow_zeroed, CropRect, RgbImage};

const FORMAT: &str = "jpeg";

/// Extra output pixels decoded on each side of a requested region. libjpeg-turbo treats the
/// edges of a cropped region like image edges: fancy upsampling replicates the last chroma
/// sample there instead of reading its neighbour, so the outermost columns/rows of a cropped
/// decode differ from the full decode. One pixel would do for 2x subsampling; two leave room, and
/// the parity tests check every subsampling on many rectangles.
const MARGIN: u32 = 2;

/// libjpeg-turbo refuses progressive JPEGs with more scans than this (a decode-time bomb: each
/// scan re-reads the whole coefficient buffer). Real encoders write at most a few dozen.
const SCAN_LIMIT: c_int = 500;

/// iMCU width and height per `TJSAMP` (turbojpeg.h's `tjMCUWidth` / `tjMCUHeight`), indexed by
/// 444, 422, 420, GRAY, 440, 411, 441. A unit test checks them against the library's tables.
const IMCU_WIDTH: [u32; 7] = [8, 16, 16, 8, 8, 32, 8];
const IMCU_HEIGHT: [u32; 7] = [8, 8, 16, 8, 16, 8, 32];

/// What libjpeg-turbo read from the header, as far as decoding needs it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Header {
    width: u32,
    height: u32,
    /// A `TJSAMP` value; `TJSAMP_UNKNOWN` (-1) for layouts cropping cannot handle.
    subsamp: c_int,
    /// A `TJCS` value.
    colorspace: c_int,
    lossless: bool,
}

impl Header {
    fn imcu(&self) -> Option<(u32, u32)> {
        let i = usize::try_from(self.subsamp).ok()?;
        Some((*IMCU_WIDTH.get(i)?, *IMCU_HEIGHT.get(i)?))
    }

    /// Whether libjpeg-turbo can crop and DCT-scale this image (not lossless JPEG, and a
    /// subsampling layout it knows).
    pub fn scalable(&self) -> bool {
        !self.lossless && self.imcu().is_some()
    }

    /// Four components, decoded to CMYK and converted by us as Pillow does.
    fn is_cmyk(&self) -> bool {
        self.colorspace == tj::TJCS_TJCS_CMYK as c_int
            || self.colorspace == tj::TJCS_TJCS_YCCK as c_int
    }
}

/// A rectangle in libjpeg-turbo's (scaled) output coordinates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Region {
    x: u32,
    y: u32,
    w: u32,
    h: u32,
}

/// What to decode: scale, region, and where the caller's rectangle lands in the output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    /// DCT scaling denominator: 1, 2, 4 or 8.
    denom: u8,
    /// Part of the scaled image to decode; `None` for all of it.
    region: Option<Region>,
    /// The requested rectangle (scaled) inside the decoded pixels.
    pub inner: CropRect,
}

fn scaled(dim: u32, denom: u32) -> u32 {
    dim.div_ceil(denom)
}

/// `[start, start + len)` divided by `denom`, edges rounded to nearest, clamped into
/// `[0, limit)` and at least one pixel long.
fn scaled_span(start: u32, len: u32, denom: u32, limit: u32) -> (u32, u32) {
    let half = denom / 2;
    let a = ((u64::from(start) + u64::from(half)) / u64::from(denom)) as u32;
    let b = ((u64::from(start) + u64::from(len) + u64::from(half)) / u64::from(denom)) as u32;
    let b = b.min(limit);
    if b > a {
        (a, b)
    } else if a < limit {
        (a, a + 1)
    } else {
        (limit.saturating_sub(1), limit)
    }
}

impl Plan {
    /// The whole image at full size.
    pub fn full() -> Plan {
        Plan {
            denom: 1,
            region: None,
            inner: CropRect::default(),
        }
    }

    /// `rect` (in full-size coordinates, already checked to fit) at scale `1/denom`, with the
    /// margin and the left-edge alignment libjpeg-turbo needs. Falls back to the whole image
    /// when the image cannot be cropped.
    pub fn region(header: &Header, rect: CropRect, denom: u8) -> Plan {
        let d = u32::from(denom);
        let (sw, sh) = (scaled(header.width, d), scaled(header.height, d));
        let (l, r) = scaled_span(rect.left, rect.width, d, sw);
        let (t, b) = scaled_span(rect.top, rect.height, d, sh);
        let (x0, y0, x1, y1) = match header.imcu() {
            Some((imcu_w, _)) if !header.lossless => {
                // tj3SetCroppingRegion: x must be a multiple of the scaled iMCU width.
                let align = scaled(imcu_w, d);
                let x0 = l.saturating_sub(MARGIN) / align * align;
                // At least one iMCU wide: libjpeg switches to a different upsampler when a
                // cropped row holds fewer than two chroma samples.
                let x1 = (r + MARGIN).max(x0 + align).min(sw);
                (x0, t.saturating_sub(MARGIN), x1, (b + MARGIN).min(sh))
            }
            _ => (0, 0, sw, sh),
        };
        let region = if (x0, y0, x1, y1) == (0, 0, sw, sh) {
            None
        } else {
            Some(Region {
                x: x0,
                y: y0,
                w: x1 - x0,
                h: y1 - y0,
            })
        };
        Plan {
            denom,
            region,
            inner: CropRect {
                top: t - y0,
                left: l - x0,
                height: b - t,
                width: r - l,
            },
        }
    }
}

/// An owned TurboJPEG instance (RAII over `tj3Init` / `tj3Destroy`), what the decompressor and
/// the compressor share: its parameters and its last error.
struct Handle(NonNull<c_void>);

// SAFETY: a TurboJPEG instance is a heap object with no thread affinity; it is only reached
// through `&mut self` here, so moving it to another thread (one per worker) is sound. libjpeg's
// message buffer is thread-local and read right after each call on the calling thread.
unsafe impl Send for Handle {}

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: the handle came from tj3Init, is non-null, and is destroyed exactly once, here.
        unsafe { tj::tj3Destroy(self.0.as_ptr()) }
    }
}

impl Handle {
    /// A new instance of `init`'s kind; `what` names it in the error.
    fn new(init: tj::TJINIT, what: &str) -> Result<Self> {
        // SAFETY: tj3Init takes an init type and returns a new instance or NULL (checked below).
        let raw = unsafe { tj::tj3Init(init as c_int) };
        NonNull::new(raw)
            .map(Handle)
            .ok_or_else(|| Error::Unsupported {
                format: FORMAT,
                detail: format!("libjpeg-turbo could not create a {what}"),
            })
    }

    fn as_ptr(&self) -> *mut c_void {
        self.0.as_ptr()
    }

    fn set(&mut self, param: tj::TJPARAM, value: c_int) -> Result<()> {
        // SAFETY: valid handle; tj3Set only stores the value (or fails for a bad parameter).
        let rc = unsafe { tj::tj3Set(self.as_ptr(), param as c_int, value) };
        if rc == 0 {
            Ok(())
        } else {
            Err(map_fatal(self.error_string()))
        }
    }

    fn get(&self, param: tj::TJPARAM) -> c_int {
        // SAFETY: valid handle; tj3Get only reads a parameter (-1 when unknown).
        unsafe { tj::tj3Get(self.as_ptr(), param as c_int) }
    }

    /// The message of the last failed call on this thread/instance, copied out.
    fn error_string(&self) -> String {
        // SAFETY: valid handle; tj3GetErrorStr returns a NUL-terminated string owned by the
        // instance or by libturbojpeg's thread-local buffer, valid until the next call on this
        // thread; it is copied before any other call.
        let ptr = unsafe { tj::tj3GetErrorStr(self.as_ptr()) };
        if ptr.is_null() {
            return "unknown libjpeg-turbo error".to_string();
        }
        // SAFETY: non-null, NUL-terminated (see above).
        unsafe { CStr::from_ptr(ptr) }
            .to_string_lossy()
            .trim()
            .to_string()
    }
}

/// An owned TurboJPEG decompression instance.
pub(crate) struct Turbo {
    handle: Handle,
}

impl Turbo {
    /// A decompressor configured like Pillow's libjpeg, with our pixel limit as a second guard.
    pub fn new(max_pixels: u64) -> Result<Self> {
        let handle = Handle::new(tj::TJINIT_TJINIT_DECOMPRESS, "decompressor")?;
        let mut turbo = Turbo { handle };
        // Pillow ignores libjpeg's warnings (corrupt data is decoded as libjpeg recovers it), so
        // warnings must not stop the decode; truncation is judged separately (markers.rs).
        turbo.handle.set(tj::TJPARAM_TJPARAM_STOPONWARNING, 0)?;
        // Pillow's defaults: fancy upsampling, accurate integer IDCT.
        turbo.handle.set(tj::TJPARAM_TJPARAM_FASTUPSAMPLE, 0)?;
        turbo.handle.set(tj::TJPARAM_TJPARAM_FASTDCT, 0)?;
        turbo
            .handle
            .set(tj::TJPARAM_TJPARAM_SCANLIMIT, SCAN_LIMIT)?;
        // 0 means "no limit" to libjpeg-turbo; ours is checked from the header first anyway.
        turbo.handle.set(
            tj::TJPARAM_TJPARAM_MAXPIXELS,
            c_int::try_from(max_pixels).unwrap_or(0),
        )?;
        Ok(turbo)
    }

    /// Whether the last failure was only a warning. libjpeg-turbo reports TJERR_WARNING whenever
    /// a warning happened, even if a fatal error followed; then the message is the fatal one, so
    /// a warning only counts as such if its text is one of libjpeg's warning messages.
    fn only_warned(&self, message: &str) -> bool {
        // SAFETY: valid handle; tj3GetErrorCode only reads the instance's warning flag.
        let code = unsafe { tj::tj3GetErrorCode(self.handle.as_ptr()) };
        code == tj::TJERR_TJERR_WARNING as c_int && is_warning_message(message)
    }

    /// Reads the header of `bytes` (already walked by [`super::markers::read_frame`]).
    pub fn read_header(&mut self, bytes: &[u8], frame: &Frame) -> Result<Header> {
        // SAFETY: valid handle; libjpeg reads at most `bytes.len()` bytes from `bytes`, a live
        // slice, and keeps no pointer to it after the call (tj3Decompress8 resets its source).
        let rc = unsafe {
            tj::tj3DecompressHeader(self.handle.as_ptr(), bytes.as_ptr(), bytes.len() as _)
        };
        if rc != 0 {
            let message = self.handle.error_string();
            // A warning (e.g. junk before a marker) does not stop Pillow either.
            if !self.only_warned(&message) {
                return Err(map_fatal(message));
            }
        }
        let width = self.handle.get(tj::TJPARAM_TJPARAM_JPEGWIDTH);
        let height = self.handle.get(tj::TJPARAM_TJPARAM_JPEGHEIGHT);
        // Cross-check with our own walk: the output buffer is sized from these.
        if u32::try_from(width).ok() != Some(frame.width)
            || u32::try_from(height).ok() != Some(frame.height)
        {
            return Err(Error::Corrupt {
                format: FORMAT,
                detail: format!(
                    "libjpeg reads {width}x{height}, the frame header says {}x{}",
                    frame.width, frame.height
                ),
            });
        }
        Ok(Header {
            width: frame.width,
            height: frame.height,
            subsamp: self.handle.get(tj::TJPARAM_TJPARAM_SUBSAMP),
            colorspace: self.handle.get(tj::TJPARAM_TJPARAM_COLORSPACE),
            lossless: self.handle.get(tj::TJPARAM_TJPARAM_LOSSLESS) == 1,
        })
    }

    /// Decodes what `plan` says into `out`; `header` must come from [`Turbo::read_header`] on
    /// the same `bytes`, just before.
    pub fn decode(
        &mut self,
        bytes: &[u8],
        header: &Header,
        plan: Plan,
        out: &mut RgbImage,
        scratch: &mut Vec<u8>,
    ) -> Result<()> {
        let d = u32::from(plan.denom);
        let (w, h) = match plan.region {
            Some(r) => (r.w, r.h),
            None => (scaled(header.width, d), scaled(header.height, d)),
        };
        self.set_scaling(plan.denom)?;
        self.set_cropping(plan.region)?;
        if header.is_cmyk() {
            let len = 4 * w as usize * h as usize;
            grow_zeroed(scratch, len)?;
            let cmyk = &mut scratch[..len];
            self.decompress(bytes, cmyk, w, h, tj::TJPF_TJPF_CMYK)?;
            convert::adobe_cmyk_to_rgb(cmyk, out.try_reset(w, h)?);
        } else {
            self.decompress(bytes, out.try_reset(w, h)?, w, h, tj::TJPF_TJPF_RGB)?;
        }
        Ok(())
    }

    fn set_scaling(&mut self, denom: u8) -> Result<()> {
        let factor = tj::tjscalingfactor {
            num: 1,
            denom: c_int::from(denom),
        };
        // SAFETY: valid handle; the factor is passed by value and only validated and stored.
        let rc = unsafe { tj::tj3SetScalingFactor(self.handle.as_ptr(), factor) };
        if rc == 0 {
            Ok(())
        } else {
            Err(map_fatal(self.handle.error_string()))
        }
    }

    fn set_cropping(&mut self, region: Option<Region>) -> Result<()> {
        let to_int = |v: u32| c_int::try_from(v).unwrap_or(c_int::MAX);
        let region = match region {
            Some(r) => tj::tjregion {
                x: to_int(r.x),
                y: to_int(r.y),
                w: to_int(r.w),
                h: to_int(r.h),
            },
            // All zeros: no cropping (TJUNCROPPED).
            None => tj::tjregion {
                x: 0,
                y: 0,
                w: 0,
                h: 0,
            },
        };
        // SAFETY: valid handle; the region is passed by value and validated against the header
        // read last (same bytes) and the scaling factor just set.
        let rc = unsafe { tj::tj3SetCroppingRegion(self.handle.as_ptr(), region) };
        if rc == 0 {
            Ok(())
        } else {
            Err(map_fatal(self.handle.error_string()))
        }
    }

    /// `tj3Decompress8` into `dst`, `w` x `h` pixels of `pixel_format`, rows packed.
    fn decompress(
        &mut self,
        bytes: &[u8],
        dst: &mut [u8],
        w: u32,
        h: u32,
        pixel_format: tj::TJPF,
    ) -> Result<()> {
        let bpp = if pixel_format == tj::TJPF_TJPF_CMYK {
            4
        } else {
            3
        };
        let pitch = bpp * w as usize;
        let (Ok(pitch_c), true) = (
            c_int::try_from(pitch),
            dst.len() >= pitch.saturating_mul(h as usize),
        ) else {
            return Err(Error::invalid(
                "out",
                format!(
                    "{} bytes cannot hold {w}x{h} pixels of {bpp} bytes",
                    dst.len()
                ),
            ));
        };
        // SAFETY: valid handle. libjpeg reads at most `bytes.len()` bytes of the live slice
        // `bytes`. It writes `h` rows of `w * bpp` bytes, `pitch` apart, into `dst`, which holds
        // at least `pitch * h` bytes (checked above): `w` and `h` are the cropping region set
        // just before, or the scaled size of the header read from these same bytes, and
        // tj3Decompress8 fails before writing if the region does not match what libjpeg decodes.
        let rc = unsafe {
            tj::tj3Decompress8(
                self.handle.as_ptr(),
                bytes.as_ptr(),
                bytes.len() as _,
                dst.as_mut_ptr(),
                pitch_c,
                pixel_format,
            )
        };
        if rc == 0 {
            return Ok(());
        }
        let message = self.handle.error_string();
        if !self.only_warned(&message) {
            return Err(map_fatal(message));
        }
        // libjpeg's memory source warns at the end of the data and invents an EOI: that is
        // Pillow's "image file is truncated", not a decodable image.
        if message.starts_with("Premature end of JPEG file") {
            return Err(Error::Truncated {
                format: FORMAT,
                detail: message,
            });
        }
        // Any other warning (corrupt entropy data, extraneous bytes): libjpeg recovered, Pillow
        // returns those pixels, and so do we.
        Ok(())
    }
}

/// libjpeg's warning messages (jerror.h, JWRN_*); fatal errors never start like these.
fn is_warning_message(message: &str) -> bool {
    const WARNINGS: [&str; 7] = [
        "Corrupt JPEG data",
        "Premature end of JPEG file",
        "Unknown Adobe color transform code",
        "Inconsistent progression sequence",
        "Warning: unknown JFIF revision",
        "Invalid SOS parameters for sequential JPEG",
        "Application transferred too many scanlines",
    ];
    WARNINGS.iter().any(|w| message.starts_with(w))
}

/// An owned TurboJPEG compression instance set as Pillow's `save(format="JPEG", quality=q)`
/// sets libjpeg (and as torchvision's `encode_jpeg` does): `jpeg_set_defaults`, then
/// `jpeg_set_quality(q, force_baseline=TRUE)`, 4:2:0 chroma at every quality, accurate integer
/// DCT, sequential, Huffman tables not optimized. It writes into a caller's buffer that only
/// grows (`TJPARAM_NOREALLOC`), so a warm encoder allocates no output.
pub(crate) struct TurboEncoder {
    handle: Handle,
}

/// `quality` as a libjpeg quality, 1 to 100, or the argument's error.
fn checked_quality(quality: u8) -> Result<c_int> {
    if !(1..=100).contains(&quality) {
        return Err(Error::invalid(
            "quality",
            format!("{quality} is not between 1 and 100"),
        ));
    }
    Ok(c_int::from(quality))
}

impl TurboEncoder {
    /// A compressor at `quality` (1 to 100).
    pub fn new(quality: u8) -> Result<Self> {
        let quality = checked_quality(quality)?;
        let mut handle = Handle::new(tj::TJINIT_TJINIT_COMPRESS, "compressor")?;
        for (param, value) in [
            (tj::TJPARAM_TJPARAM_QUALITY, quality),
            (tj::TJPARAM_TJPARAM_SUBSAMP, tj::TJSAMP_TJSAMP_420 as c_int),
            (tj::TJPARAM_TJPARAM_FASTDCT, 0),
            (tj::TJPARAM_TJPARAM_OPTIMIZE, 0),
            (tj::TJPARAM_TJPARAM_PROGRESSIVE, 0),
            // Our buffer is sized with tj3JPEGBufSize first: libjpeg never frees or replaces
            // memory it does not own.
            (tj::TJPARAM_TJPARAM_NOREALLOC, 1),
        ] {
            handle.set(param, value)?;
        }
        Ok(TurboEncoder { handle })
    }

    /// Encodes at `quality` (1 to 100) from now on.
    pub fn set_quality(&mut self, quality: u8) -> Result<()> {
        let quality = checked_quality(quality)?;
        self.handle.set(tj::TJPARAM_TJPARAM_QUALITY, quality)
    }

    /// Compresses `img` into the front of `buf` and returns the JPEG's length. `buf` grows to
    /// libjpeg-turbo's worst case for the size (about 3 bytes a pixel) and keeps it, so a buffer
    /// reused for one size allocates once.
    pub fn compress(&mut self, img: &RgbImage, buf: &mut Vec<u8>) -> Result<usize> {
        let (Ok(width), Ok(height)) = (c_int::try_from(img.width()), c_int::try_from(img.height()))
        else {
            return Err(Error::invalid(
                "image",
                format!("{}x{} is too large to encode", img.width(), img.height()),
            ));
        };
        if width == 0 || height == 0 {
            return Err(Error::invalid("image", "an empty image cannot be encoded"));
        }
        // SAFETY: a pure function of its arguments (0 when they are out of range).
        let worst = unsafe { tj::tj3JPEGBufSize(width, height, tj::TJSAMP_TJSAMP_420 as c_int) };
        let worst = usize::try_from(worst).unwrap_or(0);
        if worst == 0 {
            return Err(Error::Unsupported {
                format: FORMAT,
                detail: format!("{width}x{height} is beyond what JPEG can hold"),
            });
        }
        grow_zeroed(buf, worst)?;
        let mut ptr = buf.as_mut_ptr();
        let mut size = buf.len() as tj::size_t;
        // SAFETY: valid handle; `img` holds `height` packed rows of `width` RGB pixels (pitch 0
        // = packed), borrowed for the call. With TJPARAM_NOREALLOC set (in `new`, never
        // cleared), libjpeg-turbo writes at most `size` bytes at `ptr`, which `buf` owns and
        // which hold at least tj3JPEGBufSize bytes for this size, never reallocates or frees
        // them, and stores the JPEG's length in `size`; it keeps no pointer after the call.
        let rc = unsafe {
            tj::tj3Compress8(
                self.handle.as_ptr(),
                img.as_raw().as_ptr(),
                width,
                0,
                height,
                tj::TJPF_TJPF_RGB,
                &mut ptr,
                &mut size,
            )
        };
        let len = usize::try_from(size).unwrap_or(usize::MAX);
        if rc != 0 || ptr != buf.as_mut_ptr() || len > buf.len() {
            return Err(map_fatal(self.handle.error_string()));
        }
        Ok(len)
    }

    /// Compresses `img` into `out` (replacing its contents with the JPEG).
    pub fn encode(&mut self, img: &RgbImage, out: &mut Vec<u8>) -> Result<()> {
        let len = self.compress(img, out)?;
        out.truncate(len);
        Ok(())
    }
}

/// A JPEG compression and decompression of an image in place, as torchvision's `JPEG`
/// augmentation does (Pillow's save and open on a PIL image, `encode_jpeg` and `decode_jpeg` on
/// a tensor: the same libjpeg settings, the same pixels). The JPEG lives in a buffer kept from
/// call to call; a warm round trip on one image size allocates nothing on our side (libjpeg's
/// own per-image pools come and go inside each call, as for every decode).
pub(crate) struct TurboRoundTrip {
    encoder: TurboEncoder,
    decoder: Turbo,
    /// The compressed image at its front; sized for the largest image so far.
    jpeg: Vec<u8>,
    /// `Turbo::decode`'s CMYK buffer: never used (our JPEGs are YCbCr) and so never grown.
    cmyk: Vec<u8>,
}

impl TurboRoundTrip {
    /// Both instances, the encoder at Pillow's default quality (75) until told otherwise.
    pub fn new() -> Result<Self> {
        Ok(TurboRoundTrip {
            encoder: TurboEncoder::new(75)?,
            decoder: Turbo::new(0)?,
            jpeg: Vec::new(),
            cmyk: Vec::new(),
        })
    }

    /// Replaces `img` by its JPEG at `quality` (1 to 100), decoded as Pillow decodes it. `img`
    /// keeps its size; an image of one gray level in all three channels stays so, with the
    /// levels Pillow gives for the `L` image (the YCbCr conversion maps R = G = B to exactly
    /// Y = R, Cb = Cr = 128).
    pub fn apply(&mut self, img: &mut RgbImage, quality: u8) -> Result<()> {
        self.encoder.set_quality(quality)?;
        let len = self.encoder.compress(img, &mut self.jpeg)?;
        let jpeg = self.jpeg.get(..len).unwrap_or(&[]);
        let frame = super::markers::read_frame(jpeg)?;
        let header = self.decoder.read_header(jpeg, &frame)?;
        let (width, height) = (img.width(), img.height());
        self.decoder
            .decode(jpeg, &header, Plan::full(), img, &mut self.cmyk)?;
        if (img.width(), img.height()) != (width, height) {
            return Err(Error::Corrupt {
                format: FORMAT,
                detail: format!(
                    "a {width}x{height} image came back {}x{}",
                    img.width(),
                    img.height()
                ),
            });
        }
        Ok(())
    }
}

/// A fatal libjpeg/TurboJPEG message to our error kinds.
fn map_fatal(message: String) -> Error {
    const UNSUPPORTED: [&str; 6] = [
        "Unsupported JPEG process",
        "Unsupported JPEG data precision",
        "Unsupported color conversion",
        "not supported",
        "Maximum supported image dimension",
        "Cannot ",
    ];
    if UNSUPPORTED.iter().any(|u| message.contains(u)) {
        Error::Unsupported {
            format: FORMAT,
            detail: message,
        }
    } else {
        Error::Corrupt {
            format: FORMAT,
            detail: message,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A JPEG of a smooth pattern with edges, compressed by libjpeg-turbo itself, for layouts
    /// Pillow cannot write (4:4:0, 4:1:1, 4:4:1).
    fn compress(width: u32, height: u32, subsamp: tj::TJSAMP) -> Vec<u8> {
        let pixels: Vec<u8> = (0..height)
            .flat_map(|y| (0..width).map(move |x| (x, y)))
            .flat_map(|(x, y)| {
                let edge = if (x / 7 + y / 5) % 3 == 0 { 90 } else { 0 };
                [
                    (x * 255 / width) as u8,
                    ((y * 255 / height) as u8).wrapping_add(edge),
                    ((x * y) % 251) as u8,
                ]
            })
            .collect();
        // SAFETY: tj3Init returns a new instance or NULL (asserted).
        let handle = unsafe { tj::tj3Init(tj::TJINIT_TJINIT_COMPRESS as c_int) };
        assert!(!handle.is_null());
        let mut buf: *mut u8 = std::ptr::null_mut();
        let mut size: tj::size_t = 0;
        // SAFETY: valid handle; `pixels` holds height rows of width RGB pixels (pitch 0 =
        // packed); tj3Compress8 allocates `buf` with tj3Alloc and stores its size.
        let rc = unsafe {
            tj::tj3Set(handle, tj::TJPARAM_TJPARAM_SUBSAMP as c_int, subsamp);
            tj::tj3Set(handle, tj::TJPARAM_TJPARAM_QUALITY as c_int, 90);
            tj::tj3Compress8(
                handle,
                pixels.as_ptr(),
                width as c_int,
                0,
                height as c_int,
                tj::TJPF_TJPF_RGB,
                &mut buf,
                &mut size,
            )
        };
        assert_eq!(rc, 0);
        assert!(!buf.is_null());
        // SAFETY: on success `buf` points to `size` initialised bytes owned by us until
        // tj3Free; the handle is destroyed once, after use.
        unsafe {
            let jpeg = std::slice::from_raw_parts(buf, size as usize).to_vec();
            tj::tj3Free(buf.cast());
            tj::tj3Destroy(handle);
            jpeg
        }
    }

    #[test]
    fn imcu_tables_and_regions_for_every_subsampling() {
        use crate::decode::{DecodeContext, DecodeOptions};
        let mut ctx = DecodeContext::new(DecodeOptions::default()).expect("context");
        let mut full = RgbImage::new();
        let mut full_scaled = RgbImage::new();
        let mut out = RgbImage::new();
        for subsamp in 0..7 {
            let jpeg = compress(101, 77, subsamp);
            let frame = super::super::markers::read_frame(&jpeg).expect("frame");
            let mut t = Turbo::new(1 << 20).expect("init");
            let header = t.read_header(&jpeg, &frame).expect("header");
            assert_eq!(header.subsamp, subsamp);
            let (imcu_w, imcu_h) = header.imcu().expect("known layout");
            assert_eq!(
                (imcu_w, imcu_h),
                (IMCU_WIDTH[subsamp as usize], IMCU_HEIGHT[subsamp as usize])
            );
            // libjpeg-turbo accepts a left edge on the iMCU grid and refuses one off it.
            let at = |x| Region {
                x,
                y: 0,
                w: 8,
                h: 8,
            };
            assert!(
                t.set_cropping(Some(at(imcu_w))).is_ok(),
                "subsamp {subsamp}"
            );
            if imcu_w > 8 {
                assert!(
                    t.set_cropping(Some(at(imcu_w / 2))).is_err(),
                    "subsamp {subsamp}"
                );
            }
            // Region decodes equal the full decode cropped, at every offset near the grid.
            ctx.decode(&jpeg, &mut full).expect("full");
            for (top, left, height, width) in [
                (0, 0, 77, 101),
                (1, 1, 5, 5),
                (15, 31, 17, 33),
                (16, 32, 1, 1),
                (31, 33, 40, 60),
                (76, 100, 1, 1),
                (33, 7, 3, 90),
                (40, 50, 16, 16),
                (0, 84, 77, 17),
            ] {
                let rect = CropRect {
                    top,
                    left,
                    height,
                    width,
                };
                let inner = ctx.decode_region(&jpeg, rect, &mut out).expect("region");
                let got = out.crop_view(inner).expect("fits");
                let want = full.crop_view(rect).expect("fits");
                for y in 0..height {
                    assert_eq!(
                        got.row(y),
                        want.row(y),
                        "subsamp {subsamp} {rect:?} row {y}"
                    );
                }
                // DCT-scaled: a region equals the whole image decoded at the same scale.
                for d in [2u8, 4, 8] {
                    let du = u32::from(d);
                    let whole = CropRect::full(101, 77);
                    let (_, used) = ctx
                        .decode_region_scaled(&jpeg, whole, 77 / du, 101 / du, &mut full_scaled)
                        .expect("scaled full");
                    assert_eq!(used, d);
                    let (inner, used) = ctx
                        .decode_region_scaled(&jpeg, rect, height / du, width / du, &mut out)
                        .expect("scaled region");
                    if used != d {
                        continue; // rect too small for this scale
                    }
                    let (l, r) = scaled_span(left, width, du, 101u32.div_ceil(du));
                    let (t, b) = scaled_span(top, height, du, 77u32.div_ceil(du));
                    let at_scale = CropRect {
                        top: t,
                        left: l,
                        height: b - t,
                        width: r - l,
                    };
                    assert_eq!(
                        (inner.height, inner.width),
                        (at_scale.height, at_scale.width)
                    );
                    let got = out.crop_view(inner).expect("fits");
                    let want = full_scaled.crop_view(at_scale).expect("fits");
                    for y in 0..at_scale.height {
                        assert_eq!(got.row(y), want.row(y), "subsamp {subsamp} 1/{d} {rect:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn handle_lifecycle_and_errors() {
        let mut t = Turbo::new(1 << 40).expect("init");
        assert_eq!(t.handle.get(tj::TJPARAM_TJPARAM_MAXPIXELS), 0);
        assert_eq!(t.handle.get(tj::TJPARAM_TJPARAM_SCANLIMIT), SCAN_LIMIT);
        // An invalid scaling factor is refused with a message, not a crash.
        match t.set_scaling(3) {
            Err(Error::Corrupt { detail, .. }) => assert!(detail.contains("scaling"), "{detail}"),
            other => panic!("expected an error, got {other:?}"),
        }
        // Cropping before any header was read is refused too.
        let region = Region {
            x: 0,
            y: 0,
            w: 1,
            h: 1,
        };
        assert!(t.set_cropping(Some(region)).is_err());
        assert!(t.set_cropping(None).is_ok());
        let frame = Frame {
            width: 1,
            height: 1,
            components: 3,
            precision: 8,
            sof: 0xC0,
            adobe_transform: None,
            scan_start: 0,
        };
        assert!(matches!(
            t.read_header(b"\xFF\xD8\xFF\xD9", &frame),
            Err(Error::Corrupt { .. })
        ));
        drop(t);
        // Many instances come and go without leaking or crashing.
        for _ in 0..100 {
            Turbo::new(10).expect("init");
        }
    }

    #[test]
    fn decompress_checks_the_buffer_first() {
        let mut t = Turbo::new(100).expect("init");
        let mut small = [0u8; 10];
        assert!(matches!(
            t.decompress(b"\xFF\xD8", &mut small, 2, 2, tj::TJPF_TJPF_RGB),
            Err(Error::InvalidArgument { .. })
        ));
    }

    #[test]
    fn plans() {
        let header = Header {
            width: 100,
            height: 50,
            subsamp: tj::TJSAMP_TJSAMP_420,
            colorspace: tj::TJCS_TJCS_YCbCr as c_int,
            lossless: false,
        };
        let rect = CropRect {
            top: 20,
            left: 37,
            height: 10,
            width: 20,
        };
        let p = Plan::region(&header, rect, 1);
        assert_eq!(
            p.region,
            Some(Region {
                x: 32,
                y: 18,
                w: 27,
                h: 14
            })
        );
        assert_eq!(
            p.inner,
            CropRect {
                top: 2,
                left: 5,
                height: 10,
                width: 20
            }
        );
        // Scaled by 1/4: 25x13 image, iMCU 4 px wide; rect edges 37/4=9.25->9, 57/4=14.25->14.
        let p = Plan::region(&header, rect, 4);
        assert_eq!(
            p.region,
            Some(Region {
                x: 4,
                y: 3,
                w: 12,
                h: 7
            })
        );
        assert_eq!(
            p.inner,
            CropRect {
                top: 2,
                left: 5,
                height: 3,
                width: 5
            }
        );
        // The whole image is not cropped.
        assert_eq!(
            Plan::region(&header, CropRect::full(100, 50), 1).region,
            None
        );
        // Unknown subsampling or lossless: no cropping, rect stays where it is.
        let odd = Header {
            subsamp: -1,
            ..header
        };
        let p = Plan::region(&odd, rect, 1);
        assert_eq!((p.region, p.inner), (None, rect));
        // Spans never collapse to zero and stay inside the scaled image.
        assert_eq!(scaled_span(99, 1, 8, 13), (12, 13));
        assert_eq!(scaled_span(0, 1, 8, 13), (0, 1));
        assert_eq!(scaled_span(3, 2, 8, 13), (0, 1));
    }

    #[test]
    fn message_classes() {
        assert!(is_warning_message(
            "Corrupt JPEG data: 12 extraneous bytes before marker 0xd9"
        ));
        assert!(!is_warning_message("Bogus Huffman table definition"));
        assert!(matches!(
            map_fatal("Unsupported JPEG process: SOF type 0xc5".into()),
            Error::Unsupported { .. }
        ));
        assert!(matches!(
            map_fatal("Bogus marker length".into()),
            Error::Corrupt { .. }
        ));
    }
}
