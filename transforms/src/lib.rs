//! torchvision's image-classification ops over reusable buffers.
//!
//! Must not spawn threads, touch files or depend on the profiler: every function here takes
//! bytes or pixels and writes pixels or tensors, so the loader decides where and when it runs.

pub mod augment;
pub mod batch_mix;
mod cpu;
pub mod crop;
pub mod decode;
pub mod encode;
pub mod error;
pub mod fused;
pub mod image;
pub mod resize;
pub mod rng;
pub mod spec;
pub mod tensor;

pub use error::{Error, Result};
pub use image::{CropRect, RgbImage, RgbView};
