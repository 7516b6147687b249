//! Datasets, samplers, the worker pool and batch delivery (filled in by the loader issue).
//!
//! Runs the transforms inside profiler spans; must not depend on Python.

pub use ferroloader_profiler as profiler;
pub use ferroloader_transforms as transforms;
