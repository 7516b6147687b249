//! The `ferroloader._native` extension module: translates between Python and the Rust crates.
//!
//! Holds no loader or transform logic of its own.

use pyo3::prelude::*;

/// The extension module; the Python package re-exports what users touch.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
