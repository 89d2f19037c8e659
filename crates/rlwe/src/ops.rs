//! Ciphertext-level operations shared by CKKS and BGV: relinearization and
//! automorphisms (single and hoisted).

use hecloud_math::RnsPoly;

use crate::ciphertext::Ciphertext;
use crate::error::{Result, RlweError};
use crate::keys::{GaloisKey, RelinearizationKey};
use crate::keyswitch::{decompose, key_switch, key_switch_hoisted};

fn same(ct: &Ciphertext, key_hash: &[u8; 32]) -> Result<()> {
    if ct.params().hash() != key_hash {
        return Err(RlweError::ParameterMismatch);
    }
    Ok(())
}

/// Relinearizes a degree-2 ciphertext (c_0, c_1, c_2) to degree 1.
pub fn relinearize(ct: &Ciphertext, rlk: &RelinearizationKey) -> Result<Ciphertext> {
    same(ct, rlk.0.params().hash())?;
    if ct.degree() != 2 {
        return Err(RlweError::CiphertextDegree {
            expected: 2,
            found: ct.degree(),
        });
    }
    let p = ct.polys();
    let (mut c0, mut c1) = key_switch(ct.params(), &p[2], &rlk.0)?;
    c0.add_assign(&p[0])?;
    c1.add_assign(&p[1])?;
    Ok(Ciphertext::new(ct.params(), vec![c0, c1], ct.level(), ct.scale())?.with_metadata_of(ct))
}

/// Applies X → X^g to a degree-1 ciphertext and switches back to s.
pub fn apply_galois(ct: &Ciphertext, gk: &GaloisKey) -> Result<Ciphertext> {
    same(ct, gk.key.params().hash())?;
    if ct.degree() != 1 {
        return Err(RlweError::CiphertextDegree {
            expected: 1,
            found: ct.degree(),
        });
    }
    let p = ct.polys();
    let (k0, k1) = key_switch(ct.params(), &p[1], &gk.key)?;
    moved(ct, gk, k0, k1)
}

/// The automorphism of `gk` applied to `ct` from the key switch (k0, k1)
/// of its c1 as it is: the key is held permuted by π⁻¹ (see `GaloisKey`),
/// so c0 is added first and both results are moved by π.
fn moved(ct: &Ciphertext, gk: &GaloisKey, mut k0: RnsPoly, k1: RnsPoly) -> Result<Ciphertext> {
    k0.add_assign(&ct.polys()[0])?;
    let c0 = permute(&k0, &gk.perm)?;
    crate::pool::recycle(k0);
    let c1 = permute(&k1, &gk.perm)?;
    crate::pool::recycle(k1);
    Ok(Ciphertext::new(ct.params(), vec![c0, c1], ct.level(), ct.scale())?.with_metadata_of(ct))
}

/// Applies several automorphisms to one ciphertext, decomposing c_1 once.
pub fn apply_galois_hoisted(ct: &Ciphertext, gks: &[&GaloisKey]) -> Result<Vec<Ciphertext>> {
    if ct.degree() != 1 {
        return Err(RlweError::CiphertextDegree {
            expected: 1,
            found: ct.degree(),
        });
    }
    for gk in gks {
        same(ct, gk.key.params().hash())?;
        gk.key.reaches(ct.level())?;
    }
    let dec = decompose(ct.params(), &ct.polys()[1])?;
    let out = gks
        .iter()
        .map(|gk| {
            let (k0, k1) = key_switch_hoisted(ct.params(), &dec, &gk.key)?;
            moved(ct, gk, k0, k1)
        })
        .collect();
    dec.recycle();
    out
}

/// out[p] = x[perm[p]] (an automorphism in the NTT domain).
pub(crate) fn permute(x: &RnsPoly, perm: &[usize]) -> Result<RnsPoly> {
    if perm.len() != x.degree() || x.domain() != hecloud_math::Domain::Ntt {
        return Err(RlweError::ParameterMismatch);
    }
    Ok(permute_slots(x, perm))
}

/// [`permute`] for a permutation of x's degree (any domain: a key's
/// polynomials are moved by it too).
pub(crate) fn permute_slots(x: &RnsPoly, perm: &[usize]) -> RnsPoly {
    let n = x.degree();
    debug_assert_eq!(perm.len(), n);
    let mut out = crate::pool::pooled_uninit(x.basis(), x.domain());
    crate::keyswitch::for_each_limb(out.data_mut(), n, |(i, o)| {
        let s = x.limb(i);
        for (v, &p) in o.iter_mut().zip(perm) {
            *v = s[p];
        }
    });
    out
}
