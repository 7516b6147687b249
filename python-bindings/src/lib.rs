//! The `ferroloader._native` extension module: translates between Python and the Rust crates.
//!
//! Holds no loader or transform logic of its own: datasets, the loader, the pipeline and the
//! crop parameters all come from `ferroloader_loader` (and the transforms crate it re-exports).
//! What lives here is only what the crossing needs: argument conversion, error mapping by kind
//! ([`errors`]), one helper for every long call that releases the GIL and answers Ctrl-C
//! ([`detach`]), zero-copy batch arrays ([`batch`]), profiles and counter groups ([`profile`]),
//! building a profile from the Python instrumentation's records ([`builder`]), MixUp and
//! CutMix on a delivered batch ([`batch_mix`]), fork safety
//! ([`fork`]), running a Python tail after the native ops ([`tail`]) and ending every epoch
//! before the interpreter finalizes ([`at_exit`]). The Python package (`python/ferroloader`)
//! re-exports what users touch and owns argument checking.

mod at_exit;
mod batch;
mod batch_mix;
mod builder;
mod cuda;
mod dataset;
mod detach;
mod errors;
mod fork;
mod loader;
mod ops;
mod prefix;
mod prepare;
mod profile;
mod shard;
mod table;
mod tail;
mod views;
mod webdataset;

use ferroloader_loader::profiler;
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
    m.add_class::<dataset::PyImageArray>()?;
    m.add_class::<webdataset::PyWebDataset>()?;
    m.add_class::<table::PyEncodedTable>()?;
    m.add_class::<loader::PyLoader>()?;
    m.add_class::<loader::PyEpochIter>()?;
    m.add_class::<batch::BatchMemory>()?;
    m.add_class::<profile::PyProfile>()?;
    m.add_class::<profile::PySummary>()?;
    m.add_class::<profile::PyCounterGroup>()?;
    m.add_class::<builder::PyProfileBuilder>()?;
    m.add_class::<prefix::PyPrefix>()?;
    m.add_function(wrap_pyfunction!(builder::counters_unavailable, m)?)?;
    // The schema's constants, declared once in the profiler crate.
    m.add("PROFILE_SCHEMA", profiler::schema::SCHEMA_NAME)?;
    m.add("PROFILE_SCHEMA_VERSION", profiler::schema::SCHEMA_VERSION)?;
    m.add("CONSUMER", profiler::CONSUMER)?;
    m.add("IO", profiler::IO)?;
    m.add(
        "COUNTER_NAMES",
        profiler::CounterKind::ALL
            .map(profiler::CounterKind::name)
            .to_vec(),
    )?;
    m.add_function(wrap_pyfunction!(profile::now_ns, m)?)?;
    m.add_function(wrap_pyfunction!(at_exit::end_epochs_at_exit, m)?)?;
    m.add_function(wrap_pyfunction!(batch_mix::mix_batch, m)?)?;
    m.add_function(wrap_pyfunction!(batch_mix::fast_collate_mix, m)?)?;
    m.add_function(wrap_pyfunction!(ops::random_resized_crop_params, m)?)?;
    m.add_function(wrap_pyfunction!(ops::resize_keep_ratio_params, m)?)?;
    m.add_function(wrap_pyfunction!(ops::resized_crop, m)?)?;
    m.add_function(wrap_pyfunction!(ops::augmix_apply, m)?)?;
    m.add_function(wrap_pyfunction!(ops::elastic_apply, m)?)?;
    m.add_function(wrap_pyfunction!(ops::elastic_displacement, m)?)?;
    m.add_function(wrap_pyfunction!(ops::timm_rand_augment_draws, m)?)?;
    m.add_function(wrap_pyfunction!(ops::timm_rand_augment_apply, m)?)?;
    m.add_function(wrap_pyfunction!(ops::pillow_gaussian_blur, m)?)?;
    m.add_function(wrap_pyfunction!(ops::timm_auto_augment_draws, m)?)?;
    m.add_function(wrap_pyfunction!(ops::timm_augmix_draws, m)?)?;
    m.add_function(wrap_pyfunction!(ops::timm_random_erasing_apply, m)?)?;
    m.add_function(wrap_pyfunction!(ops::gaussian_noise_apply, m)?)?;
    m.add_function(wrap_pyfunction!(ops::check_pipeline, m)?)?;
    m.add_function(wrap_pyfunction!(prepare::prepare, m)?)?;
    m.add_function(wrap_pyfunction!(shard::write_shards, m)?)?;
    m.add_function(wrap_pyfunction!(loader::epoch_indices, m)?)?;
    m.add_function(wrap_pyfunction!(loader::view_seed, m)?)?;
    m.add_function(wrap_pyfunction!(tail::python_seed, m)?)?;
    m.add_function(wrap_pyfunction!(loader::repeat_numbers, m)?)?;
    Ok(())
}
