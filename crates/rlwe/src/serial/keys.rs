//! Public, relinearization, Galois and (exported) secret keys.

use std::sync::Arc;

use hecloud_math::sampling::expand_seed_uniform;

use super::header::{FLAG_SEEDED, HEADER_LEN, Header, Kind, read_header, write_header};
use super::limbs::{Body, packed_poly_bytes, write_poly};
use crate::error::{DecodeError, Result, RlweError};
use crate::keys::{
    GaloisKey, PublicKey, RelinearizationKey, SecretKey, SwitchingKey, cut_to_level,
};
use crate::params::Parameters;

impl PublicKey {
    /// Serialized form (seeded: `a` as its seed).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        write_header(
            &mut out,
            &self.params,
            Kind::PublicKey,
            Header {
                kind: Kind::PublicKey as u8,
                flags: FLAG_SEEDED,
                level: self.params.max_level() as u32,
                scale: 1.0,
                count: 2,
                extra: 0,
                key: self.key,
            },
        );
        write_poly(&mut out, &self.b);
        out.extend_from_slice(&self.seed);
        out
    }

    /// Parses a public key of `params`.
    pub fn from_bytes(params: &Arc<Parameters>, bytes: &[u8]) -> Result<Self> {
        let h = read_header(params, bytes, Kind::PublicKey)?;
        if h.level as usize != params.max_level() || h.count != 2 || h.flags != FLAG_SEEDED {
            return Err(DecodeError::InvalidField {
                field: "level",
                value: h.level as u64,
            }
            .into());
        }
        let basis = params.qp_basis().clone();
        let mut body = Body::new(bytes, key_poly_bytes(params) + 32)?;
        let b = body.poly(&basis)?;
        let seed = body.seed();
        let a = expand_seed_uniform(&seed, &basis);
        Ok(PublicKey {
            params: params.clone(),
            b,
            a,
            seed,
            key: h.key,
        })
    }
}

fn key_poly_bytes(params: &Parameters) -> usize {
    packed_poly_bytes(params.qp_basis())
}

fn write_switching_key(out: &mut Vec<u8>, k: &SwitchingKey, kind: Kind, extra: u64, seeded: bool) {
    let seeds = if seeded { k.seeds.as_ref() } else { None };
    let seeded = seeds.is_some();
    write_header(
        out,
        &k.params,
        kind,
        Header {
            kind: kind as u8,
            flags: if seeded { FLAG_SEEDED } else { 0 },
            level: k.level() as u32,
            scale: 1.0,
            count: k.b.len() as u32,
            extra,
            key: k.key,
        },
    );
    for j in 0..k.b.len() {
        write_poly(out, &k.b[j]);
        if let Some(seeds) = seeds {
            out.extend_from_slice(&seeds[j]);
        } else {
            write_poly(out, &k.a[j]);
        }
    }
}

fn read_switching_key(params: &Arc<Parameters>, bytes: &[u8], h: &Header) -> Result<SwitchingKey> {
    // A key may be cut to a level below the top (`SwitchingKey::at_level`):
    // the primes of Q up to it and P, the digits that level has.
    let level = h.level as usize;
    let lt = params.level(level).map_err(|_| DecodeError::InvalidField {
        field: "level",
        value: h.level as u64,
    })?;
    let digits = lt.digits.len();
    if h.count as usize != digits {
        return Err(DecodeError::InvalidField {
            field: "count",
            value: h.count as u64,
        }
        .into());
    }
    let seeded = h.flags & FLAG_SEEDED != 0;
    let basis = lt.qp.clone();
    let poly = packed_poly_bytes(&basis);
    let per = poly + if seeded { 32 } else { poly };
    let mut body = Body::new(bytes, per * digits)?;
    let (mut b, mut a, mut seeds) = (vec![], vec![], vec![]);
    for _ in 0..digits {
        b.push(body.poly(&basis)?);
        if seeded {
            let s = body.seed();
            // The seed expands over the whole Q·P; the key keeps its limbs.
            let whole = expand_seed_uniform(&s, params.qp_basis());
            a.push(cut_to_level(&whole, &basis, params.max_level(), level));
            seeds.push(s);
        } else {
            a.push(body.poly(&basis)?);
        }
    }
    Ok(SwitchingKey {
        params: params.clone(),
        b,
        a,
        seeds: seeded.then_some(seeds),
        key: h.key,
    })
}

impl RelinearizationKey {
    /// Serialized form; `seeded` writes each `a_j` as its 32-byte seed.
    pub fn to_bytes(&self, seeded: bool) -> Vec<u8> {
        let mut out = Vec::new();
        write_switching_key(&mut out, &self.0, Kind::RelinearizationKey, 0, seeded);
        out
    }

    /// Parses a relinearization key of `params`.
    pub fn from_bytes(params: &Arc<Parameters>, bytes: &[u8]) -> Result<Self> {
        let h = read_header(params, bytes, Kind::RelinearizationKey)?;
        if h.extra != 0 {
            return Err(DecodeError::InvalidField {
                field: "extra",
                value: h.extra,
            }
            .into());
        }
        Ok(Self(read_switching_key(params, bytes, &h)?))
    }
}

impl SwitchingKey {
    /// Serialized form; `seeded` writes each `a_j` as its 32-byte seed.
    /// `tag` is stored in the header for the caller (bootstrapping keeps
    /// the ephemeral secret's Hamming weight there).
    pub fn to_bytes(&self, seeded: bool, tag: u64) -> Vec<u8> {
        let mut out = Vec::new();
        write_switching_key(&mut out, self, Kind::SwitchingKey, tag, seeded);
        out
    }

    /// Parses a switching key of `params`, with the tag it was written with.
    pub fn from_bytes(params: &Arc<Parameters>, bytes: &[u8]) -> Result<(Self, u64)> {
        let h = read_header(params, bytes, Kind::SwitchingKey)?;
        Ok((read_switching_key(params, bytes, &h)?, h.extra))
    }
}

impl GaloisKey {
    /// Serialized form; `seeded` writes each `a_j` as its 32-byte seed.
    pub fn to_bytes(&self, seeded: bool) -> Vec<u8> {
        let mut out = Vec::new();
        write_switching_key(
            &mut out,
            &self.unpermuted_key(),
            Kind::GaloisKey,
            self.galois_element as u64,
            seeded,
        );
        out
    }

    /// Parses a Galois key of `params`.
    pub fn from_bytes(params: &Arc<Parameters>, bytes: &[u8]) -> Result<Self> {
        let h = read_header(params, bytes, Kind::GaloisKey)?;
        let two_n = 2 * params.n() as u64;
        if h.extra >= two_n || h.extra % 2 == 0 {
            return Err(DecodeError::InvalidField {
                field: "galois element",
                value: h.extra,
            }
            .into());
        }
        let key = read_switching_key(params, bytes, &h)?;
        GaloisKey::from_parts(h.extra as usize, key)
    }
}

impl SecretKey {
    /// Explicit export of the secret key (its ternary coefficients, one
    /// byte each). The caller owns the secret bytes from here on.
    pub fn export_bytes(&self) -> zeroize::Zeroizing<Vec<u8>> {
        let mut out = Vec::with_capacity(HEADER_LEN + self.coeffs.len());
        write_header(
            &mut out,
            self.params(),
            Kind::SecretKey,
            Header {
                kind: Kind::SecretKey as u8,
                flags: 0,
                level: self.params().max_level() as u32,
                scale: 1.0,
                count: 1,
                extra: 0,
                key: self.key_id(),
            },
        );
        out.extend(self.coeffs.iter().map(|&c| c as u8));
        zeroize::Zeroizing::new(out)
    }

    /// Imports a secret key exported by [`SecretKey::export_bytes`];
    /// refused if its coefficients are not those of the key id it was
    /// exported with.
    pub fn import_bytes(params: &Arc<Parameters>, bytes: &[u8]) -> Result<Self> {
        let h = read_header(params, bytes, Kind::SecretKey)?;
        if h.count != 1 || h.flags != 0 {
            return Err(DecodeError::InvalidField {
                field: "count",
                value: h.count as u64,
            }
            .into());
        }
        let body = Body::new(bytes, params.n())?;
        let mut coeffs: zeroize::Zeroizing<Vec<i8>> =
            zeroize::Zeroizing::new(body.bytes[HEADER_LEN..].iter().map(|&b| b as i8).collect());
        if coeffs.iter().any(|c| !(-1..=1).contains(c)) {
            coeffs.iter_mut().for_each(|c| *c = 0);
            return Err(RlweError::Decode(DecodeError::InvalidField {
                field: "secret coefficient",
                value: 0,
            }));
        }
        let sk = SecretKey::from_coefficients(params, &coeffs)?;
        if sk.key_id() != h.key {
            return Err(DecodeError::InvalidField {
                field: "key id",
                value: 0,
            }
            .into());
        }
        Ok(sk)
    }
}
