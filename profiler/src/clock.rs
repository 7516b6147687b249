//! The one clock every timestamp of a profile is read from: `CLOCK_MONOTONIC`, in nanoseconds.
//!
//! It is the clock Python's `time.monotonic_ns()` reads, so spans recorded natively and spans
//! recorded by the Python-side instrumentation land on one timeline. This module must not use
//! `Instant` (its epoch is opaque) or the wall clock (it jumps).

use rustix::time::{clock_gettime, ClockId};

/// Nanoseconds of `CLOCK_MONOTONIC` (the value Python's `time.monotonic_ns()` returns).
///
/// Read through the vDSO: about 20 ns, no system call, no lock.
#[inline]
pub fn now_ns() -> u64 {
    let ts = clock_gettime(ClockId::Monotonic);
    // CLOCK_MONOTONIC is never negative; the conversion cannot lose anything for 584 years.
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_and_in_nanoseconds() {
        let a = now_ns();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = now_ns();
        assert!(b > a);
        let elapsed = b - a;
        assert!(
            (2_000_000..1_000_000_000).contains(&elapsed),
            "2 ms sleep measured as {elapsed} ns"
        );
    }

    #[test]
    fn matches_std_instant_rate() {
        let (i0, t0) = (std::time::Instant::now(), now_ns());
        std::thread::sleep(std::time::Duration::from_millis(5));
        let (i1, t1) = (std::time::Instant::now(), now_ns());
        let std_ns = (i1 - i0).as_nanos() as i128;
        let ours = (t1 - t0) as i128;
        assert!((std_ns - ours).abs() < 1_000_000, "{std_ns} vs {ours}");
    }
}
