//! Where the generated corpora live, for the tests and benches of every crate (each includes
//! this file with `#[path]`): `$FERROLOADER_FIXTURES/<set>`, else `<workspace>/target/fixtures/<set>`.
//! `make fixtures` writes the `decode` and `resize` sets, `make bench` the `bench` set.
//!
//! Must not generate anything: a missing corpus is a panic naming the make target to run.

// Each test target uses a part of this file.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// The folder of the fixture set `set` (`"decode"`, `"resize"`, `"bench"`); panics, naming
/// `make_target`, when it does not exist.
pub fn fixture_dir(set: &str, make_target: &str) -> PathBuf {
    let root = std::env::var_os("FERROLOADER_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target/fixtures"));
    let dir = root.join(set);
    assert!(
        dir.is_dir(),
        "no {set} fixtures at {}: run `{make_target}`",
        dir.display()
    );
    dir
}

/// The workspace root: the nearest folder above the including crate that holds `Cargo.lock`.
fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest
        .ancestors()
        .find(|dir| dir.join("Cargo.lock").is_file())
        .unwrap_or(manifest)
        .to_path_buf()
}

/// The bytes of `name` in the fixture set `set`.
pub fn read_fixture(set: &str, name: &str) -> Vec<u8> {
    let path = fixture_dir(set, "make fixtures").join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The `.jpg` files of `dir`, sorted by name, read into memory.
pub fn read_jpegs(dir: &Path) -> Vec<Vec<u8>> {
    let mut paths: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "jpg"))
        .collect();
    paths.sort();
    assert!(!paths.is_empty(), "no JPEGs in {}", dir.display());
    paths
        .iter()
        .map(|p| std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        .collect()
}

/// The benches' ImageNet-like JPEGs: `$FERROLOADER_BENCH_CORPUS`, else the `bench` set.
pub fn bench_corpus() -> Vec<Vec<u8>> {
    let dir = std::env::var_os("FERROLOADER_BENCH_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| fixture_dir("bench", "make bench"));
    read_jpegs(&dir)
}

/// The decode corpus' baseline and progressive JPEGs small enough for loader tests (all
/// `jpeg_*.jpg` but the huge one), sorted by name.
pub fn small_corpus_jpegs() -> Vec<PathBuf> {
    let dir = fixture_dir("decode", "make fixtures");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            name.starts_with("jpeg_") && name.ends_with(".jpg") && !name.contains("huge")
        })
        .collect();
    paths.sort();
    assert!(paths.len() >= 10, "corpus has {} JPEGs", paths.len());
    paths
}
