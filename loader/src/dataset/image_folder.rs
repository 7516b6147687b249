//! torchvision's `ImageFolder`: `root/<class>/**/<image>`, with torchvision's exact listing rules.
//!
//! Classes are the sorted names of `root`'s subfolders (symlinks followed); samples are listed as
//! `make_dataset` does: `sorted(os.walk(class_dir, followlinks=True))`, files sorted by name within
//! each folder, kept when the lowercased name ends with an accepted extension. Must not read the
//! files themselves while listing, and must not reorder samples in any other way: the sample index
//! is the index torchvision would give.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::ffi::{OsStr, OsString};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::{read_file_into, Source};
use crate::error::{LoaderError, Result};

/// torchvision's `IMG_EXTENSIONS`.
pub const IMG_EXTENSIONS: [&str; 9] = [
    ".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp",
];

/// How an [`ImageFolder`] lists its files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageFolderOptions {
    /// File name endings to accept, matched against the lowercased file name (so give them in
    /// lowercase, as torchvision expects). Default: [`IMG_EXTENSIONS`].
    pub extensions: Vec<String>,
    /// Accept class folders that hold no accepted file instead of failing (torchvision's
    /// `allow_empty`). Default: false.
    pub allow_empty: bool,
}

impl Default for ImageFolderOptions {
    fn default() -> Self {
        ImageFolderOptions {
            extensions: IMG_EXTENSIONS.iter().map(|e| (*e).to_owned()).collect(),
            allow_empty: false,
        }
    }
}

impl ImageFolderOptions {
    /// Sets [`Self::extensions`].
    pub fn extensions<I, E>(mut self, extensions: I) -> Self
    where
        I: IntoIterator<Item = E>,
        E: Into<String>,
    {
        self.extensions = extensions.into_iter().map(Into::into).collect();
        self
    }

    /// Sets [`Self::allow_empty`].
    pub fn allow_empty(mut self, allow_empty: bool) -> Self {
        self.allow_empty = allow_empty;
        self
    }
}

/// Images in class subfolders, labelled by the index of their class in sorted order.
#[derive(Clone, Debug)]
pub struct ImageFolder {
    root: PathBuf,
    /// Folder names as the OS gives them: a name that is not UTF-8 stays what it is (Python
    /// sees it as `os.fsdecode` does), so two such classes never collapse into one.
    classes: Vec<OsString>,
    samples: Vec<(PathBuf, usize)>,
}

impl ImageFolder {
    /// Lists `root` with the default options.
    pub fn new(root: impl AsRef<Path>) -> Result<Self> {
        Self::with_options(root, &ImageFolderOptions::default())
    }

    /// Lists `root`. Fails like torchvision: the root cannot be read ([`LoaderError::Io`]), it
    /// has no class folder ([`LoaderError::NoClassFolders`]), or a class has no accepted file
    /// ([`LoaderError::EmptyClasses`], unless `allow_empty`).
    pub fn with_options(root: impl AsRef<Path>, options: &ImageFolderOptions) -> Result<Self> {
        let root = root.as_ref().to_path_buf();
        let class_dirs = find_classes(&root)?;
        let mut samples = Vec::new();
        let mut empty = Vec::new();
        let mut listing = Vec::new();
        for (class_index, class) in class_dirs.iter().enumerate() {
            listing.clear();
            let class_dir = root.join(class);
            let mut ancestors = Vec::new();
            walk(&class_dir, &mut ancestors, &mut listing);
            // `sorted(os.walk(...))` orders the folders by their path *string*, which is not a
            // depth-first order ("a-b" sorts between "a" and "a/x").
            listing.sort_by(|a, b| python_order(a.0.as_os_str(), b.0.as_os_str()));
            let before = samples.len();
            for (dir, files) in &mut listing {
                files.sort_by(|a, b| python_order(a, b));
                for name in files.iter() {
                    if has_extension(name, &options.extensions) {
                        samples.push((dir.join(name), class_index));
                    }
                }
            }
            if samples.len() == before {
                empty.push(class.clone());
            }
        }
        if !empty.is_empty() && !options.allow_empty {
            return Err(LoaderError::EmptyClasses {
                root,
                classes: empty,
                extensions: options.extensions.clone(),
            });
        }
        Ok(ImageFolder {
            root,
            classes: class_dirs,
            samples,
        })
    }

    /// The dataset root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Class names in label order (sorted as Python sorts the names).
    pub fn classes(&self) -> &[OsString] {
        &self.classes
    }

    /// The label of class `name` (torchvision's `class_to_idx[name]`).
    pub fn class_index(&self, name: impl AsRef<OsStr>) -> Option<usize> {
        let name = name.as_ref();
        self.classes.iter().position(|c| c == name)
    }

    /// Every sample's path and class index, in index order (torchvision's `samples`).
    pub fn samples(&self) -> &[(PathBuf, usize)] {
        &self.samples
    }
}

impl Source for ImageFolder {
    fn len(&self) -> usize {
        self.samples.len()
    }

    fn read<'a>(&'a self, index: usize, buf: &'a mut Vec<u8>) -> io::Result<&'a [u8]> {
        read_file_into(&self.samples[index].0, buf)
    }

    fn label(&self, index: usize) -> i64 {
        // A class index is below the number of folders in one directory: it fits.
        self.samples[index].1 as i64
    }

    fn path(&self, index: usize) -> Cow<'_, Path> {
        Cow::Borrowed(&self.samples[index].0)
    }
}

/// torchvision's `find_classes`: sorted names of the entries of `root` that are directories
/// (following symlinks).
fn find_classes(root: &Path) -> Result<Vec<OsString>> {
    let io_err = |source| LoaderError::Io {
        path: root.to_path_buf(),
        source,
    };
    let mut classes = Vec::new();
    for entry in fs::read_dir(root).map_err(io_err)? {
        let entry = entry.map_err(io_err)?;
        if is_dir_following_links(&entry) {
            classes.push(entry.file_name());
        }
    }
    classes.sort_by(|a, b| python_order(a, b));
    if classes.is_empty() {
        return Err(LoaderError::NoClassFolders {
            root: root.to_path_buf(),
        });
    }
    Ok(classes)
}

/// The order of `sorted()` over the names as Python holds them (`os.fsdecode`: UTF-8, each
/// undecodable byte `b` as the lone surrogate `U+DC00 + b`), by code point. It is byte order for
/// valid UTF-8, but not once a name holds an undecodable byte (`U+DCE9` sorts above `U+D7FF`,
/// whose UTF-8 bytes `ED 9F BF` sort above the lone byte `E9`).
fn python_order(a: &OsStr, b: &OsStr) -> Ordering {
    code_points(a).cmp(code_points(b))
}

/// The code points of `os.fsdecode(name)` on a UTF-8 file system.
fn code_points(name: &OsStr) -> impl Iterator<Item = u32> + '_ {
    name.as_encoded_bytes().utf8_chunks().flat_map(|chunk| {
        let valid = chunk.valid().chars().map(u32::from);
        let escaped = chunk.invalid().iter().map(|&b| 0xDC00 + u32::from(b));
        valid.chain(escaped)
    })
}

/// `os.DirEntry.is_dir()`: follows symlinks, and is false when that fails.
fn is_dir_following_links(entry: &fs::DirEntry) -> bool {
    match entry.file_type() {
        Ok(t) if t.is_dir() => true,
        Ok(t) if t.is_symlink() => fs::metadata(entry.path()).is_ok_and(|m| m.is_dir()),
        _ => false,
    }
}

/// `os.walk(top, followlinks=True)`: appends `(folder, names of its non-directory entries)` for
/// `top` and every folder below it. Like `os.walk` without `onerror`, a folder that cannot be
/// listed is skipped silently. Unlike it, a symlink back to an ancestor is not followed: Python
/// would go round the cycle until the path grows too long, listing the same files again and again.
fn walk(top: &Path, ancestors: &mut Vec<PathBuf>, out: &mut Vec<(PathBuf, Vec<OsString>)>) {
    let Ok(entries) = fs::read_dir(top) else {
        return;
    };
    let mut dirs = Vec::new();
    let mut files = Vec::new();
    for entry in entries {
        let Ok(entry) = entry else {
            return;
        };
        if is_dir_following_links(&entry) {
            dirs.push(entry.file_name());
        } else {
            files.push(entry.file_name());
        }
    }
    out.push((top.to_path_buf(), files));
    let canonical = fs::canonicalize(top).ok();
    if let Some(c) = &canonical {
        ancestors.push(c.clone());
    }
    for dir in dirs {
        let child = top.join(&dir);
        if let Ok(c) = fs::canonicalize(&child) {
            if ancestors.contains(&c) {
                continue;
            }
        }
        walk(&child, ancestors, out);
    }
    if canonical.is_some() {
        ancestors.pop();
    }
}

/// torchvision's `has_file_allowed_extension`: `filename.lower().endswith(extensions)`.
fn has_extension(name: &OsStr, extensions: &[String]) -> bool {
    match name.to_str() {
        // Same Unicode lowercasing as Python's `str.lower()`.
        Some(name) => {
            let lower = name.to_lowercase();
            extensions.iter().any(|e| lower.ends_with(e.as_str()))
        }
        // Not UTF-8 (Python would see surrogate escapes): only ASCII can match an extension.
        None => {
            let lower = name.as_encoded_bytes().to_ascii_lowercase();
            extensions.iter().any(|e| lower.ends_with(e.as_bytes()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn names_sort_as_python_sorts_their_fsdecoded_strings() {
        use std::os::unix::ffi::OsStrExt;
        // sorted(['\ud7ff', 'cl\udce9', 'cl\udcea', 'cl\u00e9', 'cl', 'cm'])
        let names: Vec<&OsStr> = [
            &b"\xed\x9f\xbf"[..],
            b"cl\xe9",
            b"cl\xea",
            b"cl\xc3\xa9",
            b"cl",
            b"cm",
        ]
        .into_iter()
        .map(OsStr::from_bytes)
        .collect();
        let mut sorted = names.clone();
        sorted.sort_by(|a, b| python_order(a, b));
        let want = [names[4], names[3], names[1], names[2], names[5], names[0]];
        assert_eq!(sorted, want);
        // Byte order puts U+D7FF (ED 9F BF) after the lone byte E9; Python puts it first.
        let (d7ff, e9) = (names[0], OsStr::from_bytes(b"\xe9"));
        assert_eq!(python_order(d7ff, e9), Ordering::Less);
        assert!(d7ff.as_encoded_bytes() > e9.as_encoded_bytes());
    }

    #[test]
    fn extension_match_is_case_insensitive_on_the_name() {
        let exts: Vec<String> = IMG_EXTENSIONS.iter().map(|e| (*e).to_owned()).collect();
        for ok in [
            "a.jpg", "a.JPG", "b.JpEg", "c.tiff", "d.TIF", ".webp", "x.y.png",
        ] {
            assert!(has_extension(OsStr::new(ok), &exts), "{ok}");
        }
        for bad in ["a.jpgx", "a.txt", "jpg", "a.jp", "a.png.bak", "a.gif"] {
            assert!(!has_extension(OsStr::new(bad), &exts), "{bad}");
        }
        // Upper-case extensions in the options never match, as in torchvision.
        assert!(!has_extension(OsStr::new("a.jpg"), &[".JPG".to_owned()]));
    }
}
