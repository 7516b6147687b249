//! The parity tests' fixture sets (`make fixtures`): a `manifest.json` and packed RGB sources,
//! read the same way by each test that uses it (a module of `tests/suite.rs`, beside the shared
//! `fixtures` module).

use std::path::{Path, PathBuf};

use ferroloader_transforms::RgbImage;
use serde::de::DeserializeOwned;
use serde::Deserialize;

/// One packed RGB source of a fixture set, as its manifest lists it.
#[derive(Clone, Debug, Deserialize)]
pub struct ImageEntry {
    /// What the cases call it.
    pub name: String,
    /// Its file in the set's folder.
    pub file: String,
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
}

/// The folder of fixture set `set` and its parsed `manifest.json`; a missing set fails saying
/// to run `make fixtures`.
pub fn manifest<T: DeserializeOwned>(set: &str) -> (PathBuf, T) {
    let dir = crate::fixtures::fixture_dir(set, "make fixtures");
    let text = std::fs::read_to_string(dir.join("manifest.json")).unwrap_or_else(|e| {
        panic!(
            "no {set} fixtures at {} ({e}): run `make fixtures`",
            dir.display()
        )
    });
    let manifest = serde_json::from_str(&text).expect("manifest parses");
    (dir, manifest)
}

/// The sources `entries` lists, by name.
pub fn sources(dir: &Path, entries: &[ImageEntry]) -> Vec<(String, RgbImage)> {
    entries
        .iter()
        .map(|e| {
            let data = std::fs::read(dir.join(&e.file)).expect("source readable");
            let img = RgbImage::from_raw(e.width, e.height, data).expect("source size");
            (e.name.clone(), img)
        })
        .collect()
}
