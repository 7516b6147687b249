//! Datasets, samplers, the worker pool and batch delivery of ferroloader.
//!
//! Data flow: a [`Sampler`] orders an epoch's samples (seeded shuffle, `DistributedSampler`
//! sharding); worker threads ([`Loader::iter`]) read each sample from a [`Source`] and run a
//! [`SampleProcessor`] on it, writing straight into its slot of a batch buffer taken from a ring;
//! complete batches come out of an [`EpochIter`] in order (or in completion order) as [`Batch`]es
//! that return their buffer to the ring when dropped. Every read and op runs between
//! [`OpHooks`] calls, where the profiler plugs in: with [`LoaderOptions::profile_mode`] set, each
//! worker records op spans ([`ProfileInstrument`]), the workers and the consumer record batch
//! events, and [`Loader::profile`] returns the [`Profile`](profiler::Profile) (Chrome trace and
//! summary come from the [`profiler`] crate).
//!
//! [`ImagePipeline`] plugs in the transforms crate's planned pipeline; the machinery itself must
//! not depend on any concrete image op (it sees only [`SampleProcessor`]), on the profiler's
//! internals (it sees only [`Instrument`] and the profiler's public recording calls) or on
//! Python.

#![warn(missing_docs)]

mod batch;
mod batch_op;
mod buffer;
pub mod dataset;
mod error;
mod host_memory;
mod image_pipeline;
mod loader;
mod options;
mod pipeline;
pub mod prepare;
pub mod process;
mod profile;
pub mod progress;
pub mod sampler;
pub mod shard_writer;
pub mod shards;

pub use ferroloader_profiler as profiler;
pub use ferroloader_transforms as transforms;

pub use batch::{Batch, BatchImages, BatchImagesMut, BatchTiming};
pub use batch_op::{BatchOp, BatchOps};
pub use dataset::{
    ByteColumn, Column, EncodedTable, FileList, FileListOptions, ImageArray, ImageFolder,
    ImageFolderOptions, InMemory, ListFormat, PathList, SharedBytes, Source, IMG_EXTENSIONS,
};
pub use error::{LoaderError, Result};
pub use host_memory::{HostMemory, PageLock};
pub use image_pipeline::ImagePipeline;
pub use loader::Loader;
pub use options::{Delivery, ErrorPolicy, LoaderOptions, MAX_NUM_WORKERS, MAX_PREFETCH_BATCHES};
pub use pipeline::{EpochIter, ResumePoint, SkippedSample};
pub use process::{
    in_op, AxisOrder, DType, Instrument, NoHooks, Op, OpHooks, SampleContext, SampleKey,
    SampleLayout, SampleProcessor, SlotMut, SlotParts, TransformOp,
};
pub use profile::{ProfileHooks, ProfileInstrument};
pub use sampler::{plan_repeats, Sampler, Shard};
