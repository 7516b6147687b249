//! libFuzzer target: the input is spec JSON; parsing, planning and (when accepted) running it on
//! a small JPEG must keep the promises of `tests/support/fuzz_props.rs`.

#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../tests/support/fuzz_props.rs"]
mod fuzz_props;

#[global_allocator]
static ALLOC: fuzz_props::Tracking = fuzz_props::Tracking;

/// What accepted specs run on (17x9, 4:2:0; inline so the target needs no fixture files).
const IMAGE: &[u8] = include_bytes!("../seeds/good_17x9_420.jpg");

fuzz_target!(
    init: {
        fuzz_props::install_panic_hook(true);
    },
    |data: &[u8]| {
        // serde_json takes bytes too, but a spec comes from text: non-UTF-8 is not a spec.
        let Ok(json) = std::str::from_utf8(data) else { return };
        if let Err(broken) = fuzz_props::check_spec_json(json, IMAGE) {
            panic!("{broken}");
        }
    }
);
