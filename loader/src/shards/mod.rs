//! WebDataset tar shards as a [`Source`](crate::Source): from local disk, HTTP(S) or object
//! storage (S3 and S3-compatible stores, GCS, Azure), with an index or scanned once.
//!
//! - [`url`]: brace patterns and where each URL lives.
//! - [`index`]: the shard index format (`index.json`), shared with the shard writer.
//! - [`members`]: a tar's members grouped into samples (WebDataset's key rule).
//! - [`order`]: one rank's epoch order (shard shuffle, rank split, shuffle buffer).
//! - [`store`]: bytes from disk or a store, with retries.
//! - [`aws_profile`]: the S3 settings of an AWS profile (`~/.aws/credentials`, `~/.aws/config`).
//! - [`cache`]: the optional local shard cache.
//! - [`WebDataset`]: the source, with its read-ahead fetcher.
//!
//! Nothing here decodes images or knows about batches: the loader reads sample bytes through
//! [`Source::read`](crate::Source::read) as from any other dataset.

pub mod aws_profile;
pub mod cache;
pub mod index;
pub mod members;
pub mod order;
pub mod store;
pub mod url;
mod webdataset;

pub use webdataset::{WebDataset, WebDatasetOptions};
