//! This crate's integration tests as one binary, each file a module (its doc says what it
//! checks): one build and link of the crate and its dependencies where there were twenty.
//! `cargo test -p ferroloader-transforms --test suite resize_parity` runs one file's tests.
//! The two proptest targets (`fuzz_decode`, `fuzz_spec`) stay binaries of their own: they
//! install a global allocator of their own (`fuzz_props::Tracking`), and a binary has one.

#[path = "support/counting_alloc.rs"]
mod counting_alloc;
#[path = "../../tests/support/fixtures.rs"]
mod fixtures;
#[path = "support/rgb_corpus.rs"]
mod rgb_corpus;
#[path = "support/scripted.rs"]
mod scripted;
#[path = "support/stage_pipeline.rs"]
mod stage_pipeline;

mod augment_pipeline;
mod augmix_pipeline;
mod choice_pipeline;
mod color_parity;
mod crop_props;
mod decode_mutations;
mod decode_parity;
mod decode_recovery;
mod exif_pipeline;
mod geometric_pipeline;
mod geometry_parity;
mod keep_ratio_pipeline;
mod noise_pipeline;
mod pipeline;
mod policy_draws;
mod policy_pipeline;
mod resize_parity;
mod standard_normals;
mod timm_erasing_pipeline;
mod timm_pipeline;
mod timm_rrc_pipeline;
