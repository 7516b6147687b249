//! The `ferroloader._native` extension module: translates between Python and the Rust crates.
//!
//! Holds no loader or transform logic of its own: datasets, the loader, the pipeline and the
//! crop parameters all come from `ferroloader_loader` (and the transforms crate it re-exports).
//! What lives here is only what the crossing needs: argument conversion, error mapping by kind
//! ([`errors`]), one helper for every long call that releases the GIL and answers Ctrl-C
//! ([`detach`]), zero-copy batch arrays ([`batch`]), profiles and counter groups ([`profile`]), fork safety
//! ([`fork`]) and running a Python tail after the native ops ([`tail`]). The Python
//! package (`python/ferroloader`) re-exports what users touch and owns argument checking.

mod batch;
mod dataset;
mod detach;
mod errors;
mod fork;
mod loader;
mod ops;
mod prepare;
mod profile;
mod tail;
mod webdataset;

use pyo3::prelude::*;

/// The extension module; the Python package re-exports what users touch.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    fork::install_handler();
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("DecodeError", m.py().get_type::<errors::DecodeError>())?;
    m.add_class::<dataset::PyImageFolder>()?;
    m.add_class::<dataset::PyFileList>()?;
    m.add_class::<dataset::PyPathList>()?;
    m.add_class::<webdataset::PyWebDataset>()?;
    m.add_class::<loader::PyLoader>()?;
    m.add_class::<loader::PyEpochIter>()?;
    m.add_class::<batch::BatchMemory>()?;
    m.add_class::<profile::PyProfile>()?;
    m.add_class::<profile::PySummary>()?;
    m.add_class::<profile::PyCounterGroup>()?;
    m.add_function(wrap_pyfunction!(profile::now_ns, m)?)?;
    m.add_function(wrap_pyfunction!(ops::random_resized_crop_params, m)?)?;
    m.add_function(wrap_pyfunction!(ops::resized_crop, m)?)?;
    m.add_function(wrap_pyfunction!(ops::check_pipeline, m)?)?;
    m.add_function(wrap_pyfunction!(prepare::prepare, m)?)?;
    Ok(())
}
