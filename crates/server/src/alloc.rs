//! Tuning of the C allocator for long-running processes.
//!
//! It lives with the server, the long-running process it is for, so that
//! the libraries under it (math, rlwe, ckks) need no `unsafe` and no libc.

/// Asks the C allocator to keep freed memory for reuse rather than return
/// it to the OS, and to serve every block from its heap, however large.
/// Results of homomorphic operations are fresh polynomials of tens of MB
/// at N = 2^16 and over a hundred at N = 2^17; with glibc's defaults every
/// such allocation maps fresh pages, and faulting and zeroing them cost
/// about 15 % of a multiplication at N = 2^16. glibc maps blocks above its
/// largest mmap threshold (32 MiB) whatever the threshold says, so mapping
/// is turned off altogether (`M_MMAP_MAX` 0): measured on the N = 2^17
/// proxy pipeline, the process's system time fell from 50 to 28 s and
/// the proxy's end-to-end addition from 1280 to 851 ms. Long-running
/// processes (server, proxy, benchmarks) call this once at start; the
/// cost is memory held by the process, as a garbage collected runtime
/// would. Every thread allocates from the main heap (`M_ARENA_MAX` 1):
/// a thread's own arena is a set of mapped heaps, and one that a freed
/// block leaves empty is unmapped whatever the trim threshold says, so a
/// result freed on a worker thread came back as fresh pages on the next
/// operation (measured at N = 2^16: a rotation on a worker thread after a
/// few multiplications faulted 17.5 MB every time; two threads: rotation
/// 62–69 → 52–61 ms median, product 55–72 → 53–62 ms). glibc fixes its
/// arena limit when a second arena is first needed, and a thread keeps
/// the arena it has: call this before the process starts other threads
/// (a thread pool or an async runtime), or the arena limit has no effect.
/// Returns whether the allocator accepted it (always false off glibc).
///
/// The same settings can be given to any process from outside, without
/// this call: `GLIBC_TUNABLES=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=2147483647:glibc.malloc.mmap_max=0:glibc.malloc.arena_max=1`.
pub fn retain_freed_memory() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallopt only changes allocator thresholds; the values are
        // within the ranges glibc documents (mmap threshold ≤ 32 MiB, a
        // mapping count of 0 turns mapping off, one arena).
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20) == 1
                && libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX) == 1
                && libc::mallopt(libc::M_MMAP_MAX, 0) == 1
                && libc::mallopt(libc::M_ARENA_MAX, 1) == 1
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

/// Hands the memory the allocator holds free back to the OS (glibc's
/// `malloc_trim`), for a process that kept it ([`retain_freed_memory`])
/// and is about to leave the machine's memory to another: the bootstrapping
/// bench before Lattigo's second run. Returns whether any was released
/// (always false off glibc).
pub fn release_freed_memory() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: malloc_trim only returns free heap pages to the OS; no
        // live allocation is touched.
        unsafe { libc::malloc_trim(0) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}
