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
    let c1 = permute(&p[1], &gk.perm)?;
    let (k0, k1) = key_switch(ct.params(), &c1, &gk.key)?;
    crate::pool::recycle(c1);
    let mut c0 = permute(&p[0], &gk.perm)?;
    c0.add_assign(&k0)?;
    crate::pool::recycle(k0);
    Ok(Ciphertext::new(ct.params(), vec![c0, k1], ct.level(), ct.scale())?.with_metadata_of(ct))
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
    }
    let p = ct.polys();
    let dec = decompose(ct.params(), &p[1])?;
    let out = gks
        .iter()
        .map(|gk| {
            let (k0, k1) = key_switch_hoisted(ct.params(), &dec, &gk.key, Some(&gk.perm))?;
            let mut c0 = permute(&p[0], &gk.perm)?;
            c0.add_assign(&k0)?;
            crate::pool::recycle(k0);
            Ok(
                Ciphertext::new(ct.params(), vec![c0, k1], ct.level(), ct.scale())?
                    .with_metadata_of(ct),
            )
        })
        .collect();
    dec.recycle();
    out
}

/// out[p] = x[perm[p]] (an automorphism in the NTT domain).
pub(crate) fn permute(x: &RnsPoly, perm: &[usize]) -> Result<RnsPoly> {
    let n = x.degree();
    if perm.len() != n || x.domain() != hecloud_math::Domain::Ntt {
        return Err(RlweError::ParameterMismatch);
    }
    let mut out = crate::pool::pooled_uninit(x.basis(), x.domain());
    for (o, s) in out
        .data_mut()
        .chunks_exact_mut(n)
        .zip(x.data().chunks_exact(n))
    {
        for (v, &p) in o.iter_mut().zip(perm) {
            *v = s[p];
        }
    }
    Ok(out)
}
