//! The one error type of the transforms crate.
//!
//! Errors describe the cause only; naming the file is the caller's job (the loader wraps them
//! with the path and the op), because this crate never sees paths.

/// Why an op failed. Every bad input maps to one of these; nothing in this crate panics on input.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The bytes are not an image format we decode (or not an image at all).
    #[error("not a supported image (first bytes: {magic:02x?})")]
    UnknownFormat {
        /// Up to the first 8 bytes, to tell an HTML error page from a truncated file.
        magic: Vec<u8>,
    },
    /// The data ends before the image does.
    #[error("truncated {format} data: {detail}")]
    Truncated {
        /// "jpeg", "png", ...
        format: &'static str,
        /// What the decoder said.
        detail: String,
    },
    /// The data is malformed.
    #[error("corrupt {format} data: {detail}")]
    Corrupt {
        /// "jpeg", "png", ...
        format: &'static str,
        /// What the decoder said.
        detail: String,
    },
    /// A valid image using a feature we do not decode (12-bit JPEG, arithmetic coding in zune, ...).
    #[error("unsupported {format} image: {detail}")]
    Unsupported {
        /// "jpeg", "png", ...
        format: &'static str,
        /// Which feature.
        detail: String,
    },
    /// More pixels than the decode-bomb limit allows.
    #[error("image of {width}x{height} ({pixels} pixels) exceeds the limit of {limit} pixels")]
    TooLarge {
        /// Width in pixels.
        width: u32,
        /// Height in pixels.
        height: u32,
        /// width * height.
        pixels: u64,
        /// The configured limit.
        limit: u64,
    },
    /// The allocator refused memory for pixels whose size the image declares (under the pixel
    /// limit, more than this machine can give).
    #[error("cannot allocate {bytes} bytes for the image's pixels")]
    OutOfMemory {
        /// Bytes asked for.
        bytes: usize,
    },
    /// An op was configured or called with an impossible argument.
    #[error("invalid argument `{name}`: {reason}")]
    InvalidArgument {
        /// The argument's name as the user wrote it.
        name: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// An op that the caller plugged in around this crate's pipeline failed (a user's Python
    /// transform run after the native ops): this crate only carries the caller's description.
    #[error("{detail}")]
    External {
        /// What failed and why, as the caller words it.
        detail: String,
    },
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn invalid(name: &'static str, reason: impl Into<String>) -> Self {
        Error::InvalidArgument {
            name,
            reason: reason.into(),
        }
    }
}
