//! ferroloader: a native image-classification data loader with a profiler built into every op.
//!
//! This umbrella crate only re-exports the workspace crates; it holds no logic.

pub use ferroloader_loader as loader;
pub use ferroloader_profiler as profiler;
pub use ferroloader_transforms as transforms;
