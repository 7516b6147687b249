//! CUDA's page-locking for `pin_memory`: `cudaHostRegister` and `cudaHostUnregister`, called
//! through the CUDA runtime library that torch has already loaded into the process (the Python
//! side finds its path and checks `torch.cuda.is_available()` first).
//!
//! Must not link CUDA at build time (the wheel runs on machines without it), initialise CUDA or
//! choose a device: torch did, and the portable flag locks the memory for every device.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};

use ferroloader_loader::PageLock;
use libloading::Library;

/// `cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags)`.
type RegisterFn = unsafe extern "C" fn(*mut c_void, usize, c_uint) -> c_int;
/// `cudaError_t cudaHostUnregister(void *ptr)`.
type UnregisterFn = unsafe extern "C" fn(*mut c_void) -> c_int;
/// `const char *cudaGetErrorName(cudaError_t error)`.
type ErrorNameFn = unsafe extern "C" fn(c_int) -> *const c_char;

/// `cudaHostRegisterPortable`: locked for every CUDA context, not only the current device's.
const REGISTER_PORTABLE: c_uint = 1;

/// Page-locks batch buffers with the CUDA runtime at a path.
#[derive(Debug)]
pub(crate) struct CudaPageLock {
    register: RegisterFn,
    unregister: UnregisterFn,
    error_name: ErrorNameFn,
    /// Keeps the library mapped while the function pointers above are used.
    _library: Library,
}

impl CudaPageLock {
    /// The runtime at `path` (a `libcudart.so.N`), or why it cannot serve.
    pub(crate) fn open(path: &str) -> Result<Self, String> {
        // SAFETY: loading a library runs its initialisers. `path` is the CUDA runtime that torch
        // has loaded into this process already, so this only takes another reference to it and
        // runs nothing again; any other library is refused below unless it exports the runtime's
        // C API.
        let library = unsafe { Library::new(path) }.map_err(|e| format!("{path}: {e}"))?;
        // SAFETY: the CUDA runtime's C API (cuda_runtime_api.h) declares these functions with
        // exactly these signatures (`cudaError_t` is a C enum, an `int`); the pointers are used
        // only while `library` is held.
        let (register, unregister, error_name) = unsafe {
            (
                function::<RegisterFn>(&library, path, "cudaHostRegister")?,
                function::<UnregisterFn>(&library, path, "cudaHostUnregister")?,
                function::<ErrorNameFn>(&library, path, "cudaGetErrorName")?,
            )
        };
        Ok(CudaPageLock {
            register,
            unregister,
            error_name,
            _library: library,
        })
    }

    /// `cudaErrorX (N)` for an error code.
    fn describe(&self, code: c_int) -> String {
        // SAFETY: `cudaGetErrorName` accepts any code and returns a static NUL-terminated
        // string (or null, handled), which is read before anything else calls the runtime.
        let name = unsafe {
            let name = (self.error_name)(code);
            (!name.is_null()).then(|| CStr::from_ptr(name).to_string_lossy().into_owned())
        };
        format!(
            "{} ({code})",
            name.as_deref().unwrap_or("unknown CUDA error")
        )
    }
}

/// The function `name` of `library` (at `path`), typed `F`.
///
/// # Safety
/// `F` must be the function's true signature, and the pointer must not outlive `library`.
unsafe fn function<F: Copy>(library: &Library, path: &str, name: &str) -> Result<F, String> {
    // SAFETY: passed on to the caller (see above).
    unsafe { library.get::<F>(name) }
        .map(|symbol| *symbol)
        .map_err(|e| format!("{path}: no {name}: {e}"))
}

impl PageLock for CudaPageLock {
    fn lock(&self, address: usize, len: usize) -> Result<(), String> {
        // SAFETY: the runtime records the range and pins its pages, without reading or writing
        // them; the loader promises a live allocation of `len` bytes, locked once, that stays
        // allocated until `unlock` (`PageLock::lock`), and a bad range is an error code.
        let code = unsafe { (self.register)(address as *mut c_void, len, REGISTER_PORTABLE) };
        if code == 0 {
            Ok(())
        } else {
            Err(format!("cudaHostRegister: {}", self.describe(code)))
        }
    }

    fn unlock(&self, address: usize) {
        // SAFETY: `address` is one the loader locked with `lock` and has not unlocked; a runtime
        // already shut down (process exit) answers with an error code, ignored.
        let _ = unsafe { (self.unregister)(address as *mut c_void) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_library_without_the_cuda_runtime_is_refused_naming_the_symbol() {
        let error = CudaPageLock::open("libc.so.6").expect_err("libc is not the CUDA runtime");
        assert!(
            error.starts_with("libc.so.6: no cudaHostRegister"),
            "{error}"
        );
        let error = CudaPageLock::open("/nonexistent/libcudart.so.13").expect_err("no such file");
        assert!(
            error.starts_with("/nonexistent/libcudart.so.13: "),
            "{error}"
        );
    }
}
