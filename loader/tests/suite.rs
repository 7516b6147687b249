//! This crate's integration tests that may share a process, as one binary, each file a module
//! (its doc says what it checks): one build and link of the crate and its dependencies where
//! there were six. `cargo test -p ferroloader-loader --test suite webdataset` runs one file's
//! tests. `threads` and `memory` stay binaries of their own: they measure the whole process
//! (its threads; its resident memory, under a global allocator of their own).

mod common;
#[path = "../../tests/support/fixtures.rs"]
mod fixtures;

mod datasets;
mod images;
mod pipeline;
mod profile;
mod repeats;
mod webdataset;
