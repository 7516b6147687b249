//! A decode context stays usable after a bad image: the next good image decodes exactly as on
//! a fresh context, on every decode path.

use ferroloader_transforms::decode::{DecodeContext, DecodeOptions, Decoder};
use ferroloader_transforms::{CropRect, RgbImage};

use crate::fixtures;

fn fixture(name: &str) -> Vec<u8> {
    fixtures::read_fixture("decode", name)
}

#[test]
fn good_images_decode_exactly_after_every_kind_of_bad_one() {
    let good = fixture("jpeg_420_q75.jpg");
    let rect = CropRect {
        top: 40,
        left: 50,
        height: 200,
        width: 180,
    };
    for decoder in [Decoder::Turbo, Decoder::Zune] {
        let mut fresh = DecodeContext::new(DecodeOptions::default().decoder(decoder)).expect("ctx");
        let mut expected_full = RgbImage::new();
        fresh
            .decode(&good, &mut expected_full)
            .expect("good decodes");
        let mut expected_region = RgbImage::new();
        let inner = fresh
            .decode_region(&good, rect, &mut expected_region)
            .expect("region");
        let expected_region = expected_region
            .crop_view(inner)
            .expect("inner")
            .row(0)
            .to_vec();

        let mut ctx = DecodeContext::new(DecodeOptions::default().decoder(decoder)).expect("ctx");
        let mut img = RgbImage::new();
        for bad in [
            "bad_jpeg_corrupt_dht.jpg",
            "bad_jpeg_truncated_half.jpg",
            "bad_jpeg_truncated_after_header.jpg",
            "bad_jpeg_huge_sof.jpg",
        ] {
            // Some of these decode with libjpeg's warnings, as in Pillow; what matters is the
            // next image.
            let _ = ctx.decode(&fixture(bad), &mut img);
            ctx.decode(&good, &mut img)
                .expect("good decodes after a bad one");
            assert!(img == expected_full, "{decoder:?}: full decode after {bad}");
            let _ = ctx.decode_region(&fixture(bad), rect, &mut img);
            let inner = ctx
                .decode_region(&good, rect, &mut img)
                .expect("region after a bad one");
            assert_eq!(
                img.crop_view(inner).expect("inner").row(0),
                &expected_region[..],
                "{decoder:?}: region decode after {bad}"
            );
        }
    }
}
