//! A small per-thread pool of residue buffers. Key switching needs several
//! polynomial-sized temporaries per call (tens of MB at N = 2^16); taking
//! them from fresh allocations costs page faults and zeroing of every page
//! (a third of the run time when measured), so temporaries are recycled.

use std::cell::RefCell;

use hecloud_math::{Domain, RnsBasis, RnsPoly};

/// Buffers kept per thread.
const MAX_POOLED: usize = 12;

/// Residues below which a buffer is not worth pooling.
const POOLED_MIN: usize = 1024;

thread_local! {
    static POOL: RefCell<Vec<Vec<u64>>> = const { RefCell::new(Vec::new()) };
}

/// A buffer of `len` residues with unspecified (but initialized) contents.
pub(crate) fn take(len: usize) -> Vec<u64> {
    // Too small to be pooled (see `give`): a pooled buffer handed out here
    // would come back shortened, and refilling it to a polynomial's length
    // later is a zero fill of its own (an empty scratch did that once per
    // hoisted key switch).
    if len < POOLED_MIN {
        return vec![0; len];
    }
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

/// Returns a buffer to this thread's pool.
pub(crate) fn give(buf: Vec<u64>) {
    if buf.capacity() < POOLED_MIN {
        return;
    }
    POOL.with(|p| {
        let mut p = p.borrow_mut();
        if p.len() < MAX_POOLED {
            p.push(buf);
        }
    });
}

/// A polynomial over `basis` backed by a pooled buffer, with unspecified
/// residues: the caller writes every residue (below its prime) before it is
/// read, as with [`RnsPoly::from_buffer_unchecked`].
pub fn pooled_uninit(basis: &std::sync::Arc<RnsBasis>, domain: Domain) -> RnsPoly {
    RnsPoly::from_buffer_unchecked(basis, domain, take(basis.len() * basis.degree()))
}

/// Hands a temporary polynomial's buffer back to this thread's pool (a
/// cheap way for scheme code to let the next key switch reuse it).
pub fn recycle(p: RnsPoly) {
    give(p.into_data());
}
