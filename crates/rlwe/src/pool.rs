//! Polynomials on [`hecloud_math::pool`]'s recycled buffers.

use hecloud_math::{Domain, RnsBasis, RnsPoly};

pub(crate) use hecloud_math::pool::{give, take};

/// A polynomial over `basis` backed by a pooled buffer, with unspecified
/// residues: the caller writes every residue (below its prime) before it is
/// read, as with [`RnsPoly::from_buffer_unchecked`]. Dropped, it hands the
/// buffer back.
pub fn pooled_uninit(basis: &std::sync::Arc<RnsBasis>, domain: Domain) -> RnsPoly {
    RnsPoly::from_buffer_unchecked(basis, domain, take(basis.len() * basis.degree()))
}
