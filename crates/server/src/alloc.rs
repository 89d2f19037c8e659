//! Tuning of the C allocator for long-running processes.
//!
//! It lives with the server, the long-running process it is for, so that
//! the libraries under it (math, rlwe, ckks) need no `unsafe` and no libc.

/// Asks the C allocator to keep freed memory for reuse rather than return
/// it to the OS, and to serve polynomial-sized blocks (up to 32 MiB) from
/// its heap. Results of homomorphic operations are fresh polynomials of tens
/// of MB at N = 2^16; with glibc's defaults every such allocation maps
/// fresh pages, and faulting and zeroing them cost about 15 % of a
/// multiplication. Long-running processes (server, benchmarks) call this
/// once at start; the cost is memory held by the process, as a garbage
/// collected runtime would. Returns whether the allocator accepted it
/// (always false off glibc).
///
/// The same settings can be given to any process from outside, without
/// this call: `GLIBC_TUNABLES=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=2147483647`.
pub fn retain_freed_memory() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallopt only changes allocator thresholds; the values are
        // within the ranges glibc documents (mmap threshold ≤ 32 MiB).
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20) == 1
                && libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX) == 1
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}
