//! Serialization round trips and a randomized decoder test: truncations,
//! bit flips, huge length fields, foreign parameters, wrong versions and
//! kinds are typed errors, never panics or huge allocations.

use hecloud_math::{RnsPoly, Sampler};

use crate::serial::{HEADER_LEN, Kind};
use crate::tests::setup;
use crate::*;

fn fuzz<T>(good: &[u8], decode: impl Fn(&[u8]) -> Result<T>) {
    let mut s = hecloud_math::testing::sampler();
    // Truncations (every header length, random body lengths).
    for len in (0..HEADER_LEN + 8).chain((0..50).map(|_| s.uniform_mod(good.len() as u64) as usize))
    {
        let len = len.min(good.len() - 1);
        assert!(decode(&good[..len]).is_err(), "truncated to {len}");
    }
    // Trailing bytes.
    let mut long = good.to_vec();
    long.push(0);
    assert!(matches!(
        decode(&long),
        Err(RlweError::Decode(DecodeError::TrailingBytes(1)))
    ));
    // Random bit flips anywhere: an error or a valid object, never a panic.
    for _ in 0..200 {
        let mut b = good.to_vec();
        let i = s.uniform_mod(b.len() as u64) as usize;
        b[i] ^= 1 << (s.next_u64() % 8);
        let _ = decode(&b);
    }
    // Every header byte flipped: the header fields are all checked.
    for i in 0..HEADER_LEN {
        let mut b = good.to_vec();
        b[i] ^= 0x80;
        let _ = decode(&b);
    }
    // Huge count and level fields must not allocate.
    for (at, v) in [(52usize, u32::MAX), (40, u32::MAX), (52, 1 << 20), (40, 7)] {
        let mut b = good.to_vec();
        b[at..at + 4].copy_from_slice(&v.to_le_bytes());
        assert!(decode(&b).is_err(), "field at {at} = {v}");
    }
    // Wrong version, magic.
    let mut b = good.to_vec();
    b[4] = 9;
    assert!(matches!(
        decode(&b),
        Err(RlweError::Decode(DecodeError::UnsupportedVersion {
            found: 9,
            ..
        }))
    ));
    let mut b = good.to_vec();
    b[0] = b'X';
    assert!(matches!(
        decode(&b),
        Err(RlweError::Decode(DecodeError::BadMagic))
    ));
    // A residue ≥ its prime (the first; a seeded ciphertext opens with
    // its seed).
    let mut b = good.to_vec();
    let seeded_ct = good[6] == Kind::Ciphertext as u8 && good[7] & 1 == 1;
    let at = HEADER_LEN + if seeded_ct { 32 } else { 0 };
    b[at..at + 8].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(matches!(
        decode(&b),
        Err(RlweError::Decode(DecodeError::ResidueOutOfRange))
    ));
    // Random garbage.
    for len in [0, 10, 64, 1000, good.len()] {
        let g: Vec<u8> = (0..len).map(|_| s.next_u64() as u8).collect();
        assert!(decode(&g).is_err());
    }
}

#[test]
fn ciphertexts_roundtrip_and_seeded_is_half_size() {
    let (params, sk) = setup(10, 3, None);
    let mut enc = Encryptor::new(&params);
    let pk = KeyGenerator::new(&params).gen_public_key(&sk).unwrap();
    let mut s = hecloud_math::testing::sampler();
    for level in [0, 3] {
        let m = s.uniform_poly(params.q_at(level).unwrap(), hecloud_math::Domain::Ntt);
        let pt = Plaintext::new(&params, m, level, 2f64.powi(40)).unwrap();
        let seeded = enc.encrypt_sk(&sk, &pt).unwrap();
        let full = enc.encrypt_pk(&pk, &pt).unwrap();
        let (bs, bf) = (seeded.to_bytes(), full.to_bytes());
        assert_eq!(bs.len(), seeded.serialized_len());
        assert!((bs.len() as f64) < 0.55 * bf.len() as f64);
        let back = Ciphertext::from_bytes(&params, &bs).unwrap();
        assert_eq!(back, seeded);
        assert!(back.is_seeded());
        assert_eq!(Ciphertext::from_bytes(&params, &bf).unwrap(), full);
        assert_eq!(Plaintext::from_bytes(&params, &pt.to_bytes()).unwrap(), pt);
        fuzz(&bs, |b| Ciphertext::from_bytes(&params, b));
        fuzz(&bf, |b| Ciphertext::from_bytes(&params, b));
        fuzz(&pt.to_bytes(), |b| Plaintext::from_bytes(&params, b));
    }
    // Wrong kind, foreign parameters.
    let (other, _) = setup(10, 2, None);
    let m = RnsPoly::zero(params.q_at(1).unwrap(), hecloud_math::Domain::Ntt);
    let pt = Plaintext::new(&params, m, 1, 1.0).unwrap();
    let b = enc.encrypt_sk(&sk, &pt).unwrap().to_bytes();
    assert!(matches!(
        Plaintext::from_bytes(&params, &b),
        Err(RlweError::Decode(DecodeError::WrongKind {
            expected: 2,
            found: 1
        }))
    ));
    assert!(matches!(
        Ciphertext::from_bytes(&other, &b),
        Err(RlweError::Decode(DecodeError::ParameterHash))
    ));
    assert_eq!(Kind::Ciphertext as u8, 1);
}

/// Any range of a ciphertext's bytes made on its own is that range of
/// `to_bytes`: ranges at and around every segment and group boundary, and
/// random ones, of seeded and unseeded ciphertexts.
#[test]
fn byte_ranges_are_slices_of_the_serialized_form() {
    let (params, sk) = setup(10, 3, None);
    let mut enc = Encryptor::new(&params);
    let pk = KeyGenerator::new(&params).gen_public_key(&sk).unwrap();
    let mut s = hecloud_math::testing::sampler();
    let m = s.uniform_poly(params.q_at(3).unwrap(), hecloud_math::Domain::Ntt);
    let pt = Plaintext::new(&params, m, 3, 2f64.powi(40)).unwrap();
    for ct in [
        enc.encrypt_sk(&sk, &pt).unwrap(),
        enc.encrypt_pk(&pk, &pt).unwrap(),
    ] {
        let all = ct.to_bytes();
        let mut pieces = vec![];
        ct.write_pieces(|p| pieces.extend_from_slice(p));
        assert_eq!(pieces, all);
        // Segment ends (header, limbs, seed) and the edges of the groups
        // of eight residues next to them.
        let mut cuts = vec![0, all.len()];
        let mut at = HEADER_LEN;
        cuts.push(at);
        for p in &ct.polys()[..if ct.is_seeded() { 1 } else { ct.polys().len() }] {
            for m in p.basis().moduli() {
                let bits = crate::serial::residue_bits(m.value()) as usize;
                cuts.extend([at + bits, at + bits - 1, at + 1]);
                at += (p.degree() * bits).div_ceil(8);
                cuts.extend([at - 1, at, at - bits]);
            }
        }
        let ends: Vec<usize> = cuts.iter().copied().filter(|&c| c <= all.len()).collect();
        let mut ranges = vec![];
        for &a in &ends {
            for &b in &ends {
                if a < b {
                    ranges.push((a, b));
                }
            }
        }
        for _ in 0..200 {
            let a = s.uniform_mod(all.len() as u64) as usize;
            let b = a + s.uniform_mod((all.len() - a) as u64 + 1) as usize;
            ranges.push((a, b));
        }
        for (a, b) in ranges {
            let mut got = vec![0xA5; b - a];
            ct.write_range(a, &mut got);
            assert!(got == all[a..b], "bytes {a}..{b} of {}", all.len());
        }
    }
}

#[test]
fn keys_roundtrip_seeded_and_not() {
    let (params, sk) = setup(10, 3, Some(2));
    let mut kg = KeyGenerator::new(&params);
    let pk = kg.gen_public_key(&sk).unwrap();
    let rlk = kg.gen_relinearization_key(&sk).unwrap();
    let gk = kg.gen_galois_key(&sk, 5).unwrap();
    let pb = pk.to_bytes();
    assert_eq!(PublicKey::from_bytes(&params, &pb).unwrap(), pk);
    fuzz(&pb, |b| PublicKey::from_bytes(&params, b));
    let (rs, rf) = (rlk.to_bytes(true), rlk.to_bytes(false));
    assert_eq!(rlk.0.serialized_len(true), rs.len());
    assert_eq!(rlk.0.serialized_len(false), rf.len());
    assert!((rs.len() as f64) < 0.55 * rf.len() as f64);
    assert_eq!(RelinearizationKey::from_bytes(&params, &rs).unwrap(), rlk);
    let unseeded = RelinearizationKey::from_bytes(&params, &rf).unwrap();
    assert_eq!(unseeded.0.b, rlk.0.b);
    assert_eq!(unseeded.0.a, rlk.0.a);
    // A key loaded without seeds re-serializes in full.
    assert_eq!(unseeded.to_bytes(true).len(), rf.len());
    fuzz(&rs, |b| RelinearizationKey::from_bytes(&params, b));
    // A bare switching key keeps its tag; a relinearization key's bytes
    // are not one.
    let sw = rlk.0.to_bytes(true, 32);
    assert_eq!(sw.len(), rlk.0.serialized_len(true));
    assert_eq!(
        SwitchingKey::from_bytes(&params, &sw).unwrap(),
        (rlk.0.clone(), 32)
    );
    assert!(SwitchingKey::from_bytes(&params, &rs).is_err());
    fuzz(&sw, |b| SwitchingKey::from_bytes(&params, b));
    fuzz(&rf, |b| RelinearizationKey::from_bytes(&params, b));
    let gb = gk.to_bytes(true);
    let back = GaloisKey::from_bytes(&params, &gb).unwrap();
    assert_eq!(back.galois_element(), 5);
    assert_eq!(back.switching_key(), gk.switching_key());
    fuzz(&gb, |b| GaloisKey::from_bytes(&params, b));
    let mut even = gb.clone();
    even[56] = 4;
    assert!(GaloisKey::from_bytes(&params, &even).is_err());
    // Secret key: explicit export and import.
    let sb = sk.export_bytes();
    let sk2 = SecretKey::import_bytes(&params, &sb).unwrap();
    assert_eq!(sk2.s, sk.s);
    let mut bad = sb.to_vec();
    bad[HEADER_LEN] = 7;
    assert!(SecretKey::import_bytes(&params, &bad).is_err());
    assert!(SecretKey::import_bytes(&params, &sb[..100]).is_err());
}

#[test]
fn polynomials_take_the_bits_of_their_primes() {
    let (params, _) = setup(10, 3, None);
    // q_0 has 55 bits, the others 45 (see `params::tests::small`).
    assert_eq!(params.poly_bytes(0), 1024 * 55 / 8);
    assert_eq!(params.poly_bytes(3), 1024 * (55 + 3 * 45) / 8);
    assert_eq!(params.poly_bytes(4), 0);
}

/// The streaming decoder, fed in random splits, agrees with decoding the
/// whole buffer: the same ciphertext, or an error wherever it errs.
#[test]
fn ciphertexts_decode_the_same_streamed() {
    use crate::serial::CiphertextDecoder;
    let (params, sk) = setup(10, 3, None);
    let mut enc = Encryptor::new(&params);
    let pk = KeyGenerator::new(&params).gen_public_key(&sk).unwrap();
    let mut s = hecloud_math::testing::sampler();
    let streamed = |b: &[u8], s: &mut Sampler| -> Result<Ciphertext> {
        let mut d = CiphertextDecoder::new(&params, b.len());
        let mut at = 0;
        while at < b.len() {
            // Splits inside the header, a limb and the seed, and whole limbs.
            let step = 1 + s.uniform_mod(3000) as usize;
            let end = (at + step).min(b.len());
            d.push(&b[at..end])?;
            at = end;
        }
        d.finish()
    };
    for level in [0, 3] {
        let m = s.uniform_poly(params.q_at(level).unwrap(), hecloud_math::Domain::Ntt);
        let pt = Plaintext::new(&params, m, level, 2f64.powi(40)).unwrap();
        for ct in [
            enc.encrypt_sk(&sk, &pt).unwrap(),
            enc.encrypt_pk(&pk, &pt).unwrap(),
        ] {
            let good = ct.to_bytes();
            assert_eq!(streamed(&good, &mut s).unwrap(), ct);
            // A residue out of range in the last limb (128 bits set cover
            // at least one residue whole).
            let mut b = good.clone();
            let at = b.len() - if ct.is_seeded() { 32 } else { 0 } - 24;
            b[at..at + 16].fill(0xff);
            for r in [Ciphertext::from_bytes(&params, &b), streamed(&b, &mut s)] {
                assert_eq!(r, Err(RlweError::Decode(DecodeError::ResidueOutOfRange)));
            }
            for _ in 0..100 {
                let mut b = good.to_vec();
                let i = s.uniform_mod(b.len() as u64) as usize;
                b[i] ^= 1 << (s.next_u64() % 8);
                let len = if s.next_u64().is_multiple_of(4) {
                    s.uniform_mod(b.len() as u64) as usize
                } else {
                    b.len()
                };
                assert_eq!(
                    streamed(&b[..len], &mut s),
                    Ciphertext::from_bytes(&params, &b[..len]),
                    "flip at {i}, length {len}"
                );
            }
        }
    }
    // More bytes than announced, and a call after an error.
    let ct = enc
        .encrypt_sk(
            &sk,
            &Plaintext::new(
                &params,
                s.uniform_poly(params.q_at(1).unwrap(), hecloud_math::Domain::Ntt),
                1,
                1.0,
            )
            .unwrap(),
        )
        .unwrap();
    let b = ct.to_bytes();
    let mut d = CiphertextDecoder::new(&params, b.len() - 1);
    assert_eq!(
        d.push(&b),
        Err(RlweError::Decode(DecodeError::TrailingBytes(1)))
    );
    assert!(d.finish().is_err());
    let mut d = CiphertextDecoder::new(&params, b.len());
    d.push(&b[..100]).unwrap();
    assert!(matches!(
        d.finish(),
        Err(RlweError::Decode(DecodeError::Truncated { have: 100, .. }))
    ));
}
