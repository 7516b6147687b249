//! Running a float kernel with hardware fused multiply-adds where the CPU has them.
//!
//! torch's v2 blends and `grid_sample` are fused multiply-adds, which our kernels write as
//! `f32::mul_add`: one rounding, the same result with or without the instruction, but without
//! it a call into libm's `fmaf` per value. Must not change a result: code run here keeps
//! Rust's semantics (no contraction of separate multiplies and adds), only `mul_add` gets
//! faster.

/// Runs `kernel` compiled with the FMA instruction set when the CPU has it, else as it is.
///
/// `kernel` must be inlinable into the FMA context for the instructions to be used: a closure
/// calling `#[inline(always)]` loop functions.
#[inline(always)]
pub(crate) fn with_fma<R>(kernel: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU supports FMA (checked just above), the only requirement of calling
        // a `target_feature(enable = "fma")` function; `kernel` is safe code.
        return unsafe { in_fma_context(kernel) };
    }
    kernel()
}

/// `kernel()` compiled with FMA instructions.
///
/// # Safety
/// The CPU must support FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma")]
unsafe fn in_fma_context<R>(kernel: impl FnOnce() -> R) -> R {
    kernel()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fused_result_is_the_same_with_and_without_the_instruction() {
        // 0.1 * 10 - 1 is 0 with two roundings and 2^-27 (about 1.49e-8) with one.
        let (a, b, c) = (0.1f32, 10.0f32, -1.0f32);
        let fused = with_fma(|| a.mul_add(b, c));
        assert_eq!(fused, a.mul_add(b, c));
        assert_ne!(fused, 0.0, "mul_add rounds once");
        let separate = with_fma(|| std::hint::black_box(a) * b + c);
        assert_eq!(
            separate, 0.0,
            "separate multiply and add are never contracted"
        );
    }
}
