//! Rust errors to Python exceptions, by kind (as polars' `error.rs` does), never flattened into a
//! bare `Exception`.
//!
//! - missing or unreadable files and folders: the `OSError` subclass of the OS error
//!   (`FileNotFoundError`, `PermissionError`, ...) with `filename` set; an image folder without
//!   classes or images: `FileNotFoundError`, as torchvision raises;
//! - images that cannot be decoded: [`DecodeError`], a subclass of `OSError` (as Pillow's
//!   `UnidentifiedImageError` is, so code that catches image-reading failures as `OSError` keeps
//!   working), naming the file, the op and the cause in its message and its attributes (`path`,
//!   not `filename`, which would make `OSError` rewrite the message);
//! - bad arguments or configurations: `ValueError` naming the Python argument; a file that is
//!   not a readable profile: `ValueError` saying why;
//! - a sampler index out of range: `IndexError`; loader bugs and panics: `RuntimeError`.
//!
//! Paths and class names reach Python as `os.fsdecode` gives them (an undecodable byte as a lone
//! surrogate, which a Rust `String` cannot hold), in messages and attributes alike, so that
//! `os.path.exists(e.path)` holds for a file whose name is not UTF-8.
//!
//! Must not decide anything but the exception type and its message.

use std::ffi::OsStr;
use std::io;
use std::path::Path;

use ferroloader_loader::profiler::ProfilerError;
use ferroloader_loader::transforms::Error as TransformError;
use ferroloader_loader::LoaderError;
use pyo3::exceptions::{
    PyFileNotFoundError, PyIndexError, PyMemoryError, PyOSError, PyPermissionError, PyRuntimeError,
    PyValueError,
};
use pyo3::prelude::*;
use pyo3::types::PyString;
use pyo3::PyTypeInfo;

pyo3::create_exception!(
    ferroloader,
    DecodeError,
    PyOSError,
    "An image could not be decoded: unknown format, truncated or corrupt data, an unsupported \
     feature or more pixels than allowed. Subclass of OSError (like Pillow's \
     UnidentifiedImageError). The message names the file and the cause; attributes: path (the \
     file), index (its dataset index), op (the op that failed) and reason (unknown_format | \
     truncated | corrupt | unsupported | too_large). `filename` stays None: OSError would \
     otherwise rewrite the message as '[Errno None] ...'."
);

/// A Rust error that has a Python exception (building some needs the GIL).
pub(crate) trait ToPyErr {
    /// The Python exception for this error.
    fn to_py_err(self, py: Python<'_>) -> PyErr;
}

impl ToPyErr for LoaderError {
    fn to_py_err(self, py: Python<'_>) -> PyErr {
        loader_error(py, self)
    }
}

/// A transform failing on bytes that have no file (the bindings' op functions): a
/// [`DecodeError`] for bad image data, a `ValueError` for an argument that does not fit.
impl ToPyErr for TransformError {
    fn to_py_err(self, py: Python<'_>) -> PyErr {
        match decode_reason(&self) {
            Some(reason) => decode_error(py, Path::new("<bytes>"), None, "decode", reason, &self),
            None => PyValueError::new_err(self.to_string()),
        }
    }
}

/// A refused transform configuration: `ValueError` naming the argument and, for the spec's own
/// checks, the op argument (`scale`, `size`, ...).
impl ToPyErr for ProfilerError {
    /// Files: the `OSError` of the OS error; anything about a file's contents: `ValueError`.
    fn to_py_err(self, py: Python<'_>) -> PyErr {
        match self {
            ProfilerError::Io { path, source } => os_error(py, &source, &path, None),
            other => PyValueError::new_err(other.to_string()),
        }
    }
}

pub(crate) fn transform_config_error(arg: &str, e: &TransformError) -> PyErr {
    PyValueError::new_err(format!("{arg}: {e}"))
}

/// The Python name of a loader option (the Rust name where it differs).
fn python_arg(option: &str) -> &str {
    match option {
        "shard.rank" => "rank",
        "shard.world_size" => "world_size",
        "sample_layout" => "transform",
        other => other,
    }
}

fn loader_error(py: Python<'_>, e: LoaderError) -> PyErr {
    match e {
        LoaderError::Io { path, source } => os_error(py, &source, &path, None),
        LoaderError::Read {
            index,
            path,
            source,
        } => os_error(py, &source, &path, Some(index)),
        LoaderError::Transform {
            index,
            path,
            op,
            source,
        } => {
            if let Some(reason) = decode_reason(&source) {
                return decode_error(py, &path, Some(index), op.name(), reason, &source);
            }
            let message = format!(
                "{} (sample {index}): {} failed: {source}",
                path.display(),
                op.name()
            );
            let names = [path.as_os_str()];
            match source {
                TransformError::OutOfMemory { .. } => new_err::<PyMemoryError>(py, message, &names),
                // A user's Python transform raised: not a bad argument of ours.
                TransformError::External { .. } => new_err::<PyRuntimeError>(py, message, &names),
                _ => new_err::<PyValueError>(py, message, &names),
            }
        }
        LoaderError::Panic {
            index,
            path,
            op,
            message,
        } => new_err::<PyRuntimeError>(
            py,
            format!(
                "{} (sample {index}): {} panicked: {message}",
                path.display(),
                op.name()
            ),
            &[path.as_os_str()],
        ),
        LoaderError::EmptyClasses {
            root: _,
            ref classes,
            ref extensions,
        } => {
            // Names that differ only in undecodable bytes look alike once lossy: each is
            // replaced where it stands, not by a search for its lossy text.
            let mut text =
                vec![PyString::new(py, "Found no valid file for the classes ").into_any()];
            for (i, class) in classes.iter().enumerate() {
                if i > 0 {
                    text.push(PyString::new(py, ", ").into_any());
                }
                text.push(os_str(py, class));
            }
            let tail = format!(". Supported extensions are: {}", extensions.join(", "));
            text.push(PyString::new(py, &tail).into_any());
            let joined = PyString::new(py, "")
                .call_method1("join", (text,))
                .map(Bound::unbind);
            match joined {
                Ok(message) => PyFileNotFoundError::new_err((message,)),
                Err(_) => PyFileNotFoundError::new_err(e.to_string()),
            }
        }
        LoaderError::NoClassFolders { ref root } => {
            new_err::<PyFileNotFoundError>(py, e.to_string(), &[root.as_os_str()])
        }
        LoaderError::FileList { ref path, .. } => {
            new_err::<PyValueError>(py, e.to_string(), &[path.as_os_str()])
        }
        LoaderError::InvalidOption { name, reason } => {
            PyValueError::new_err(format!("{}: {reason}", python_arg(name)))
        }
        e @ LoaderError::OutOfMemory { .. } => PyMemoryError::new_err(e.to_string()),
        LoaderError::IndexOutOfRange {
            index,
            position,
            len,
        } => PyIndexError::new_err(format!(
            "sampler: index {index} at position {position} is out of range for a dataset of \
             {len} samples"
        )),
        e => PyRuntimeError::new_err(e.to_string()),
    }
}

/// An exception of type `T` whose message is `message` with each of `names` (shown in it by
/// `Path::display` or `to_string_lossy`) as `os.fsdecode` gives it.
fn new_err<T: PyTypeInfo>(py: Python<'_>, message: String, names: &[&OsStr]) -> PyErr {
    match exact_text(py, &message, names) {
        Ok(text) => PyErr::new::<T, _>((text.unbind(),)),
        Err(_) => PyErr::new::<T, _>(message),
    }
}

/// `message` with the lossy form of each of `names` replaced by its exact one; names that are
/// valid UTF-8 show the same either way and are left alone.
pub(crate) fn exact_text<'py>(
    py: Python<'py>,
    message: &str,
    names: &[&OsStr],
) -> PyResult<Bound<'py, PyAny>> {
    let mut text = PyString::new(py, message).into_any();
    for name in names {
        if name.to_str().is_none() {
            text = text.call_method1("replace", (name.to_string_lossy(), os_str(py, name)))?;
        }
    }
    Ok(text)
}

/// `os.fsdecode(name)`.
pub(crate) fn os_str<'py>(py: Python<'py>, name: &OsStr) -> Bound<'py, PyAny> {
    // PyO3 converts an `OsStr` with the file system encoding and its error handler
    // (`PyUnicode_DecodeFSDefault`), which is what `os.fsdecode` does.
    name.into_pyobject(py).map_or_else(
        |_| PyString::new(py, &name.to_string_lossy()).into_any(),
        |s| s.into_any(),
    )
}

/// The `reason` attribute of a [`DecodeError`], or `None` when the transform error is not about
/// the image data (an op argument that does not fit the image: a `ValueError`).
fn decode_reason(e: &TransformError) -> Option<&'static str> {
    Some(match e {
        TransformError::UnknownFormat { .. } => "unknown_format",
        TransformError::Truncated { .. } => "truncated",
        TransformError::Corrupt { .. } => "corrupt",
        TransformError::Unsupported { .. } => "unsupported",
        TransformError::TooLarge { .. } => "too_large",
        TransformError::InvalidArgument { .. }
        | TransformError::OutOfMemory { .. }
        | TransformError::External { .. } => return None,
        _ => "unknown",
    })
}

/// A [`DecodeError`] about `path`, with its attributes set.
fn decode_error(
    py: Python<'_>,
    path: &Path,
    index: Option<usize>,
    op: &str,
    reason: &str,
    source: &TransformError,
) -> PyErr {
    let message = match index {
        Some(index) => format!(
            "{}: cannot decode image (sample {index}, {op}): {source}",
            path.display()
        ),
        None => format!("{}: cannot decode image: {source}", path.display()),
    };
    let build = || -> PyResult<PyErr> {
        let text = exact_text(py, &message, &[path.as_os_str()])?;
        let exc = py.get_type::<DecodeError>().call1((text,))?;
        exc.setattr("path", os_str(py, path.as_os_str()))?;
        exc.setattr("index", index)?;
        exc.setattr("op", op)?;
        exc.setattr("reason", reason)?;
        Ok(PyErr::from_value(exc))
    };
    build().unwrap_or_else(|_| DecodeError::new_err(message.clone()))
}

/// `OSError(errno, strerror, filename)`: Python picks the subclass from the errno
/// (`FileNotFoundError` for `ENOENT`, ...). Errors without an errno are mapped by kind.
fn os_error(py: Python<'_>, e: &io::Error, path: &Path, sample: Option<usize>) -> PyErr {
    let what = match sample {
        Some(index) => format!(" (reading sample {index})"),
        None => String::new(),
    };
    match e.raw_os_error() {
        Some(errno) => {
            let strerror = io::Error::from_raw_os_error(errno).to_string();
            // `std` appends " (os error N)"; Python shows the errno itself.
            let strerror = strerror
                .rsplit_once(" (os error")
                .map_or(strerror.as_str(), |(s, _)| s);
            let filename = path.as_os_str().to_owned();
            PyOSError::new_err((errno, format!("{strerror}{what}"), filename))
        }
        None => {
            let message = format!("{}: {e}{what}", path.display());
            let names = [path.as_os_str()];
            match e.kind() {
                io::ErrorKind::NotFound => new_err::<PyFileNotFoundError>(py, message, &names),
                io::ErrorKind::PermissionDenied => {
                    new_err::<PyPermissionError>(py, message, &names)
                }
                _ => new_err::<PyOSError>(py, message, &names),
            }
        }
    }
}
