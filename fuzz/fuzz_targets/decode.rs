//! libFuzzer target: the input is an image file; every decode entry point (`info`, `decode`,
//! `decode_region`, `decode_region_scaled`) of both JPEG backends must keep the promises of
//! `tests/support/fuzz_props.rs` (the EXIF transposition's among them), and a context that saw the input must still decode a good
//! image exactly. The region asked for is chosen by the input's last bytes, so seeds are plain
//! image files.

#![no_main]

use std::sync::OnceLock;

use ferroloader_transforms::RgbImage;
use libfuzzer_sys::fuzz_target;

#[path = "../../tests/support/fuzz_props.rs"]
mod fuzz_props;

#[global_allocator]
static ALLOC: fuzz_props::Tracking = fuzz_props::Tracking;

/// A tiny baseline JPEG (17x9, 4:2:0, from `scripts/fixtures_decode.py`), inline so the
/// target needs no fixture files, and what each backend decodes it to.
const GOOD: &[u8] = include_bytes!("../seeds/good_17x9_420.jpg");

fn expected() -> &'static [RgbImage; 2] {
    static EXPECTED: OnceLock<[RgbImage; 2]> = OnceLock::new();
    EXPECTED.get_or_init(|| {
        fuzz_props::contexts().map(|mut ctx| {
            let mut img = RgbImage::new();
            ctx.decode(GOOD, &mut img).expect("the good image decodes");
            img
        })
    })
}

fuzz_target!(
    init: {
        // Replaces libfuzzer-sys' hook, which aborts on every panic: third-party decoder
        // panics are caught and reported as errors by design; ours abort (a finding).
        fuzz_props::install_panic_hook(true);
        expected();
    },
    |data: &[u8]| {
        let probe = fuzz_props::Probe::from_tail(data);
        let mut out = RgbImage::new();
        if let Err(broken) = fuzz_props::check_exif(data, probe) {
            panic!("{broken}");
        }
        for (i, mut ctx) in fuzz_props::contexts().into_iter().enumerate() {
            if let Err(broken) = fuzz_props::check_decode(&mut ctx, data, probe, &mut out) {
                panic!("{broken}");
            }
            if let Err(broken) = fuzz_props::check_still_exact(&mut ctx, GOOD, &expected()[i], &mut out) {
                panic!("{broken}");
            }
        }
    }
);
