//! torchvision's augmentations as kernels over packed 8-bit RGB pixels (and, for
//! `RandomErasing`, over a CHW float tensor), with Pillow's arithmetic wherever torchvision hands
//! the op a PIL image.
//!
//! - [`color`]: point ops and blends (ImageOps LUTs, ImageEnhance, grayscale, hue).
//! - [`geometry`]: affine maps with a fill (rotate, shear, translate), flips, padding, blur,
//!   erasing.
//! - [`policy`]: the random draws of the policies (TrivialAugmentWide, RandAugment,
//!   AutoAugment, AugMix) and of the random single ops, as torchvision makes them.
//!
//! Kernels take their parameters already drawn (so parity tests inject torchvision's) and write
//! in place or into caller-owned scratch: must not allocate per sample once warm, draw random
//! numbers themselves, or know about threads, files or the profiler.

pub mod color;
pub mod geometry;
pub mod policy;
