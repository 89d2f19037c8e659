//! A small per-thread pool of residue buffers. Key switching needs several
//! polynomial-sized temporaries per call (tens of MB at N = 2^16), and every
//! operation returns fresh polynomials; taking them from fresh allocations
//! costs page faults and a zero fill of every page (a third of the run time
//! when first measured; the fill alone 2 % of a rotation at N = 2^16 with
//! freed memory kept by the C allocator), so buffers are recycled: a
//! dropped [`RnsPoly`](crate::RnsPoly) hands its buffer back here.
//!
//! Only threads that take buffers keep any: a thread that merely drops
//! polynomials (a network thread freeing a received ciphertext) returns
//! them to the allocator, so no thread holds memory it never reuses.

use std::cell::{Cell, RefCell};

/// Buffers kept per thread.
const MAX_POOLED: usize = 12;

/// Residues below which a buffer is not worth pooling.
const POOLED_MIN: usize = 1024;

thread_local! {
    static POOL: RefCell<Vec<Vec<u64>>> = const { RefCell::new(Vec::new()) };
    /// Whether this thread has taken a buffer (see the module docs).
    static TAKES: Cell<bool> = const { Cell::new(false) };
}

/// A buffer of `len` residues with unspecified (but initialized) contents.
///
/// ```
/// let buf = hecloud_math::pool::take(4096);
/// assert_eq!(buf.len(), 4096);
/// hecloud_math::pool::give(buf);
/// assert_eq!(hecloud_math::pool::take(2048).capacity(), 4096);
/// ```
pub fn take(len: usize) -> Vec<u64> {
    // Too small to be pooled (see `give`): a pooled buffer handed out here
    // would come back shortened, and refilling it to a polynomial's length
    // later is a zero fill of its own (an empty scratch did that once per
    // hoisted key switch).
    if len < POOLED_MIN {
        return vec![0; len];
    }
    TAKES.set(true);
    let buf = POOL.with(|p| {
        let mut p = p.borrow_mut();
        // The smallest that holds `len` initialized residues already, else
        // the smallest with room (extended with zeros: a pass of its own).
        let best = p
            .iter()
            .enumerate()
            .filter(|(_, b)| b.capacity() >= len)
            .min_by_key(|(_, b)| (b.len() < len, b.capacity()))
            .map(|(i, _)| i);
        best.map(|i| p.swap_remove(i))
    });
    match buf {
        Some(mut b) => {
            if b.len() >= len {
                b.truncate(len);
            } else {
                b.resize(len, 0);
            }
            b
        }
        None => vec![0; len],
    }
}

/// Returns a buffer to this thread's pool (if this thread takes buffers,
/// the pool has room and the buffer is worth keeping; else it is freed).
pub fn give(buf: Vec<u64>) {
    if buf.capacity() < POOLED_MIN || !TAKES.get() {
        return;
    }
    // A thread being torn down has no pool left: the buffer is freed.
    let _ = POOL.try_with(|p| {
        if let Ok(mut p) = p.try_borrow_mut()
            && p.len() < MAX_POOLED
        {
            p.push(buf);
        }
    });
}
