//! The promises every decode entry point and the pipeline-spec front end keep on any input, as
//! checks that return the first broken one. Shared (through `#[path]`) by the proptest targets
//! (`transforms/tests/fuzz_decode.rs`, `fuzz_spec.rs`) and the cargo-fuzz targets
//! (`fuzz/fuzz_targets/*.rs`), so the short run in `make test` and the long one in `make fuzz`
//! judge inputs the same way.
//!
//! Must not generate inputs (the callers do) nor read files: it takes bytes and JSON text.
//! The promises:
//! - every call returns `Ok` with sizes that agree with each other and with the pixel limit,
//!   or an error with a message that blames the data (never `InvalidArgument` for arguments
//!   taken from the image's own header);
//! - no panic in this workspace's code (a panic inside a third-party decoder, turned into
//!   `Error::Corrupt` by our `catch_unwind`, is allowed: [`install_panic_hook`] tells them apart);
//! - no call takes longer than [`SLOW`] (one still running after [`HANG`] aborts the process,
//!   naming it), and none allocates more than [`alloc_bound`] at once (a decode bomb must be
//!   refused from its header, not attempted): [`Tracking`] measures it;
//! - a context that saw a bad input still decodes a good image exactly;
//! - the EXIF orientation scan neither panics nor allocates more than a few KiB, and a context
//!   that transposes decodes (whole, and a region) exactly the plain decode transposed
//!   ([`check_exif`]).

// Each target uses a part of this file.
#![allow(dead_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::io::Write as _;
use std::sync::{Mutex, OnceLock};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use ferroloader_transforms::decode::exif::{self, Orientation};
use ferroloader_transforms::decode::{DecodeContext, DecodeOptions, Decoder, Format, ImageInfo};
use ferroloader_transforms::fused::OutputSlot;
use ferroloader_transforms::rng::sample_rng;
use ferroloader_transforms::spec::{Pipeline, PipelineSpec};
use ferroloader_transforms::{CropRect, Error, RgbImage};

/// The pixel limit the fuzz contexts decode under: above every image the inputs are built
/// from, small enough that a header claiming more is refused and the rest decodes quickly.
pub const MAX_PIXELS: u64 = 1 << 20;

/// A single decode call (or a whole pipeline sample) slower than this is a failure: the largest
/// input the targets build decodes in milliseconds, so only a hang or a quadratic path gets here.
pub const SLOW: Duration = Duration::from_secs(20);

/// The largest single allocation a call under `max_pixels` may make: the output image (3 bytes a
/// pixel), the 4-byte scratch and the decoders' own planes and coefficient buffers fit in 16
/// bytes a pixel; 64 MiB more covers tables, marker segments and the `image` crate's buffers.
pub fn alloc_bound(max_pixels: u64) -> usize {
    usize::try_from(max_pixels.saturating_mul(16)).unwrap_or(usize::MAX) + (64 << 20)
}

/// Requests above this are refused (the allocation fails and the process aborts, naming the
/// size) instead of being attempted: a decode bomb that got past the limit must not take the
/// machine's memory down while the test reports it.
const REFUSE_ABOVE: usize = 1 << 30;

thread_local! {
    /// The largest allocation this thread asked for since [`Tracking::reset`].
    static LARGEST: Cell<usize> = const { Cell::new(0) };
    /// Panics raised in this workspace's code on this thread since [`take_own_panics`].
    static OWN_PANICS: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

/// The system allocator, recording the largest request per thread. Each test binary and fuzz
/// target that includes this file installs it with `#[global_allocator]`.
#[derive(Debug)]
pub struct Tracking;

impl Tracking {
    /// Starts a new measurement on this thread.
    pub fn reset() {
        LARGEST.with(|l| l.set(0));
    }

    /// The largest allocation this thread asked for since [`Tracking::reset`].
    pub fn largest() -> usize {
        LARGEST.with(Cell::get)
    }

    fn record(size: usize) -> bool {
        // `try_with`: allocations during thread teardown, after the slot is gone, still work.
        let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
        size <= REFUSE_ABOVE
    }
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, or returns
// null (a failed allocation, which callers must handle) without touching memory.
unsafe impl GlobalAlloc for Tracking {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if !Self::record(layout.size()) {
            return std::ptr::null_mut();
        }
        // SAFETY: forwarded unchanged; the caller upholds `alloc`'s contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if !Self::record(layout.size()) {
            return std::ptr::null_mut();
        }
        // SAFETY: forwarded unchanged; the caller upholds `alloc_zeroed`'s contract.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` through this allocator, with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if !Self::record(new_size) {
            return std::ptr::null_mut();
        }
        // SAFETY: forwarded unchanged; the caller upholds `realloc`'s contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Whether a panic location lies in this workspace's code (the crate under test, these
/// checks, the fuzz targets) rather than in a third-party decoder.
pub fn is_own(location: &str) -> bool {
    [
        "transforms/src",
        "tests/support",
        "fuzz_targets",
        "transforms/tests",
    ]
    .iter()
    .any(|dir| location.contains(dir))
}

/// Installs a panic hook that records panics in this workspace's code (see
/// [`take_own_panics`]) and prints one line per panic instead of a backtrace: third-party
/// decoder panics are expected, and our `catch_unwind` turns them into errors.
/// `abort_on_own`: abort at once on a panic of ours (libFuzzer then reports the input),
/// even one our `catch_unwind` would have hidden.
pub fn install_panic_hook(abort_on_own: bool) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        std::panic::set_hook(Box::new(move |info| {
            let location = info
                .location()
                .map(|l| format!("{}:{}", l.file(), l.line()))
                .unwrap_or_default();
            let payload = info.payload();
            let message = payload
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
                .unwrap_or("?");
            let own = is_own(&location);
            eprintln!(
                "panic at {location} ({}): {message}",
                if own { "ours" } else { "third party" }
            );
            if own {
                if abort_on_own {
                    std::process::abort();
                }
                let _ =
                    OWN_PANICS.try_with(|p| p.borrow_mut().push(format!("{location}: {message}")));
            }
        }));
    });
}

/// Panics of ours recorded on this thread since the last call.
pub fn take_own_panics() -> Vec<String> {
    OWN_PANICS.with(|p| std::mem::take(&mut *p.borrow_mut()))
}

/// Where a region request lies, chosen by the generator, resolved against the image's size.
#[derive(Clone, Copy, Debug, Default)]
pub struct Probe {
    /// Seeds for left, top, width, height, taken modulo what fits.
    pub rect: [u32; 4],
    /// Ask for a rectangle that does not fit (one past the right edge).
    pub outside: bool,
    /// Minimum scaled size for `decode_region_scaled`, as seeds; `u32::MAX` and 0 pass through.
    pub min: [u32; 2],
}

impl Probe {
    /// A probe read from the last 13 bytes of `data` (fuzz targets), which still decode as
    /// part of the image: seeds stay plain image files, and a mutation there moves the region.
    pub fn from_tail(data: &[u8]) -> Probe {
        let Some(tail) = data.len().checked_sub(13).map(|at| &data[at..]) else {
            return Probe::default();
        };
        let word = |i: usize| u32::from(u16::from_le_bytes([tail[i], tail[i + 1]]));
        let min = |w: u32| match w {
            0xFFFF => u32::MAX,
            w => w,
        };
        Probe {
            rect: [word(0), word(2), word(4), word(6)],
            outside: tail[8] == 0x5A,
            min: [min(word(9)), min(word(11))],
        }
    }

    fn resolve(&self, width: u32, height: u32) -> CropRect {
        if width == 0 || height == 0 {
            return CropRect {
                top: 0,
                left: 0,
                height: 1,
                width: 1,
            };
        }
        let left = self.rect[0] % width;
        let top = self.rect[1] % height;
        let mut rect = CropRect {
            left,
            top,
            width: 1 + self.rect[2] % (width - left),
            height: 1 + self.rect[3] % (height - top),
        };
        if self.outside {
            rect.left = width - rect.width + 1;
        }
        rect
    }

    fn min_size(&self, rect: CropRect) -> (u32, u32) {
        let pick = |seed: u32, side: u32| match seed {
            0 | u32::MAX => seed,
            s => s % (side + 1),
        };
        (
            pick(self.min[0], rect.height),
            pick(self.min[1], rect.width),
        )
    }
}

/// What one input did to one context, for the callers' statistics and extra properties.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// `info`'s answer.
    pub info: Result<ImageInfo, String>,
    /// The full decode's answer; `Err` holds the error.
    pub decoded: Result<ImageInfo, ErrorKind>,
}

/// An error's kind, to compare answers without comparing messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// `Error::UnknownFormat`.
    UnknownFormat,
    /// `Error::Truncated`.
    Truncated,
    /// `Error::Corrupt`.
    Corrupt,
    /// `Error::Unsupported`.
    Unsupported,
    /// `Error::TooLarge`.
    TooLarge,
    /// `Error::InvalidArgument`.
    InvalidArgument,
    /// A kind added after these checks were written.
    Other,
}

impl ErrorKind {
    /// The kind of `e`.
    pub fn of(e: &Error) -> ErrorKind {
        match e {
            Error::UnknownFormat { .. } => ErrorKind::UnknownFormat,
            Error::Truncated { .. } => ErrorKind::Truncated,
            Error::Corrupt { .. } => ErrorKind::Corrupt,
            Error::Unsupported { .. } => ErrorKind::Unsupported,
            Error::TooLarge { .. } => ErrorKind::TooLarge,
            Error::InvalidArgument { .. } => ErrorKind::InvalidArgument,
            _ => ErrorKind::Other,
        }
    }
}

/// An error that blames the data: a kind other than `InvalidArgument`, with a message.
fn data_error(call: &str, e: &Error) -> Result<(), String> {
    if e.to_string().trim().is_empty() {
        return Err(format!("{call}: empty message for {e:?}"));
    }
    if matches!(e, Error::InvalidArgument { .. }) {
        return Err(format!("{call}: bad data reported as a bad argument: {e}"));
    }
    Ok(())
}

/// A call still running after this long is taken for a hang: the process aborts, naming it,
/// instead of stalling `make test` without a word (libFuzzer's `-timeout` does the same there).
pub const HANG: Duration = Duration::from_secs(120);

/// The calls in flight, by thread, for the watchdog.
fn in_flight() -> &'static Mutex<HashMap<ThreadId, (Instant, String)>> {
    static IN_FLIGHT: OnceLock<Mutex<HashMap<ThreadId, (Instant, String)>>> = OnceLock::new();
    IN_FLIGHT.get_or_init(|| {
        std::thread::spawn(|| loop {
            std::thread::sleep(Duration::from_secs(1));
            let calls = in_flight().lock().map(|c| c.clone()).unwrap_or_default();
            if let Some((_, call)) = calls.values().find(|(start, _)| start.elapsed() > HANG) {
                // Past the test harness' output capture, which would die with the process.
                let _ = writeln!(
                    std::io::stderr(),
                    "{call} has not returned after {HANG:?}: a hang"
                );
                std::process::abort();
            }
        });
        Mutex::default()
    })
}

/// Runs `f`, failing when it is slower than [`SLOW`] or allocates more than `bound` at once,
/// and aborting when it has not returned after [`HANG`].
fn bounded<T>(call: &str, bound: usize, f: impl FnOnce() -> T) -> Result<T, String> {
    let id = std::thread::current().id();
    if let Ok(mut calls) = in_flight().lock() {
        calls.insert(id, (Instant::now(), call.to_string()));
    }
    Tracking::reset();
    let start = Instant::now();
    let value = f();
    let (elapsed, largest) = (start.elapsed(), Tracking::largest());
    if let Ok(mut calls) = in_flight().lock() {
        calls.remove(&id);
    }
    if elapsed > SLOW {
        return Err(format!("{call}: took {elapsed:?}"));
    }
    if largest > bound {
        return Err(format!(
            "{call}: allocated {largest} bytes at once (bound {bound})"
        ));
    }
    let own = take_own_panics();
    if !own.is_empty() {
        return Err(format!("{call}: panicked in our code: {own:?}"));
    }
    Ok(value)
}

/// `out` holds a `width` x `height` image within the pixel limit.
fn check_image(
    call: &str,
    out: &RgbImage,
    width: u32,
    height: u32,
    limit: u64,
) -> Result<(), String> {
    let (w, h) = (out.width(), out.height());
    if (w, h) != (width, height) {
        return Err(format!(
            "{call}: returned {width}x{height}, decoded {w}x{h}"
        ));
    }
    if out.as_raw().len() != 3 * w as usize * h as usize || w == 0 || h == 0 {
        return Err(format!(
            "{call}: {w}x{h} image of {} bytes",
            out.as_raw().len()
        ));
    }
    if u64::from(w) * u64::from(h) > limit {
        return Err(format!(
            "{call}: {w}x{h} decoded past the limit of {limit} pixels"
        ));
    }
    Ok(())
}

/// Every entry point of `ctx` on `bytes`, with a region chosen by `probe`: the promises in the
/// module doc, but the context-reuse one (see [`check_still_exact`]).
pub fn check_decode(
    ctx: &mut DecodeContext,
    bytes: &[u8],
    probe: Probe,
    out: &mut RgbImage,
) -> Result<Outcome, String> {
    let limit = ctx.options().max_pixels;
    let bound = alloc_bound(limit);
    let jpeg_turbo = ctx.options().decoder == Decoder::Turbo;
    let info = bounded("info", bound, || ctx.info(bytes))?;
    if let Err(e) = &info {
        data_error("info", e)?;
    }
    let decoded = bounded("decode", bound, || ctx.decode(bytes, out))?;
    match (&info, &decoded) {
        (Err(e), Ok(d)) => {
            return Err(format!("info refused ({e}), decode accepted as {d:?}"));
        }
        (Ok(i), Ok(d)) => {
            if i != d {
                return Err(format!("info says {i:?}, decode {d:?}"));
            }
            check_image("decode", out, d.width, d.height, limit)?;
        }
        (Ok(_), Err(e)) => data_error("decode", e)?,
        (Err(_), Err(e)) => data_error("decode", e)?,
    }
    if let Ok(i) = &info {
        if u64::from(i.width) * u64::from(i.height) > limit && decoded.is_ok() {
            return Err(format!("{i:?} decoded past the limit of {limit} pixels"));
        }
    }

    let (w, h) = info.as_ref().map(|i| (i.width, i.height)).unwrap_or((1, 1));
    let rect = probe.resolve(w, h);
    let fits = info.is_ok() && rect.fits_in(w, h);
    let reaches_bottom = rect.bottom() == h;
    let region = bounded("decode_region", bound, || {
        ctx.decode_region(bytes, rect, out)
    })?;
    match &region {
        Ok(inner) => {
            if !fits {
                return Err(format!("decode_region accepted {rect:?} outside {w}x{h}"));
            }
            // libjpeg-turbo stops reading a sequential JPEG below the region, so damage there
            // is not seen (see `DecodeContext::decode_region`); anything the region covers is.
            if let (Err(e), true) = (&decoded, reaches_bottom) {
                return Err(format!(
                    "decode refused ({e}), decode_region to the last row accepted"
                ));
            }
            if (inner.width, inner.height) != (rect.width, rect.height)
                || !inner.fits_in(out.width(), out.height())
            {
                return Err(format!(
                    "decode_region: {rect:?} came back as {inner:?} in a {}x{} image",
                    out.width(),
                    out.height()
                ));
            }
            check_image("decode_region", out, out.width(), out.height(), limit)?;
        }
        Err(e) if fits => data_error("decode_region", e)?,
        Err(_) => {}
    }

    let (min_h, min_w) = probe.min_size(rect);
    let scaled = bounded("decode_region_scaled", bound, || {
        ctx.decode_region_scaled(bytes, rect, min_h, min_w, out)
    })?;
    match &scaled {
        Ok((inner, scale)) => {
            let s = u32::from(*scale);
            if !fits {
                return Err(format!(
                    "decode_region_scaled accepted {rect:?} outside {w}x{h}"
                ));
            }
            // libjpeg-turbo stops reading a sequential JPEG below the region, so damage there
            // is not seen (see `DecodeContext::decode_region`); anything the region covers is.
            if let (Err(e), true) = (&decoded, reaches_bottom) {
                return Err(format!(
                    "decode refused ({e}), decode_region_scaled to the last row accepted"
                ));
            }
            if ![1, 2, 4, 8].contains(&s) || !inner.fits_in(out.width(), out.height()) {
                return Err(format!(
                    "decode_region_scaled: {inner:?} at 1/{s} in a {}x{} image",
                    out.width(),
                    out.height()
                ));
            }
            // Still a downscale to at least the minimum, and the scaled rect is the rect
            // divided by the scale, within rounding.
            let near = |got: u32, full: u32| got.abs_diff(full / s) <= 1;
            let keeps_min = s == 1
                || (u64::from(rect.height) >= u64::from(min_h) * u64::from(s)
                    && u64::from(rect.width) >= u64::from(min_w) * u64::from(s));
            if !keeps_min || !near(inner.width, rect.width) || !near(inner.height, rect.height) {
                return Err(format!(
                    "decode_region_scaled: {rect:?} (min {min_h}x{min_w}) came back as \
                     {inner:?} at 1/{s}"
                ));
            }
            if (s == 1 || !jpeg_turbo) && (inner.width, inner.height) != (rect.width, rect.height) {
                return Err(format!(
                    "decode_region_scaled: {rect:?} at 1/1 is {inner:?}"
                ));
            }
        }
        Err(e) if fits => data_error("decode_region_scaled", e)?,
        Err(_) => {}
    }
    Ok(Outcome {
        info: info.map_err(|e| e.to_string()),
        decoded: decoded.map_err(|e| ErrorKind::of(&e)),
    })
}

/// A context that saw bad input decodes `good` to `expected`, as a fresh one does.
pub fn check_still_exact(
    ctx: &mut DecodeContext,
    good: &[u8],
    expected: &RgbImage,
    out: &mut RgbImage,
) -> Result<(), String> {
    match ctx.decode(good, out) {
        Ok(_) if out == expected => Ok(()),
        Ok(_) => Err("after this input, a good image decodes to other pixels".to_string()),
        Err(e) => Err(format!("after this input, a good image fails: {e}")),
    }
}

/// One context per JPEG backend, under [`MAX_PIXELS`].
pub fn contexts() -> [DecodeContext; 2] {
    [Decoder::Turbo, Decoder::Zune].map(|decoder| {
        DecodeContext::new(
            DecodeOptions::default()
                .decoder(decoder)
                .max_pixels(MAX_PIXELS),
        )
        .expect("a decode context")
    })
}

/// The pixel limit pipelines are run under here, whatever the spec says: a spec may ask for
/// Pillow's 179 million pixels, but the image it runs on is small.
const SPEC_RUN_PIXELS: u64 = 1 << 20;

/// A spec's JSON through `serde_json`, `Pipeline::new` and, when accepted, one sample of each
/// execution on `image`: every step is `Ok` or a clear error, none panics, and an accepted
/// spec's sample has the shape the pipeline reports.
pub fn check_spec_json(json: &str, image: &[u8]) -> Result<bool, String> {
    let parsed = bounded("parse", alloc_bound(SPEC_RUN_PIXELS), || {
        serde_json::from_str::<PipelineSpec>(json)
    })?;
    match parsed {
        Ok(spec) => check_spec(spec, image),
        Err(e) if e.to_string().trim().is_empty() => Err("parse error without a message".into()),
        Err(_) => Ok(false),
    }
}

/// [`check_spec_json`] from the parsed spec on: whether `Pipeline::new` accepted it.
pub fn check_spec(spec: PipelineSpec, image: &[u8]) -> Result<bool, String> {
    let bound = alloc_bound(SPEC_RUN_PIXELS);
    let planned = bounded("Pipeline::new", bound, || Pipeline::new(spec.clone()))?;
    let pipeline = match planned {
        Ok(p) => p,
        Err(e) if e.to_string().trim().is_empty() => {
            return Err(format!("Pipeline::new: empty message for {e:?}"))
        }
        Err(_) => return Ok(false),
    };
    let (h, w) = pipeline.output_size();
    let shape = pipeline.sample_shape();
    let len = pipeline.sample_len();
    let channels = pipeline.channels();
    if h == 0
        || w == 0
        || !matches!(channels, 1 | 3)
        || shape.iter().product::<usize>() != len
        || len != channels * h as usize * w as usize
    {
        return Err(format!(
            "accepted {spec:?} with output {h}x{w}, shape {shape:?}, {len} elements"
        ));
    }
    // The output is a sample every batch slot holds: it must not be larger than the images the
    // spec lets through.
    let pixels = u64::from(h) * u64::from(w);
    if pixels > spec.max_pixels {
        return Err(format!(
            "accepted an output of {h}x{w}, over its own limit of {} pixels",
            spec.max_pixels
        ));
    }
    if pixels > SPEC_RUN_PIXELS {
        // Accepted and plausible (a spec may ask for a large output), too large to run here.
        return Ok(true);
    }
    // Run it on a small image under a small limit: the spec may allow more, the image has less.
    let limit = spec.max_pixels.min(SPEC_RUN_PIXELS);
    let limited = spec.max_pixels(limit);
    let pipeline = match Pipeline::new(limited) {
        Ok(p) => p,
        // Stage crops can make the output smaller than an intermediate image (the geometry's),
        // which the lower limit rightly refuses: accepted, too large to run here.
        Err(Error::InvalidArgument {
            name: "size",
            reason,
        }) if reason.contains("max_pixels") => return Ok(true),
        Err(e) => return Err(format!("accepted, then refused under a lower limit: {e}")),
    };
    let mut ctx = match pipeline.new_context() {
        Ok(ctx) => ctx,
        Err(e) => {
            data_error_or_arg("new_context", &e)?;
            return Ok(true);
        }
    };
    let float = pipeline.output_kind().is_f32();
    let (mut f, mut u) = (Vec::new(), Vec::new());
    for index in 0..2 {
        let mut rng = sample_rng(7, 0, index);
        let slot = if float {
            f.resize(len, 0f32);
            OutputSlot::F32(&mut f)
        } else {
            u.resize(len, 0u8);
            OutputSlot::U8(&mut u)
        };
        let ran = bounded("Pipeline::run", bound, || {
            pipeline.run(image, &mut rng, &mut ctx, slot, &mut ())
        })?;
        match ran {
            Ok(report) => {
                if !report.crop.fits_in(report.width, report.height) {
                    return Err(format!("run: crop {:?} outside the image", report.crop));
                }
            }
            Err(e) => data_error_or_arg("run", &e)?,
        }
    }
    Ok(true)
}

/// A run of an accepted spec may still refuse an image (a center crop larger than it is an
/// `InvalidArgument` naming `size`), but never without a message.
fn data_error_or_arg(call: &str, e: &Error) -> Result<(), String> {
    if e.to_string().trim().is_empty() {
        return Err(format!("{call}: empty message for {e:?}"));
    }
    Ok(())
}

/// The stored pixel that output pixel `(x, y)` of a `w` x `h` image transposed for
/// `orientation` reads, from `PIL.Image.transpose`'s definitions of the method
/// `exif_transpose` picks (not from the decoder's tables).
fn stored_of(x: usize, y: usize, w: usize, h: usize, orientation: Orientation) -> (usize, usize) {
    match orientation.value() {
        2 => (w - 1 - x, y),         // FLIP_LEFT_RIGHT
        3 => (w - 1 - x, h - 1 - y), // ROTATE_180
        4 => (x, h - 1 - y),         // FLIP_TOP_BOTTOM
        5 => (y, x),                 // TRANSPOSE
        6 => (y, h - 1 - x),         // ROTATE_270 (clockwise)
        7 => (w - 1 - y, h - 1 - x), // TRANSVERSE
        8 => (w - 1 - y, x),         // ROTATE_90 (counter-clockwise)
        _ => (x, y),
    }
}

/// `src` (`width` x `height`, rows `stride` bytes apart) transposed for `orientation`.
fn transposed_reference(
    src: &[u8],
    width: u32,
    height: u32,
    stride: usize,
    orientation: Orientation,
) -> RgbImage {
    let (w, h) = (width as usize, height as usize);
    let (ow, oh) = orientation.oriented_size(width, height);
    let mut out = RgbImage::new();
    let dst = out.reset(ow, oh);
    for y in 0..oh as usize {
        for x in 0..ow as usize {
            let (sx, sy) = stored_of(x, y, w, h, orientation);
            let d = 3 * (y * ow as usize + x);
            let s = sy * stride + 3 * sx;
            dst[d..d + 3].copy_from_slice(&src[s..s + 3]);
        }
    }
    out
}

/// The rectangle of the stored image that `rect` of the transposed one reads.
fn stored_rect(rect: CropRect, width: u32, height: u32, orientation: Orientation) -> CropRect {
    let (w, h) = (width as usize, height as usize);
    let a = stored_of(rect.left as usize, rect.top as usize, w, h, orientation);
    let b = stored_of(
        rect.right() as usize - 1,
        rect.bottom() as usize - 1,
        w,
        h,
        orientation,
    );
    let (left, right) = (a.0.min(b.0) as u32, a.0.max(b.0) as u32);
    let (top, bottom) = (a.1.min(b.1) as u32, a.1.max(b.1) as u32);
    CropRect {
        top,
        left,
        height: bottom - top + 1,
        width: right - left + 1,
    }
}

thread_local! {
    /// libjpeg-turbo contexts without and with the EXIF transposition, reused across inputs.
    static EXIF_CONTEXTS: RefCell<Option<[DecodeContext; 2]>> = const { RefCell::new(None) };
}

/// The EXIF promises on `bytes`: [`exif::orientation`] returns quickly without panicking or
/// allocating more than a few KiB; a transposing context says the orientation and the
/// transposed size in `info`, accepts and refuses what the plain one does, decodes to the
/// plain decode transposed, and decodes a region (chosen by `probe` in the transposed frame)
/// to exactly the plain context's region decode of the stored rectangle under it, transposed
/// (on a valid file that is the transposed image's crop, by `decode_region`'s own guarantee;
/// on a corrupt one libjpeg's output depends on where the region starts, so the plain region
/// is the reference).
pub fn check_exif(bytes: &[u8], probe: Probe) -> Result<(), String> {
    let orientation = bounded("exif::orientation", 64 << 10, || exif::orientation(bytes))?;
    EXIF_CONTEXTS.with(|slot| {
        let mut slot = slot.borrow_mut();
        let [plain, exif_ctx] = slot.get_or_insert_with(|| {
            [false, true].map(|on| {
                DecodeContext::new(
                    DecodeOptions::default()
                        .max_pixels(MAX_PIXELS)
                        .exif_transpose(on),
                )
                .expect("a decode context")
            })
        });
        let bound = alloc_bound(MAX_PIXELS);
        let mut stored = RgbImage::new();
        let mut out = RgbImage::new();
        let base = bounded("decode", bound, || plain.decode(bytes, &mut stored))?;
        let info = bounded("decode (exif)", bound, || exif_ctx.decode(bytes, &mut out))?;
        let (base, info) = match (base, info) {
            (Ok(b), Ok(i)) => (b, i),
            (Err(_), Err(_)) => return Ok(()),
            (b, i) => return Err(format!("plain decode {b:?}, transposing decode {i:?}")),
        };
        // A TIFF is transposed by both (as Pillow loads it); anything else only by one.
        let tiff = base.format == Format::Tiff;
        let applied = if tiff {
            Orientation::Normal
        } else {
            orientation
        };
        if info.orientation != orientation || (tiff && base.orientation != orientation) {
            return Err(format!(
                "scan says {orientation:?}, decodes report {:?} / {:?}",
                base.orientation, info.orientation
            ));
        }
        let expected = transposed_reference(
            stored.as_raw(),
            base.width,
            base.height,
            3 * base.width as usize,
            applied,
        );
        if out != expected {
            return Err(format!(
                "{orientation:?}: the transposing decode ({}x{}) is not the plain one transposed",
                out.width(),
                out.height()
            ));
        }
        let header = bounded("info (exif)", bound, || exif_ctx.info(bytes))?;
        if header.as_ref().ok() != Some(&info) {
            return Err(format!("info says {header:?}, decode {info:?}"));
        }
        let rect = probe.resolve(info.width, info.height);
        if !rect.fits_in(info.width, info.height) {
            return Ok(());
        }
        let mut region = RgbImage::new();
        let inner = bounded("decode_region (exif)", bound, || {
            exif_ctx.decode_region(bytes, rect, &mut region)
        })?
        .map_err(|e| format!("decode_region (exif) of {rect:?}: {e}"))?;
        let got = region.crop_view(inner).map_err(|e| e.to_string())?;
        let under = stored_rect(rect, base.width, base.height, applied);
        let plain_inner = plain
            .decode_region(bytes, under, &mut stored)
            .map_err(|e| format!("plain decode_region of {under:?}: {e}"))?;
        let mut crop = RgbImage::new();
        stored
            .crop_view(plain_inner)
            .map_err(|e| e.to_string())?
            .to_image(&mut crop);
        let want = transposed_reference(
            crop.as_raw(),
            crop.width(),
            crop.height(),
            3 * crop.width() as usize,
            applied,
        );
        if (want.width(), want.height()) != (rect.width, rect.height) {
            return Err(format!(
                "{rect:?} maps to {under:?}, which transposes to another size"
            ));
        }
        if (0..rect.height).any(|y| got.row(y) != want.view().row(y)) {
            return Err(format!(
                "{orientation:?}: decode_region (exif) of {rect:?} differs from the crop"
            ));
        }
        Ok(())
    })
}
