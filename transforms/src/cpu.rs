//! Which SIMD instruction sets this CPU runs, for the kernels that need them (std caches each
//! detection after its first call), and who made it. Every `unsafe` call of a
//! `#[target_feature]` kernel relies on one of these answers. Must not choose a kernel:
//! callers pick by what they need.

/// AVX2.
#[inline]
pub(crate) fn avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// AVX2 and FMA.
#[inline]
pub(crate) fn avx2_fma() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        avx2() && std::arch::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// AVX-512 F, BW and VL: the BICUBIC warp.
#[inline]
pub(crate) fn avx512_bw_vl() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vl")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// [`avx512_bw_vl`] and DQ (64-bit multiplies): the standard normals' hash.
#[inline]
pub(crate) fn avx512_bw_vl_dq() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        avx512_bw_vl() && std::arch::is_x86_feature_detected!("avx512dq")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// [`avx512_bw_vl`] and VBMI (byte permutes): the tensor conversions.
#[inline]
pub(crate) fn avx512_vbmi() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        avx512_bw_vl() && std::arch::is_x86_feature_detected!("avx512vbmi")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// [`avx512_vbmi`] and VNNI (dot products): the resize kernels.
#[inline]
pub(crate) fn avx512_vnni() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        avx512_vbmi() && std::arch::is_x86_feature_detected!("avx512vnni")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether the CPU is AMD's (CPUID vendor "AuthenticAMD"), read once.
pub(crate) fn amd() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static AMD: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *AMD.get_or_init(|| {
            let id = std::arch::x86_64::__cpuid(0);
            // The vendor string's 12 bytes are EBX, EDX, ECX in that order.
            [id.ebx, id.edx, id.ecx] == [0x6874_7541, 0x6974_6e65, 0x444d_4163]
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn vendor_matches_proc_cpuinfo() {
        // Linux names the vendor in /proc/cpuinfo; elsewhere there is nothing to compare with.
        let Ok(info) = std::fs::read_to_string("/proc/cpuinfo") else {
            return;
        };
        let Some(vendor) = info.lines().find_map(|l| l.strip_prefix("vendor_id")) else {
            return;
        };
        let vendor = vendor.trim_start_matches([' ', '\t', ':']).trim();
        assert_eq!(
            super::amd(),
            vendor == "AuthenticAMD",
            "vendor_id {vendor:?}"
        );
    }
}
