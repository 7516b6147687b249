//! torchvision's augmentations as kernels over packed 8-bit RGB pixels (and, for
//! `RandomErasing`, over a CHW float tensor), with Pillow's arithmetic wherever torchvision hands
//! the op a PIL image.
//!
//! - [`color`]: point ops and blends (ImageOps LUTs, ImageEnhance, grayscale, hue).
//! - [`geometry`]: affine maps with a fill (rotate, shear, translate), flips, padding, blur,
//!   erasing.
//! - [`tensor_color`], [`grid_sample`]: the same ops with torch's *tensor* arithmetic
//!   (truncating float32 blends, `grid_sample` warps), for the ops torchvision runs on a uint8
//!   tensor; [`augmix`] runs AugMix's chains with them and mixes them in float32;
//!   [`elastic`] makes `ElasticTransform`'s displacement field, which [`grid_sample`] samples.
//! - [`box_blur`]: Pillow's `ImageFilter.GaussianBlur` (extended box blurs), for timm's
//!   `GaussianBlur` ops.
//! - [`timm_mix`]: timm's `AugMixAugment` mix: a float32 accumulation and Pillow's `Image.blend`.
//! - [`policy`]: the random draws of the policies (TrivialAugmentWide, RandAugment,
//!   AutoAugment, AugMix) and of the random single ops, as torchvision makes them.
//!
//! Kernels take their parameters already drawn (so parity tests inject torchvision's) and write
//! in place or into caller-owned scratch: must not allocate per sample once warm, draw random
//! numbers themselves, or know about threads, files or the profiler.

pub mod augmix;
pub mod box_blur;
pub mod color;
pub mod elastic;
pub(crate) mod fma;
pub mod geometry;
pub mod grid_sample;
pub mod policy;
pub mod tensor_color;
pub mod timm_mix;
