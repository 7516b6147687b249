//! Fork safety: a process that forks (a torch `DataLoader` worker, `multiprocessing` with the
//! `fork` start method) must be able to use ferroloader in the child.
//!
//! After `fork()` only the forking thread exists in the child. Anything the parent made that
//! owns or talks to threads (an epoch's workers and its pump thread, the mutexes they may have
//! held at the moment of the fork) is unusable there: joining a thread that does not exist, or
//! locking a mutex whose owner vanished, hangs or worse. So, as tokenizers does, a
//! `pthread_atfork` child handler bumps a process-wide *fork generation*; every native object
//! that touches threads is wrapped in a [`ForkLocal`] that remembers the generation it was made
//! in, refuses to be used from a later one and, when dropped there, is leaked instead of
//! destroyed (its memory is the child's copy-on-write image of the parent's; nothing is lost).
//! Objects made in the child are ordinary. The Python `Loader` rebuilds its native loader from
//! its configuration when it finds itself in a new generation.
//!
//! Must not do anything in the atfork handler beyond an atomic increment (it runs in the child
//! of a multi-threaded process, where only async-signal-safe work is allowed).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Once;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

/// Incremented in the child after every `fork()`.
static GENERATION: AtomicU64 = AtomicU64::new(0);

extern "C" fn after_fork_in_child() {
    GENERATION.fetch_add(1, Ordering::SeqCst);
}

/// Registers the child handler once per process (idempotent; module init calls it).
pub(crate) fn install_handler() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        // SAFETY: `pthread_atfork` only stores the three function pointers; the one given is a
        // plain `extern "C"` function with no captured state that performs a single atomic
        // increment, which is async-signal-safe as the child handler must be. It stays valid
        // for the life of the process (a static function of this library, which Python never
        // unloads).
        let rc = unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) };
        // Only ENOMEM is possible; without the handler the process-id check below still
        // catches the common case.
        let _ = rc;
    });
}

/// The current fork generation: 0 in the process that imported the module, incremented in each
/// forked child (and the child's children).
pub(crate) fn generation() -> u64 {
    GENERATION.load(Ordering::SeqCst)
}

/// A value that belongs to the process (fork generation) that made it.
///
/// In a forked child, [`ForkLocal::get`] fails and dropping leaks the value instead of running
/// its destructor (which could join the parent's threads or lock its mutexes).
#[derive(Debug)]
pub(crate) struct ForkLocal<T> {
    generation: u64,
    pid: u32,
    value: Option<T>,
}

impl<T> ForkLocal<T> {
    /// Wraps `value`, made in the current process.
    pub(crate) fn new(value: T) -> Self {
        ForkLocal {
            generation: generation(),
            pid: std::process::id(),
            value: Some(value),
        }
    }

    /// Whether this value was made in another process (inherited through `fork()`).
    pub(crate) fn inherited(&self) -> bool {
        // The pid check backs up the handler (should registering it ever fail).
        self.generation != generation() || self.pid != std::process::id()
    }

    /// The value, unless it was inherited through `fork()`; `what` names it in the error.
    pub(crate) fn get(&self, what: &str) -> PyResult<&T> {
        match &self.value {
            Some(v) if !self.inherited() => Ok(v),
            _ => Err(inherited_error(what)),
        }
    }

    /// The value, unless it was inherited through `fork()` (then it is leaked, as on drop).
    pub(crate) fn into_inner(mut self) -> Option<T> {
        if self.inherited() {
            return None;
        }
        self.value.take()
    }

    /// The value whatever process this is, for reads that touch no lock and no thread (an
    /// atomic counter, plain data).
    pub(crate) fn peek(&self) -> Option<&T> {
        self.value.as_ref()
    }
}

impl<T> Drop for ForkLocal<T> {
    fn drop(&mut self) {
        if self.inherited() {
            if let Some(value) = self.value.take() {
                // The parent's threads are gone and its locks may be held for ever: running
                // this destructor could hang the child. Leak the (copy-on-write) memory instead.
                std::mem::forget(value);
            }
        }
    }
}

fn inherited_error(what: &str) -> PyErr {
    PyRuntimeError::new_err(format!(
        "this {what} was created in another process and inherited through fork(); its worker \
         threads do not exist here. Create a new one in this process (a ferroloader.Loader \
         does so by itself: call iter(loader) again)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_made_here_is_usable_and_dropped() {
        install_handler();
        let drops = std::sync::Arc::new(());
        let local = ForkLocal::new(std::sync::Arc::clone(&drops));
        assert!(!local.inherited());
        assert!(local.peek().is_some());
        drop(local);
        assert_eq!(std::sync::Arc::strong_count(&drops), 1, "destructor ran");
    }

    #[test]
    fn a_value_from_an_earlier_generation_is_leaked_not_dropped() {
        let drops = std::sync::Arc::new(());
        let mut local = ForkLocal::new(std::sync::Arc::clone(&drops));
        // As if this process were a child forked after the value was made.
        local.generation = generation().wrapping_sub(1);
        assert!(local.inherited());
        drop(local);
        assert_eq!(std::sync::Arc::strong_count(&drops), 2, "leaked");
    }

    #[test]
    fn into_inner_gives_a_value_made_here_and_leaks_an_inherited_one() {
        let drops = std::sync::Arc::new(());
        let here = ForkLocal::new(std::sync::Arc::clone(&drops));
        assert!(here.into_inner().is_some());
        let mut inherited = ForkLocal::new(std::sync::Arc::clone(&drops));
        inherited.generation = generation().wrapping_sub(1);
        assert!(inherited.into_inner().is_none());
        assert_eq!(
            std::sync::Arc::strong_count(&drops),
            2,
            "the inherited one leaked"
        );
    }
}
