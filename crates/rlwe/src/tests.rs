//! Encrypt → operate → decrypt tests against plaintext polynomial arithmetic.

use std::sync::Arc;

use hecloud_math::{Domain, RnsPoly};

use crate::keys::galois_element_for_rotation;
use crate::keyswitch::{
    key_switch_ext, key_switch_ext_add_moved, lift_times_p, mod_down, mod_down_pair,
    mod_down_rescale, mod_down_rescale_pair, mod_down_rescale_pair_adding,
};
use crate::params::tests::small;
use crate::*;

pub(crate) fn setup(
    log_n: u32,
    levels: usize,
    dnum: Option<usize>,
) -> (Arc<Parameters>, SecretKey) {
    let params = Parameters::new_insecure_for_tests(small(log_n, levels, dnum)).unwrap();
    let sk = KeyGenerator::new(&params).gen_secret_key().unwrap();
    (params, sk)
}

/// A plaintext with small random signed coefficients.
fn random_message(params: &Arc<Parameters>, level: usize, bound: i64) -> (Vec<i64>, Plaintext) {
    let mut s = hecloud_math::testing::sampler();
    let m: Vec<i64> = (0..params.n())
        .map(|_| (s.next_u64() % (2 * bound as u64 + 1)) as i64 - bound)
        .collect();
    let mut p = RnsPoly::from_signed(params.q_at(level).unwrap(), &m).unwrap();
    p.to_ntt();
    (m, Plaintext::new(params, p, level, 1.0).unwrap())
}

/// Centered coefficients of a decrypted plaintext (via its first two primes).
fn decrypt_coeffs(sk: &SecretKey, ct: &Ciphertext) -> Vec<i128> {
    let mut p = Decryptor::new(sk).decrypt(ct).unwrap().into_poly();
    p.to_coefficient();
    p.to_bigint_centered()
        .unwrap()
        .into_iter()
        .map(|x| i128::try_from(x).unwrap())
        .collect()
}

/// `ct` with each component divided by its last prime (rounded), one
/// level down: the reference for fused rescales.
fn rescaled(ct: &Ciphertext) -> Ciphertext {
    let polys: Vec<RnsPoly> = ct
        .polys()
        .iter()
        .map(|c| {
            let mut c = c.clone();
            c.rescale().unwrap();
            c
        })
        .collect();
    Ciphertext::new(ct.params(), polys, ct.level() - 1, 1.0).unwrap()
}

fn max_diff(a: &[i128], b: &[i64]) -> i128 {
    a.iter()
        .zip(b)
        .map(|(x, &y)| (x - y as i128).abs())
        .max()
        .unwrap()
}

/// Negacyclic product by schoolbook (independent reference).
fn negacyclic(a: &[i64], b: &[i64]) -> Vec<i64> {
    let n = a.len();
    let mut out = vec![0i64; n];
    for i in 0..n {
        for j in 0..n {
            let p = a[i] * b[j];
            if i + j < n {
                out[i + j] += p;
            } else {
                out[i + j - n] -= p;
            }
        }
    }
    out
}

/// m(X^g) in the coefficient domain (independent reference).
fn automorphism_plain(m: &[i64], g: usize) -> Vec<i64> {
    let n = m.len();
    let mut out = vec![0i64; n];
    for (i, &c) in m.iter().enumerate() {
        let e = i * g % (2 * n);
        if e < n {
            out[e] += c;
        } else {
            out[e - n] -= c;
        }
    }
    out
}

#[test]
fn pk_and_sk_encryption_decrypt_with_small_noise() {
    let (params, sk) = setup(10, 3, None);
    let pk = KeyGenerator::new(&params).gen_public_key(&sk).unwrap();
    let mut enc = Encryptor::new(&params);
    for level in [0, 2, 3] {
        let (m, pt) = random_message(&params, level, 1 << 30);
        let ct = enc.encrypt_pk(&pk, &pt).unwrap();
        assert!(!ct.is_seeded());
        // pk noise: e·u + e_0 + e_1·s, a few hundred at most for N = 1024.
        // Noise divided by P: rounding errors times s only.
        assert!(max_diff(&decrypt_coeffs(&sk, &ct), &m) < 1 << 9);
        let ct = enc.encrypt_sk(&sk, &pt).unwrap();
        assert!(ct.is_seeded());
        assert!(max_diff(&decrypt_coeffs(&sk, &ct), &m) < 20);
    }
}

#[test]
fn relinearization_matches_plain_products() {
    for dnum in [Some(2), None, Some(4)] {
        let (params, sk) = setup(10, 3, dnum);
        let mut kg = KeyGenerator::new(&params);
        let rlk = kg.gen_relinearization_key(&sk).unwrap();
        let mut enc = Encryptor::new(&params);
        for level in [params.max_level(), 1, 0] {
            let (m1, p1) = random_message(&params, level, 1 << 10);
            let (m2, p2) = random_message(&params, level, 1 << 10);
            let a = enc.encrypt_sk(&sk, &p1).unwrap();
            let b = enc.encrypt_sk(&sk, &p2).unwrap();
            let (x, y) = (a.polys(), b.polys());
            let d0 = x[0].mul(&y[0]).unwrap();
            let mut d1 = x[0].mul(&y[1]).unwrap();
            d1.mul_add_assign(&x[1], &y[0]).unwrap();
            let d2 = x[1].mul(&y[1]).unwrap();
            let ct3 = Ciphertext::new(&params, vec![d0, d1, d2], level, 1.0).unwrap();
            let ct = ops::relinearize(&ct3, &rlk).unwrap();
            let want = negacyclic(&m1, &m2);
            let got = decrypt_coeffs(&sk, &ct);
            // Product noise ≈ |m|·|e|·N ≈ 2^10·20·2^10 plus key-switching noise.
            let err = max_diff(&got, &want);
            assert!(err < 1 << 26, "dnum {dnum:?} level {level}: error {err}");
            let err3 = max_diff(&decrypt_coeffs(&sk, &ct3), &want);
            assert!(err3 < 1 << 26);
        }
    }
}

#[test]
fn galois_automorphisms_match_plain_for_many_elements() {
    let (params, sk) = setup(10, 2, Some(2));
    let n = params.n();
    let mut kg = KeyGenerator::new(&params);
    let rotations: Vec<i64> = vec![1, 2, 3, 5, 7, 16, 100, 255, -1, -3, 300];
    let gks = kg.gen_galois_keys(&sk, &rotations, true).unwrap();
    let mut enc = Encryptor::new(&params);
    let (m, pt) = random_message(&params, params.max_level(), 1 << 20);
    let ct = enc.encrypt_sk(&sk, &pt).unwrap();
    let elements: Vec<usize> = gks.elements().collect();
    assert_eq!(elements.len(), rotations.len() + 1);
    let refs: Vec<&GaloisKey> = elements.iter().map(|&g| gks.get(g).unwrap()).collect();
    let hoisted = ops::apply_galois_hoisted(&ct, &refs).unwrap();
    for (g, h) in elements.iter().zip(&hoisted) {
        let want = automorphism_plain(&m, *g);
        let single = ops::apply_galois(&ct, gks.get(*g).unwrap()).unwrap();
        assert!(
            max_diff(&decrypt_coeffs(&sk, &single), &want) < 1 << 16,
            "g = {g}"
        );
        assert!(
            max_diff(&decrypt_coeffs(&sk, h), &want) < 1 << 16,
            "hoisted g = {g}"
        );
    }
    assert_eq!(galois_element_for_rotation(1, n), 5);
    // Missing key: a typed error.
    assert_eq!(gks.get(9).unwrap_err(), RlweError::MissingGaloisKey(9));
}

/// A key cut to a level switches there exactly as the whole key does
/// (single and hoisted, and after a serialization round trip, seeded or
/// not), with fewer digits and bytes, and is refused above its level.
#[test]
fn keys_cut_to_a_level_switch_like_the_whole_key_there() {
    let (params, sk) = setup(10, 4, Some(5));
    let mut kg = KeyGenerator::new(&params);
    let g = galois_element_for_rotation(3, params.n());
    let keys = kg.gen_galois_keys(&sk, &[3], false).unwrap();
    let whole = keys.get(g).unwrap();
    let mut enc = Encryptor::new(&params);
    let (m, pt) = random_message(&params, params.max_level(), 1 << 20);
    let top = enc.encrypt_sk(&sk, &pt).unwrap();
    let top_level = params.max_level();
    assert_eq!(whole.switching_key().level(), top_level);
    for level in 0..top_level {
        let cut = whole.at_level(level).unwrap();
        let k = cut.switching_key();
        assert_eq!((k.level(), k.digits()), (level, level + 1));
        assert!(k.serialized_len(true) < whole.switching_key().serialized_len(true));
        let mut ct = top.clone();
        ct.drop_to_level(level).unwrap();
        let want = ops::apply_galois(&ct, whole).unwrap();
        assert!(max_diff(&decrypt_coeffs(&sk, &want), &automorphism_plain(&m, g)) < 1 << 16);
        assert_eq!(ops::apply_galois(&ct, &cut).unwrap(), want);
        assert_eq!(ops::apply_galois_hoisted(&ct, &[&cut]).unwrap()[0], want);
        for seeded in [true, false] {
            let bytes = cut.to_bytes(seeded);
            assert_eq!(bytes.len(), k.serialized_len(seeded));
            let back = GaloisKey::from_bytes(&params, &bytes).unwrap();
            assert_eq!(ops::apply_galois(&ct, &back).unwrap(), want);
        }
        let above = RlweError::KeyBelowLevel {
            key: level,
            level: top_level,
        };
        assert_eq!(ops::apply_galois(&top, &cut).unwrap_err(), above);
        assert_eq!(ops::apply_galois_hoisted(&top, &[&cut]).unwrap_err(), above);
    }
    assert!(matches!(
        whole.at_level(top_level + 1),
        Err(RlweError::LevelOutOfRange { .. })
    ));
    // Generated cut: the higher of two levels asked for the same rotation.
    let at = kg
        .gen_galois_keys_at_levels(&sk, &[(3, 1), (3, 2)], false)
        .unwrap();
    assert_eq!(at.get(g).unwrap().switching_key().level(), 2);
}

#[test]
fn fused_mod_down_rescale_matches_separate_steps() {
    let (params, sk) = setup(10, 3, None);
    let mut kg = KeyGenerator::new(&params);
    let rlk = kg.gen_relinearization_key(&sk).unwrap();
    let mut s = hecloud_math::testing::sampler();
    let level = params.max_level();
    let d = s.uniform_poly(params.q_at(level).unwrap(), Domain::Ntt);
    let ext = key_switch_ext(&params, &d, &rlk.0).unwrap();
    let mut sep = mod_down(&params, level, &ext.c0).unwrap();
    sep.rescale().unwrap();
    let fused = mod_down_rescale(&params, level, &ext.c0).unwrap();
    let (mut a, mut b) = (sep, fused);
    a.to_coefficient();
    b.to_coefficient();
    let diff = a.sub(&b).unwrap();
    let m = diff.basis().moduli()[0];
    assert!(diff.limb(0).iter().all(|&x| m.center(x).abs() <= 4));
    // P·x divided by P gives x back exactly.
    let px = lift_times_p(&params, &d).unwrap();
    assert_eq!(mod_down(&params, level, &px).unwrap(), d);
    assert!(
        mod_down_rescale(
            &params,
            0,
            &lift_times_p(
                &params,
                &RnsPoly::zero(params.q_at(0).unwrap(), Domain::Ntt)
            )
            .unwrap()
        )
        .is_err()
    );
}

/// ⌊a / b⌋ for b > 0.
fn num_integer_floor(a: &num_bigint::BigInt, b: &num_bigint::BigInt) -> num_bigint::BigInt {
    let (q, r) = (a / b, a % b);
    if r.sign() == num_bigint::Sign::Minus {
        q - 1
    } else {
        q
    }
}

/// The components of a ciphertext divided together give what each gives
/// alone, bit for bit, and exact big-integer division by P gives, to the
/// rounding, on the threaded path (N = 2^12) too.
#[test]
fn paired_mod_downs_match_single_ones() {
    // Nine levels: several groups of target limbs per component.
    for log_n in [10, 12] {
        let (params, sk) = setup(log_n, 9, None);
        let mut kg = KeyGenerator::new(&params);
        let rlk = kg.gen_relinearization_key(&sk).unwrap();
        let mut s = hecloud_math::testing::sampler();
        let level = params.max_level();
        let d = s.uniform_poly(params.q_at(level).unwrap(), Domain::Ntt);
        let ext = key_switch_ext(&params, &d, &rlk.0).unwrap();
        let (a, b) = mod_down_pair(&params, level, &ext.c0, &ext.c1).unwrap();
        assert_eq!(a, mod_down(&params, level, &ext.c0).unwrap(), "2^{log_n}");
        assert_eq!(b, mod_down(&params, level, &ext.c1).unwrap(), "2^{log_n}");
        let (a, b) = mod_down_rescale_pair(&params, level, &ext.c0, &ext.c1).unwrap();
        assert_eq!(a, mod_down_rescale(&params, level, &ext.c0).unwrap());
        assert_eq!(b, mod_down_rescale(&params, level, &ext.c1).unwrap());
        // Folding x + P·a into the division gives what adding P·a first
        // does, bit for bit (a's limb at q_l is divided out with P).
        let (a0, a1) = (
            s.uniform_poly(params.q_at(level).unwrap(), Domain::Ntt),
            s.uniform_poly(params.q_at(level).unwrap(), Domain::Ntt),
        );
        let plus_p = |x: &RnsPoly, a: &RnsPoly| x.add(&lift_times_p(&params, a).unwrap()).unwrap();
        let (x0, x1) = (plus_p(&ext.c0, &a0), plus_p(&ext.c1, &a1));
        let fused =
            mod_down_rescale_pair_adding(&params, level, [&ext.c0, &ext.c1], [&a0, &a1]).unwrap();
        assert_eq!(
            fused,
            mod_down_rescale_pair(&params, level, &x0, &x1).unwrap(),
            "2^{log_n}"
        );
        let below = s.uniform_poly(params.q_at(level - 1).unwrap(), Domain::Ntt);
        assert!(
            mod_down_rescale_pair_adding(&params, level, [&ext.c0, &ext.c1], [&a0, &below])
                .is_err()
        );
        // Against exact big-integer division: ⌊x / P⌉ in every limb.
        let centered = |p: &RnsPoly| {
            let mut p = p.clone();
            p.to_coefficient();
            p.to_bigint_centered().unwrap()
        };
        let big_p: num_bigint::BigInt = params
            .p_basis()
            .moduli()
            .iter()
            .map(|m| num_bigint::BigInt::from(m.value()))
            .product();
        let (a, b) = mod_down_pair(&params, level, &ext.c0, &ext.c1).unwrap();
        for (x, got) in [(&ext.c0, a), (&ext.c1, b)] {
            for (xi, gi) in centered(x).iter().zip(&centered(&got)) {
                // round(x / P) = ⌊(2x + P) / 2P⌋.
                let want = num_integer_floor(&(2 * xi + &big_p), &(2 * &big_p));
                let diff = &want - gi;
                assert!(
                    diff >= (-1).into() && diff <= 1.into(),
                    "2^{log_n}: {want} vs {gi}"
                );
            }
        }
        // A component over another basis is refused.
        assert!(mod_down_pair(&params, level, &ext.c0, &d).is_err());
    }
}

#[test]
fn mismatches_are_typed_errors() {
    let (params, sk) = setup(10, 2, None);
    let (other, sk2) = setup(11, 2, None);
    let mut kg = KeyGenerator::new(&params);
    let rlk = kg.gen_relinearization_key(&sk).unwrap();
    let (_, pt) = random_message(&params, 1, 10);
    let mut enc2 = Encryptor::new(&other);
    assert_eq!(
        enc2.encrypt_sk(&sk2, &pt).unwrap_err(),
        RlweError::ParameterMismatch
    );
    let ct = Encryptor::new(&params).encrypt_sk(&sk, &pt).unwrap();
    assert_eq!(
        Decryptor::new(&sk2).decrypt(&ct).unwrap_err(),
        RlweError::ParameterMismatch
    );
    assert!(matches!(
        ops::relinearize(&ct, &rlk),
        Err(RlweError::CiphertextDegree {
            expected: 2,
            found: 1
        })
    ));
    let mut kg2 = KeyGenerator::new(&other);
    assert_eq!(
        kg2.gen_relinearization_key(&sk).unwrap_err(),
        RlweError::ParameterMismatch
    );
    assert!(params.q_at(9).is_err());
    assert!(Ciphertext::new(&params, vec![ct.polys()[0].clone()], 2, 1.0).is_err());
    assert!(Ciphertext::new(&params, ct.polys().to_vec(), 2, 1.0).is_err());
}

#[test]
fn secret_key_roundtrip_and_redaction() {
    let (params, sk) = setup(10, 1, None);
    let c = sk.export_coefficients();
    let sk2 = SecretKey::from_coefficients(&params, &c).unwrap();
    assert_eq!(sk2.s, sk.s);
    assert!(SecretKey::from_coefficients(&params, &[2i8; 1024]).is_err());
    assert!(SecretKey::from_coefficients(&params, &[0i8; 5]).is_err());
    assert!(!format!("{sk:?}").contains('1'));
}

/// Under a plaintext modulus t every noise term is a multiple of t: public-
/// and secret-key encryption, relinearization, automorphisms and the fused
/// ModDown + rescale decrypt to the exact message mod t (times q_l⁻¹ for the
/// rescale), and the noise stays small.
#[test]
fn plaintext_modulus_keeps_the_message_exact_mod_t() {
    let t = 65537u64;
    let mut lit = small(10, 3, None);
    lit.plaintext_modulus = Some(t);
    let params = Parameters::new_insecure_for_tests(lit.clone()).unwrap();
    assert_eq!(params.plaintext_modulus(), Some(t));
    let plain = Parameters::new_insecure_for_tests(small(10, 3, None)).unwrap();
    assert_ne!(params.hash(), plain.hash(), "t is part of the identity");
    let mut kg = KeyGenerator::new(&params);
    let sk = kg.gen_secret_key().unwrap();
    let pk = kg.gen_public_key(&sk).unwrap();
    let rlk = kg.gen_relinearization_key(&sk).unwrap();
    let gks = kg.gen_galois_keys(&sk, &[1, -3], false).unwrap();
    let mut enc = Encryptor::new(&params);
    let mod_t = |x: i128| x.rem_euclid(t as i128) as i64;
    let reduce = |v: &[i64]| v.iter().map(|&x| mod_t(x as i128)).collect::<Vec<_>>();
    let decrypt_mod_t = |ct: &Ciphertext| -> (Vec<i64>, i128) {
        let c = decrypt_coeffs(&sk, ct);
        let noise = c.iter().map(|x| x.abs()).max().unwrap() / t as i128;
        (c.into_iter().map(mod_t).collect(), noise)
    };
    let level = params.max_level();
    let bound = (t / 2) as i64;
    let (m1, p1) = random_message(&params, level, bound);
    let (m2, p2) = random_message(&params, level, bound);
    let a = enc.encrypt_pk(&pk, &p1).unwrap();
    let b = enc.encrypt_sk(&sk, &p2).unwrap();
    for (ct, m) in [(&a, &m1), (&b, &m2)] {
        let (got, noise) = decrypt_mod_t(ct);
        assert_eq!(got, reduce(m));
        assert!(noise < 1 << 12, "fresh noise {noise}·t");
    }
    let (x, y) = (a.polys(), b.polys());
    let d0 = x[0].mul(&y[0]).unwrap();
    let mut d1 = x[0].mul(&y[1]).unwrap();
    d1.mul_add_assign(&x[1], &y[0]).unwrap();
    let d2 = x[1].mul(&y[1]).unwrap();
    let ct3 = Ciphertext::new(&params, vec![d0, d1, d2], level, 1.0).unwrap();
    let prod = ops::relinearize(&ct3, &rlk).unwrap();
    let m12: Vec<i64> = {
        // The negacyclic product mod t, in i128 against overflow.
        let n = m1.len();
        let mut out = vec![0i128; n];
        for i in 0..n {
            for j in 0..n {
                let p = m1[i] as i128 * m2[j] as i128;
                if i + j < n {
                    out[i + j] += p;
                } else {
                    out[i + j - n] -= p;
                }
            }
        }
        out.into_iter().map(mod_t).collect()
    };
    assert_eq!(decrypt_mod_t(&prod).0, m12);
    for g in gks.elements() {
        let rotated = ops::apply_galois(&a, gks.get(g).unwrap()).unwrap();
        assert_eq!(
            decrypt_mod_t(&rotated).0,
            reduce(&automorphism_plain(&m1, g))
        );
    }
    // The fused ModDown + rescale of P·c divides by q_l: the message comes
    // back times q_l⁻¹ mod t, with the noise divided by q_l.
    let ql = params.q_modulus(level).unwrap().value();
    let tm = hecloud_math::Modulus::new(t).unwrap();
    let ql_inv = tm.inv(tm.reduce(ql)).unwrap();
    let polys: Vec<RnsPoly> = a
        .polys()
        .iter()
        .map(|c| mod_down_rescale(&params, level, &lift_times_p(&params, c).unwrap()).unwrap())
        .collect();
    let switched = Ciphertext::new(&params, polys, level - 1, 1.0).unwrap();
    let (got, noise) = decrypt_mod_t(&switched);
    let want: Vec<i64> = reduce(&m1)
        .iter()
        .map(|&x| tm.mul(x as u64, ql_inv) as i64)
        .collect();
    assert_eq!(got, want);
    assert!(noise < 1 << 10, "switched noise {noise}·t");
    // The factor travels with the bytes, and only units of Z_t are accepted.
    let mut c = a.clone();
    c.set_factor(ql_inv);
    let back = Ciphertext::from_bytes(&params, &c.to_bytes()).unwrap();
    assert_eq!(back.factor(), ql_inv);
    let mut bad = c.to_bytes();
    bad[56..64].copy_from_slice(&t.to_le_bytes());
    assert!(Ciphertext::from_bytes(&params, &bad).is_err());
    // A t that is a multiple of a prime, or 0/1, is refused.
    for bad_t in [0, 1, 1 << 62] {
        lit.plaintext_modulus = Some(bad_t);
        assert!(Parameters::new_insecure_for_tests(lit.clone()).is_err());
    }
}

/// Objects of two secret keys over the same parameters meet: every
/// operation refuses them with `KeyMismatch` (their result would be noise),
/// while the keys' own objects go through, the key id is kept by every
/// operation and survives serialization, and an object bound to no key
/// goes with any.
#[test]
fn objects_of_another_secret_key_are_refused() {
    let (params, sk) = setup(10, 2, None);
    let other = KeyGenerator::new(&params).gen_secret_key().unwrap();
    assert_ne!(sk.key_id(), other.key_id());
    assert!(!sk.key_id().is_none());
    // The id is the secret's: the same coefficients give the same id.
    let again = SecretKey::from_coefficients(&params, &sk.export_coefficients()).unwrap();
    assert_eq!(again.key_id(), sk.key_id());
    let mut kg = KeyGenerator::new(&params);
    let (pk, rlk) = (
        kg.gen_public_key(&sk).unwrap(),
        kg.gen_relinearization_key(&sk).unwrap(),
    );
    let gk = kg.gen_galois_key(&sk, 5).unwrap();
    let other_gk = kg.gen_galois_key(&other, 5).unwrap();
    assert_eq!(pk.key_id(), sk.key_id());
    assert_eq!(rlk.0.key_id(), sk.key_id());
    assert_eq!(
        gk.at_level(1).unwrap().switching_key().key_id(),
        sk.key_id()
    );

    let (_, pt) = random_message(&params, 2, 10);
    let mine = Encryptor::new(&params).encrypt_pk(&pk, &pt).unwrap();
    let theirs = Encryptor::new(&params).encrypt_sk(&other, &pt).unwrap();
    assert_eq!(mine.key_id(), sk.key_id());
    assert_eq!(theirs.key_id(), other.key_id());
    let mismatch = |r: Result<Ciphertext>| matches!(r, Err(RlweError::KeyMismatch { .. }));

    // Decryption under another key.
    assert!(matches!(
        Decryptor::new(&sk).decrypt(&theirs),
        Err(RlweError::KeyMismatch { expected, found })
            if expected == sk.key_id() && found == other.key_id()
    ));
    // Sums of two keys' ciphertexts, in both orders.
    assert!(mismatch(mine.zip_polys(&theirs, RnsPoly::add)));
    assert!(mismatch(theirs.zip_polys(&mine, RnsPoly::add)));
    let mut acc = mine.clone();
    assert!(acc.join_key(other.key_id()).is_err());
    assert_eq!(acc, mine, "a refused join changes nothing");
    // Key switching with another key's keys.
    let d2 = {
        let mut c = theirs.clone();
        let extra = c.polys()[1].clone();
        c.polys_mut().push(extra);
        c
    };
    assert!(mismatch(ops::relinearize(&d2, &rlk)));
    assert!(mismatch(ops::apply_galois(&theirs, &gk)));
    assert!(matches!(
        ops::apply_galois_hoisted(&theirs, &[&gk]),
        Err(RlweError::KeyMismatch { .. })
    ));
    let mut sum = ops::GaloisSum::new();
    sum.add(&mine, Some(&gk)).unwrap();
    assert!(matches!(
        sum.add(&theirs, None),
        Err(RlweError::KeyMismatch { .. })
    ));
    assert!(matches!(
        sum.add(&mine, Some(&other_gk)),
        Err(RlweError::KeyMismatch { .. })
    ));
    assert_eq!(sum.key_id(), sk.key_id());

    // Operations keep the key; their results decrypt under it.
    let rotated = ops::apply_galois(&mine, &gk).unwrap();
    assert_eq!(rotated.key_id(), sk.key_id());
    assert_eq!(mine.to_level(1).unwrap().key_id(), sk.key_id());
    let doubled = mine.zip_polys(&mine, RnsPoly::add).unwrap();
    assert_eq!(doubled.key_id(), sk.key_id());
    Decryptor::new(&sk).decrypt(&doubled).unwrap();

    // Serialized and back, the key is kept, for ciphertexts (seeded or
    // not) and keys.
    for ct in [&mine, &theirs, &rotated] {
        let back = Ciphertext::from_bytes(&params, &ct.to_bytes()).unwrap();
        assert_eq!(back.key_id(), ct.key_id());
    }
    assert_eq!(
        PublicKey::from_bytes(&params, &pk.to_bytes())
            .unwrap()
            .key_id(),
        sk.key_id()
    );
    assert_eq!(
        RelinearizationKey::from_bytes(&params, &rlk.to_bytes(true))
            .unwrap()
            .0
            .key_id(),
        sk.key_id()
    );
    assert_eq!(
        GaloisKey::from_bytes(&params, &gk.to_bytes(false))
            .unwrap()
            .switching_key()
            .key_id(),
        sk.key_id()
    );
    // A secret key file whose coefficients are not its key id's.
    let mut exported = sk.export_bytes().to_vec();
    exported[64] ^= 1;
    assert!(SecretKey::import_bytes(&params, &exported).is_err());
    exported[64] ^= 1;
    assert_eq!(
        SecretKey::import_bytes(&params, &exported)
            .unwrap()
            .key_id(),
        sk.key_id()
    );
    // A plaintext carries no key.
    let mut pt_bytes = pt.to_bytes();
    pt_bytes[64] = 1;
    assert!(Plaintext::from_bytes(&params, &pt_bytes).is_err());

    // A ciphertext built by hand is bound to no key and goes with any.
    let loose = Ciphertext::new(&params, theirs.polys().to_vec(), 2, 1.0).unwrap();
    assert!(loose.key_id().is_none());
    assert_eq!(
        loose.zip_polys(&mine, RnsPoly::add).unwrap().key_id(),
        sk.key_id()
    );
}

#[test]
fn seeded_encryption_in_pieces_makes_the_bytes_of_encrypt_then_serialize() {
    // Without and with a plaintext modulus (the error is t·e for BGV).
    for t in [None, Some(65537)] {
        let mut literal = small(10, 3, None);
        literal.plaintext_modulus = t;
        let params = Parameters::new_insecure_for_tests(literal).unwrap();
        let sk = KeyGenerator::new(&params).gen_secret_key().unwrap();
        for level in [0, 2, 3] {
            let (m, pt) = random_message(&params, level, 1 << 30);
            let mut coeffs = pt.poly().clone();
            coeffs.to_coefficient();
            let seed = hecloud_math::testing::sampler().seed();
            let want = Encryptor::from_seed(&params, seed)
                .encrypt_sk(&sk, &pt)
                .unwrap()
                .to_bytes();
            let (mut got, mut pieces) = (vec![], 0);
            Encryptor::from_seed(&params, seed)
                .encrypt_sk_pieces(
                    &sk,
                    |i, _, dst| dst.copy_from_slice(coeffs.limb(i)),
                    level,
                    1.0,
                    |p| {
                        got.extend(p);
                        pieces += 1;
                    },
                )
                .unwrap();
            // The header with the seed, then one piece per limb of c_0.
            assert_eq!(pieces, level + 2);
            assert_eq!(got.len(), params.seeded_ciphertext_bytes(level));
            assert_eq!(got, want, "t {t:?}, level {level}");
            let ct = Ciphertext::from_bytes(&params, &got).unwrap();
            assert_eq!(ct.key_id(), sk.key_id());
            assert!(max_diff(&decrypt_coeffs(&sk, &ct), &m) < 64 * t.unwrap_or(1) as i128);
        }
    }
}

#[test]
fn seeded_encryption_in_pieces_refuses_bad_input_before_any_piece() {
    let (params, sk) = setup(10, 2, None);
    let (_, other_sk) = setup(11, 2, None);
    let zero = |_: usize, _: &hecloud_math::Modulus, dst: &mut [u64]| dst.fill(0);
    let mut enc = Encryptor::new(&params);
    let mut pieces = 0;
    let mut count = |_: Vec<u8>| pieces += 1;
    for scale in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        assert!(matches!(
            enc.encrypt_sk_pieces(&sk, zero, 1, scale, &mut count),
            Err(RlweError::InvalidScale(s)) if s.to_bits() == scale.to_bits()
        ));
    }
    assert!(matches!(
        enc.encrypt_sk_pieces(&sk, zero, 3, 1.0, &mut count),
        Err(RlweError::LevelOutOfRange { level: 3, max: 2 })
    ));
    assert_eq!(
        enc.encrypt_sk_pieces(&other_sk, zero, 1, 1.0, &mut count),
        Err(RlweError::ParameterMismatch)
    );
    assert_eq!(pieces, 0);
}

/// Double hoisting: undivided rotations times plaintexts over Q_l ∪ P,
/// summed and divided once (with an unrotated term added in the same
/// pass, or inside a GaloisSum), decrypt to Σ σ_g(m)·p_g (schoolbook
/// reference); bad operands are typed errors.
#[test]
fn undivided_rotations_times_plaintexts_divide_once_to_their_sum() {
    let (params, sk) = setup(10, 2, Some(2));
    let level = params.max_level();
    let mut kg = KeyGenerator::new(&params);
    let gks = kg.gen_galois_keys(&sk, &[1, 3, -2], false).unwrap();
    let elements: Vec<usize> = gks.elements().collect();
    let refs: Vec<&GaloisKey> = elements.iter().map(|&g| gks.get(g).unwrap()).collect();
    let (m, pt) = random_message(&params, level, 1 << 20);
    let ct = Encryptor::new(&params).encrypt_sk(&sk, &pt).unwrap();
    // Small random plaintexts over Q_l ∪ P (and the one of the
    // unrotated term over Q_l).
    let mut s = hecloud_math::testing::sampler();
    let mut small = |basis| {
        let c: Vec<i64> = (0..params.n())
            .map(|_| (s.next_u64() % 9) as i64 - 4)
            .collect();
        let mut p = RnsPoly::from_signed(basis, &c).unwrap();
        p.to_ntt();
        (c, p)
    };
    let qp = params.qp_at(level).unwrap().clone();
    let plains: Vec<(Vec<i64>, RnsPoly)> = refs.iter().map(|_| small(&qp)).collect();
    let (c_direct, p_direct) = small(params.q_at(level).unwrap());

    let ext = ops::apply_galois_hoisted_ext(&ct, &refs).unwrap();
    let mut acc = ext[0].mul_plain(&plains[0].1, 1.0).unwrap();
    for (x, (_, p)) in ext.iter().zip(&plains).skip(1) {
        acc.mul_plain_add_assign(x, p, 1.0).unwrap();
    }
    // The same sum in one pass with lazy reduction, residue for residue.
    let terms: Vec<(&ops::ExtCiphertext, &RnsPoly)> =
        ext.iter().zip(&plains).map(|(x, (_, p))| (x, p)).collect();
    let lazy = ops::ExtCiphertext::sum_of_products(&terms, 1.0).unwrap();
    assert_eq!(lazy.polys(), acc.polys());
    assert_eq!((lazy.scale(), lazy.key_id()), (acc.scale(), acc.key_id()));
    let mut want = vec![0i64; params.n()];
    for (g, (c, _)) in elements.iter().zip(&plains) {
        for (w, x) in want
            .iter_mut()
            .zip(negacyclic(&automorphism_plain(&m, *g), c))
        {
            *w += x;
        }
    }
    let direct = ct.map_polys(|c| c.mul_prefix(&p_direct)).unwrap();
    let mut with_direct = want.clone();
    for (w, x) in with_direct.iter_mut().zip(negacyclic(&m, &c_direct)) {
        *w += x;
    }
    // The noise of a rotation is below 2^16 (see the automorphism test);
    // each is multiplied by a plaintext of 1024 coefficients below 5.
    let bound = 1 << 29;

    // Bad operands first: nothing changes.
    let over_q = p_direct.clone();
    assert_eq!(
        ext[0].mul_plain(&over_q, 1.0).unwrap_err(),
        RlweError::ParameterMismatch
    );
    assert!(matches!(
        acc.mul_plain_add_assign(&ext[1], &plains[1].1, 2.0),
        Err(RlweError::InvalidScale(_))
    ));
    let lower = ct.to_level(level - 1).unwrap();
    let other = ops::apply_galois_hoisted_ext(&lower, &refs[..1])
        .unwrap()
        .remove(0);
    assert!(acc.mul_plain_add_assign(&other, &plains[0].1, 1.0).is_err());
    assert_eq!(
        ops::ExtCiphertext::sum_of_products(&[], 1.0).unwrap_err(),
        RlweError::EmptySum
    );
    let mixed = [(&ext[0], &plains[0].1), (&other, &plains[0].1)];
    assert!(ops::ExtCiphertext::sum_of_products(&mixed, 1.0).is_err());
    assert_eq!(
        ops::ExtCiphertext::sum_of_products(&[(&ext[0], &over_q)], 1.0).unwrap_err(),
        RlweError::ParameterMismatch
    );
    let mut sum = ops::GaloisSum::new();
    sum.add(&ct, None).unwrap();
    assert!(matches!(
        sum.add_ext(other),
        Err(RlweError::LevelMismatch { .. })
    ));

    // Once, with the unrotated term in the same pass.
    let acc2 = {
        let mut a = ext[0].mul_plain(&plains[0].1, 1.0).unwrap();
        for (x, (_, p)) in ext.iter().zip(&plains).skip(1) {
            a.mul_plain_add_assign(x, p, 1.0).unwrap();
        }
        a
    };
    let once = acc.mod_down(None).unwrap();
    assert!(max_diff(&decrypt_coeffs(&sk, &once), &want) < bound);
    let joined = acc2.mod_down(Some(&direct)).unwrap();
    assert_eq!(joined.key_id(), sk.key_id());
    assert!(max_diff(&decrypt_coeffs(&sk, &joined), &with_direct) < bound);

    // Inside a GaloisSum: divided by P·q_l in one pass, as the divided
    // sum rescaled (to within the two roundings' noise).
    let mut sum = ops::GaloisSum::new();
    let mut a = ext[0].mul_plain(&plains[0].1, 1.0).unwrap();
    for (x, (_, p)) in ext.iter().zip(&plains).skip(1) {
        a.mul_plain_add_assign(x, p, 1.0).unwrap();
    }
    sum.add_ext(a).unwrap();
    sum.add(&direct, None).unwrap();
    let (c0, c1) = sum.finish_rescaled().unwrap();
    let fused = Ciphertext::new(&params, vec![c0, c1], level - 1, 1.0).unwrap();
    let separate = rescaled(&joined);
    let (got, want) = (decrypt_coeffs(&sk, &fused), decrypt_coeffs(&sk, &separate));
    assert!(got.iter().zip(&want).all(|(g, w)| (g - w).abs() < 64));
}

/// Key switches moved and added into sums as they are made
/// (`key_switch_ext_add_moved`, a GaloisSum's giant steps) give the sums
/// of the products made whole, moved and added, residue for residue, and
/// a GaloisSum of rotations of several ciphertexts decrypts as the
/// rotations made one by one and summed; sums over another basis or
/// domain, or a permutation of another length, are refused and left as
/// they were.
#[test]
fn key_switches_moved_into_sums_match_the_separate_steps() {
    let (params, sk) = setup(10, 2, Some(2));
    let level = params.max_level();
    let mut kg = KeyGenerator::new(&params);
    let gks = kg.gen_galois_keys(&sk, &[1, 5, -3], false).unwrap();
    let elements: Vec<usize> = gks.elements().collect();
    // Messages of 60 bits (above the primes: `from_bigints`), far from
    // zero once divided by q_l.
    let mut rng = hecloud_math::testing::sampler();
    let mut msgs = vec![];
    let mut cts = vec![];
    for _ in &elements {
        let m: Vec<i64> = (0..params.n())
            .map(|_| (rng.next_u64() % (1 << 61)) as i64 - (1 << 60))
            .collect();
        let big: Vec<num_bigint::BigInt> = m.iter().map(|&x| x.into()).collect();
        let mut p = RnsPoly::from_bigints(params.q_at(level).unwrap(), &big).unwrap();
        p.to_ntt();
        let pt = Plaintext::new(&params, p, level, 1.0).unwrap();
        cts.push(Encryptor::new(&params).encrypt_sk(&sk, &pt).unwrap());
        msgs.push(m);
    }
    // The separate steps: each product whole, moved, added.
    let mut want: [Option<RnsPoly>; 2] = [None, None];
    let mut got: [Option<RnsPoly>; 2] = [None, None];
    for (ct, &g) in cts.iter().zip(&elements) {
        let gk = gks.get(g).unwrap();
        let ext = key_switch_ext(&params, &ct.polys()[1], &gk.key).unwrap();
        for (w, x) in want.iter_mut().zip([&ext.c0, &ext.c1]) {
            let moved = ops::permute(x, &gk.perm).unwrap();
            match w {
                Some(w) => w.add_assign(&moved).unwrap(),
                None => *w = Some(moved),
            }
        }
        match &mut got {
            [Some(a0), Some(a1)] => {
                key_switch_ext_add_moved(&params, &ct.polys()[1], &gk.key, &gk.perm, [a0, a1])
                    .unwrap()
            }
            [a0, a1] => {
                *a0 = Some(ops::permute(&ext.c0, &gk.perm).unwrap());
                *a1 = Some(ops::permute(&ext.c1, &gk.perm).unwrap());
            }
        }
    }
    assert_eq!(got, want);

    // Refusals leave the sums unchanged.
    let [Some(a0), Some(a1)] = &mut got else {
        unreachable!("two sums")
    };
    let gk = gks.get(elements[0]).unwrap();
    let d = &cts[0].polys()[1];
    let short = &gk.perm[..params.n() / 2];
    assert_eq!(
        key_switch_ext_add_moved(&params, d, &gk.key, short, [a0, a1]).unwrap_err(),
        RlweError::ParameterMismatch
    );
    let mut over_q = cts[0].polys()[0].clone();
    assert_eq!(
        key_switch_ext_add_moved(&params, d, &gk.key, &gk.perm, [&mut over_q, a1]).unwrap_err(),
        RlweError::ParameterMismatch
    );
    a0.to_coefficient();
    assert_eq!(
        key_switch_ext_add_moved(&params, d, &gk.key, &gk.perm, [a0, a1]).unwrap_err(),
        RlweError::ParameterMismatch
    );
    a0.to_ntt();
    assert_eq!(got, want);

    // The whole sum, divided by P·q_l in one ModDown, decrypts as the
    // rotations made one by one, summed and rescaled (to within the two
    // roundings' noise).
    let mut sum = ops::GaloisSum::new();
    let mut separate: Option<Ciphertext> = None;
    for (ct, &g) in cts.iter().zip(&elements) {
        let gk = gks.get(g).unwrap();
        sum.add(ct, Some(gk)).unwrap();
        let r = ops::apply_galois(ct, gk).unwrap();
        separate = Some(match separate {
            None => r,
            Some(a) => a.zip_polys(&r, RnsPoly::add).unwrap(),
        });
    }
    let (c0, c1) = sum.finish_rescaled().unwrap();
    let fused = Ciphertext::new(&params, vec![c0, c1], level - 1, 1.0).unwrap();
    let separate = rescaled(&separate.unwrap());
    let (got, sep) = (decrypt_coeffs(&sk, &fused), decrypt_coeffs(&sk, &separate));
    assert!(got.iter().zip(&sep).all(|(g, w)| (g - w).abs() < 64));
    // Both decrypt to Σ σ_g(m_g) / q_l.
    let q_l = params.q_basis().moduli()[level].value() as f64;
    let mut rotated = vec![0f64; params.n()];
    for (m, &g) in msgs.iter().zip(&elements) {
        for (r, x) in rotated.iter_mut().zip(automorphism_plain(m, g)) {
            *r += x as f64 / q_l;
        }
    }
    let want: Vec<i64> = rotated.iter().map(|r| r.round() as i64).collect();
    assert!(
        want.iter().any(|w| w.abs() > 1 << 14),
        "a sum far from zero"
    );
    assert!(
        max_diff(&got, &want) < 64,
        "off by {}",
        max_diff(&got, &want)
    );
}
