//! Every CKKS operation against plaintext complex arithmetic on fresh random
//! inputs, with precision bounds, plus the typed errors.

use std::sync::{Arc, OnceLock};

use hecloud_ckks::{params::test_literal, precision::report, *};
use hecloud_rlwe::RlweError;
use num_complex::Complex64;

struct Fixture {
    params: Arc<CkksParameters>,
    keys: KeySet,
    enc: Encoder,
    eval: Evaluator,
}

const ROTATIONS: [i64; 9] = [1, 2, 3, 4, 7, 16, 100, -1, -5];

/// Precision bounds sit 2–4 bits under what N = 2^11, Δ = 2^45 gives
/// (31–34 bits), so a biased rounding or an uncentered key-switching digit
/// (which concentrate errors in a few slots and cost 5–10 bits) fails.
fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let params = CkksParameters::new_insecure_for_tests(test_literal(11, 4), 45).unwrap();
        let mut rots = ROTATIONS.to_vec();
        rots.extend([8, 32, 64, 128, 256, 512]);
        let keys = KeySet::generate(&params, &rots, true).unwrap();
        let enc = Encoder::new(&params);
        let eval = Evaluator::new(&params, keys.evaluation_keys());
        Fixture {
            params,
            keys,
            enc,
            eval,
        }
    })
}

fn random_vec(len: usize, bound: f64) -> Vec<Complex64> {
    let mut s = hecloud_math::testing::sampler();
    let mut f = || (s.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0;
    (0..len)
        .map(|_| Complex64::new(f() * bound, f() * bound))
        .collect()
}

impl Fixture {
    fn encrypt(&self, v: &[Complex64], level: usize) -> hecloud_rlwe::Ciphertext {
        let pt = self
            .enc
            .encode(v, level, self.params.default_scale())
            .unwrap();
        self.keys.encrypt(&pt).unwrap()
    }
    fn decrypt(&self, ct: &hecloud_rlwe::Ciphertext) -> Vec<Complex64> {
        self.enc.decode(&self.keys.decrypt(ct).unwrap()).unwrap()
    }
    fn check(&self, want: &[Complex64], ct: &hecloud_rlwe::Ciphertext, min_bits: f64, what: &str) {
        let r = report(want, &self.decrypt(ct));
        assert!(r.bits() >= min_bits, "{what}: {r} < {min_bits} bits");
    }
}

#[test]
fn encode_decode_roundtrip_full_and_sparse() {
    let f = fixture();
    for slots in [1, 2, 16, 256, 1024] {
        let enc = Encoder::with_slots(&f.params, slots).unwrap();
        let v = random_vec(slots, 1.0);
        let pt = enc.encode(&v, 4, f.params.default_scale()).unwrap();
        let r = report(&v, &enc.decode(&pt).unwrap());
        assert!(r.bits() > 35.0, "slots {slots}: {r}");
        // Through encryption too (seeded sk and pk).
        let ct = f.keys.encrypt_sk(&pt).unwrap();
        let r = report(&v, &enc.decode(&f.keys.decrypt(&ct).unwrap()).unwrap());
        assert!(r.bits() > 25.0, "slots {slots} sk: {r}");
    }
    assert!(Encoder::with_slots(&f.params, 3).is_err());
    assert!(Encoder::with_slots(&f.params, 2048).is_err());
    assert!(matches!(
        f.enc.encode(&random_vec(1025, 1.0), 1, 2f64.powi(45)),
        Err(CkksError::Slots(_))
    ));
    assert!(matches!(
        f.enc
            .encode(&[Complex64::new(f64::NAN, 0.0)], 1, 2f64.powi(45)),
        Err(CkksError::ValueOutOfRange(_))
    ));
    assert!(matches!(
        f.enc.encode(&[Complex64::new(1e40, 0.0)], 0, 2f64.powi(45)),
        Err(CkksError::ValueOutOfRange(_))
    ));
}

/// Decryption stops at the primes decoding reads and the one that checks
/// them, and they hold the value: the plaintext's coefficients are the
/// full decryption's, exactly, on each decoding path (one prime, two,
/// three) and for values up to 2^50 times the scale.
#[test]
fn decryption_reads_only_the_primes_decoding_needs() {
    let f = fixture();
    for (log_scale, bound, level) in [
        (4, 1.0, 0),
        (30, 1.0, 1),
        (45, 1.0, 1),
        (45, 2f64.powi(50), 1),
        (66, 1.0, 2),
    ] {
        let scale = 2f64.powi(log_scale);
        assert_eq!(f.params.decoding_level(scale, 4), level, "2^{log_scale}");
        let v = random_vec(f.params.slots(), bound);
        let ct = f
            .keys
            .encrypt_sk(&f.enc.encode(&v, 4, scale).unwrap())
            .unwrap();
        let pt = f.keys.decrypt(&ct).unwrap();
        assert_eq!(pt.level(), level + 1, "2^{log_scale}");
        let full = hecloud_rlwe::Decryptor::new(f.keys.secret_key())
            .decrypt(&ct)
            .unwrap();
        let coeffs = |pt: &hecloud_rlwe::Plaintext| {
            let mut p = pt.poly().clone();
            p.to_coefficient();
            p.to_bigint_centered().unwrap()
        };
        assert_eq!(coeffs(&pt), coeffs(&full), "2^{log_scale}, bound {bound}");
        // Every path's check against the extra prime passes a value that
        // fits.
        let decoded = f.enc.decode(&pt).unwrap();
        if log_scale >= 30 && bound == 1.0 {
            let r = report(&v, &decoded);
            assert!(r.bits() > 20.0, "2^{log_scale}: {r}");
        }
    }
}

/// A computed value beyond the decoding headroom (2^54 times the scale:
/// encoding refuses one, a product can make one) is never decoded as
/// another: read over more primes where the plaintext has them, refused
/// where it does not; values within it decode as before, at every path.
#[test]
fn values_beyond_the_decoding_headroom_are_read_right_or_refused() {
    let f = fixture();
    let scale = f.params.default_scale();
    let big = 2f64.powi(40);
    let v = vec![Complex64::new(big, -big / 3.0); f.params.slots()];
    let ca = f.encrypt(&v, 4);
    // At the edge the encoder still takes; squared, 2^80 at level 3.
    let sq = f.eval.mul_relin_rescale(&ca, &ca).unwrap();
    assert_eq!(sq.level(), 3);
    let want: Vec<Complex64> = v.iter().map(|x| x * x).collect();
    // Decrypted over every prime: read over the primes it needs.
    let full = hecloud_rlwe::Decryptor::new(f.keys.secret_key())
        .decrypt(&sq)
        .unwrap();
    let got = f.enc.decode(&full).unwrap();
    let worst = want
        .iter()
        .zip(&got)
        .map(|(w, g)| ((w - g) / w.norm()).norm())
        .fold(0.0, f64::max);
    assert!(
        worst < 1e-6,
        "read over more primes: relative error {worst}"
    );
    // Decrypted for decoding (the headroom's primes and one more): refused,
    // not decoded as another value, with the levels that would read it.
    let pt = f.keys.decrypt(&sq).unwrap();
    assert!(pt.level() < sq.level());
    match f.enc.decode(&pt) {
        Err(CkksError::ValueOutOfRange(m)) => assert!(
            m.contains(&format!("at level {} or above", pt.level() + 1)),
            "{m}"
        ),
        other => panic!("decoded past the headroom: {other:?}"),
    }
    // Decrypted and decoded in one step: over all the primes when the
    // headroom's are too few.
    let reals =
        hecloud_ckks::keys::decrypt_decode_real(&f.params, f.keys.secret_key(), &f.enc, &sq)
            .unwrap();
    for (w, g) in want.iter().zip(&reals) {
        assert!(((w.re - g) / w.norm()).abs() < 1e-6, "{} vs {g}", w.re);
    }
    // Encoding refuses a value beyond the headroom outright.
    let over = vec![Complex64::new(2f64.powi(55), 0.0); f.params.slots()];
    assert!(matches!(
        f.enc.encode(&over, 4, scale),
        Err(CkksError::ValueOutOfRange(_))
    ));
    // A scale below 1 (a header from an untrusted server) would decode
    // to infinities: refused.
    let pt = f.enc.encode(&v, 4, scale).unwrap();
    for bad in [5e-324, 0.5, f64::NAN, f64::INFINITY] {
        let forged = hecloud_rlwe::Plaintext::new(pt.params(), pt.poly().clone(), 4, bad).unwrap();
        assert!(
            matches!(f.enc.decode(&forged), Err(CkksError::InvalidScale(_))),
            "scale {bad}"
        );
    }
}

/// Coefficients on both sides of 2^64 (the encoder's vectorised path
/// below, 128-bit reductions above), positive and negative: the residues
/// agree with the exact integer of a constant and every vector comes back.
#[test]
fn encodings_of_large_coefficients_are_exact() {
    let f = fixture();
    for log_scale in [30, 61, 62, 63, 66, 80] {
        let scale = 2f64.powi(log_scale);
        for c in [-1.75, 1.5, -0.25] {
            let pt = f
                .enc
                .encode(&vec![Complex64::new(c, 0.0); f.params.slots()], 4, scale)
                .unwrap();
            let mut p = pt.poly().clone();
            p.to_coefficient();
            let coeffs = p.to_bigint_centered().unwrap();
            // A constant's only coefficient is c·Δ, an exact integer here.
            let want = num_bigint::BigInt::from((c * 4.0) as i64) << (log_scale - 2);
            let small = |x: &num_bigint::BigInt| {
                x.to_string().parse::<f64>().unwrap().abs() <= scale * 2f64.powi(-40)
            };
            assert!(
                small(&(&coeffs[0] - &want)),
                "2^{log_scale}, {c}: {} vs {want}",
                coeffs[0]
            );
            assert!(coeffs[1..].iter().all(small), "2^{log_scale}, {c}");
        }
        let v = random_vec(f.params.slots(), 2.0);
        let pt = f.enc.encode(&v, 4, scale).unwrap();
        let r = report(&v, &f.enc.decode(&pt).unwrap());
        assert!(
            r.bits() > f64::from(log_scale - 8).min(35.0),
            "2^{log_scale}: {r}"
        );
    }
}

/// The in-place accumulations give the very ciphertexts of the copying
/// operations (at equal levels, and through the fallback at unequal
/// ones), and refuse what those refuse.
#[test]
fn in_place_accumulation_matches_the_copying_operations() {
    let f = fixture();
    let slots = f.params.slots();
    let (a, b) = (random_vec(slots, 1.0), random_vec(slots, 1.0));
    let (ca, cb) = (f.encrypt(&a, 3), f.encrypt(&b, 3));
    let cb4 = f.encrypt(&b, 4);
    let pt = f.enc.encode(&b, 4, f.params.q_f64(3)).unwrap();
    for other in [&cb, &cb4] {
        let mut acc = ca.clone();
        f.eval.add_assign(&mut acc, other).unwrap();
        assert_eq!(acc, f.eval.add(&ca, other).unwrap());
        let mut acc = ca.clone();
        f.eval.sub_assign(&mut acc, other).unwrap();
        assert_eq!(acc, f.eval.sub(&ca, other).unwrap());
    }
    // The other way round: the accumulator above the term's level.
    let mut acc = cb4.clone();
    f.eval.sub_assign(&mut acc, &ca).unwrap();
    assert_eq!(acc, f.eval.sub(&cb4, &ca).unwrap());
    let diff: Vec<Complex64> = b.iter().zip(&a).map(|(x, y)| x - y).collect();
    f.check(&diff, &acc, 30.0, "sub_assign across levels");
    for c in [Complex64::new(0.75, 0.0), Complex64::new(-0.5, 0.25)] {
        let mut acc = ca.clone();
        f.eval.add_const_assign(&mut acc, c).unwrap();
        assert_eq!(acc, f.eval.add_const(&ca, c).unwrap());
    }
    // Refused before any change: a constant beyond what the level holds.
    let mut acc = ca.clone();
    assert!(
        f.eval
            .add_const_assign(&mut acc, Complex64::new(f64::MAX, 0.0))
            .is_err()
    );
    assert_eq!(acc, ca);
    let mut acc = f.eval.mul_plain(&ca, &pt).unwrap();
    f.eval.mul_plain_add_assign(&mut acc, &cb, &pt).unwrap();
    let want = f
        .eval
        .add(
            &f.eval.mul_plain(&ca, &pt).unwrap(),
            &f.eval.mul_plain(&cb, &pt).unwrap(),
        )
        .unwrap();
    assert_eq!(acc, want);
    let ab: Vec<Complex64> = a.iter().zip(&b).map(|(x, y)| x * y + y * y).collect();
    f.check(
        &ab,
        &f.eval.rescale(&acc).unwrap(),
        25.0,
        "mul_plain_add_assign",
    );
    // acc (level 3) + cb4 (level 4, dropped to 3) · round(0.5·s).
    let s = 2f64.powi(20);
    let mut acc = f.eval.mul_const_raw(&ca, 1.0, s).unwrap();
    f.eval
        .mul_const_raw_add_assign(&mut acc, &cb4, 0.5, s)
        .unwrap();
    let dropped = f.eval.drop_level(&cb4, 3).unwrap();
    let want = f
        .eval
        .add(
            &f.eval.mul_const_raw(&ca, 1.0, s).unwrap(),
            &f.eval.mul_const_raw(&dropped, 0.5, s).unwrap(),
        )
        .unwrap();
    assert_eq!(acc, want);
    // Refused: scales that disagree, a constant that is not finite.
    let mut acc = ca.clone();
    assert!(matches!(
        f.eval.mul_plain_add_assign(&mut acc, &cb, &pt),
        Err(CkksError::ScaleMismatch { .. })
    ));
    assert!(matches!(
        f.eval.mul_const_raw_add_assign(&mut acc, &cb, 0.5, s),
        Err(CkksError::ScaleMismatch { .. })
    ));
    assert!(matches!(
        f.eval
            .mul_const_raw_add_assign(&mut acc, &cb, f64::NAN, 1.0),
        Err(CkksError::ValueOutOfRange(_))
    ));
    assert_eq!(acc, ca);
}

#[test]
fn additive_operations_match_plaintext() {
    let f = fixture();
    let slots = f.params.slots();
    let (a, b) = (random_vec(slots, 1.0), random_vec(slots, 1.0));
    let (ca, cb) = (f.encrypt(&a, 4), f.encrypt(&b, 4));
    let zip = |op: fn(Complex64, Complex64) -> Complex64| -> Vec<Complex64> {
        a.iter().zip(&b).map(|(x, y)| op(*x, *y)).collect()
    };
    f.check(
        &zip(|x, y| x + y),
        &f.eval.add(&ca, &cb).unwrap(),
        25.0,
        "add",
    );
    f.check(
        &zip(|x, y| x - y),
        &f.eval.sub(&ca, &cb).unwrap(),
        25.0,
        "sub",
    );
    let neg: Vec<Complex64> = a.iter().map(|x| -x).collect();
    f.check(&neg, &f.eval.neg(&ca).unwrap(), 30.0, "neg");
    let pb = f.enc.encode(&b, 4, f.params.default_scale()).unwrap();
    f.check(
        &zip(|x, y| x + y),
        &f.eval.add_plain(&ca, &pb).unwrap(),
        25.0,
        "add_plain",
    );
    f.check(
        &zip(|x, y| x - y),
        &f.eval.sub_plain(&ca, &pb).unwrap(),
        25.0,
        "sub_plain",
    );
    let c = Complex64::new(0.3, -1.7);
    let want: Vec<Complex64> = a.iter().map(|x| x + c).collect();
    f.check(&want, &f.eval.add_const(&ca, c).unwrap(), 30.0, "add_const");
    let want: Vec<Complex64> = a.iter().map(|x| x * 7.0).collect();
    let r = f.eval.mul_int(&ca, 7).unwrap();
    assert_eq!(r.level(), 4);
    f.check(&want, &r, 29.0, "mul_int");
    // A factor that takes a value of 1 past Q_0 / 2 is refused: it would wrap.
    let low = f.encrypt(&a, 0);
    let past = (f.params.q_f64(0) / f.params.default_scale()) as i64;
    assert!(matches!(
        f.eval.mul_int(&low, past),
        Err(CkksError::ValueOutOfRange(_))
    ));
    assert!(f.eval.mul_const(&low, -(past as f64)).is_err());
    assert!(f.eval.mul_int(&low, past / 4).is_ok());
    let want: Vec<Complex64> = a.iter().map(|x| x * -3.0).collect();
    let r = f.eval.mul_const(&ca, -3.0).unwrap();
    assert_eq!(r.level(), 4, "integer constants cost no level");
    f.check(&want, &r, 29.0, "mul_const int");
    let want: Vec<Complex64> = a.iter().map(|x| x * 0.123).collect();
    let r = f.eval.mul_const(&ca, 0.123).unwrap();
    assert_eq!(r.level(), 3);
    f.check(&want, &r, 30.0, "mul_const real");
    // Level matching: a at level 4 plus b at level 2.
    let cb2 = f.encrypt(&b, 2);
    let s = f.eval.add(&ca, &cb2).unwrap();
    assert_eq!(s.level(), 2);
    f.check(&zip(|x, y| x + y), &s, 30.0, "add across levels");
}

/// A constant added to a ciphertext must itself fit its level's modulus at
/// its scale and the decoding headroom: just below Q_l / 2 (or 2^54) it is
/// added exactly, just above it is refused (it would wrap around, or decode
/// as another value), real part or imaginary; so is a vector encoded
/// there.
#[test]
fn constants_beyond_the_modulus_at_their_level_are_refused() {
    let f = fixture();
    let scale = f.params.default_scale();
    for level in [0, 1] {
        let a = random_vec(f.params.slots(), 1.0);
        let ca = f.encrypt(&a, level);
        let log_q = f.params.rlwe().q_at(level).unwrap().log_q();
        // The largest magnitude representable at this level and scale:
        // Q_0 / 2 at level 0, the decoding headroom at level 1.
        let cap = (log_q - 1.0)
            .min(scale.log2() + hecloud_ckks::DECODE_HEADROOM_BITS - 1.0)
            .exp2()
            / scale;
        let c = Complex64::new(0.9 * cap, 0.0);
        let want: Vec<Complex64> = a.iter().map(|x| x + c).collect();
        let got = f
            .enc
            .decode(&f.keys.decrypt(&f.eval.add_const(&ca, c).unwrap()).unwrap())
            .unwrap();
        let worst = want
            .iter()
            .zip(&got)
            .map(|(w, g)| (w - g).norm())
            .fold(0.0, f64::max);
        assert!(worst < 1e-6 * cap, "level {level}: off by {worst}");
        for c in [
            Complex64::new(1.1 * cap, 0.0),
            Complex64::new(-1.1 * cap, 0.0),
            Complex64::new(0.5, 1.1 * cap),
        ] {
            assert!(
                matches!(f.eval.add_const(&ca, c), Err(CkksError::ValueOutOfRange(_))),
                "level {level}: {c}"
            );
        }
        let big = vec![Complex64::new(1.1 * cap, 0.0); f.params.slots()];
        assert!(f.enc.encode(&big, level, scale).is_err());
    }
}

/// Sums with a constant or a plaintext change c0 only: a seeded
/// encryption stays seeded, and its half-size form still decrypts right.
#[test]
fn constant_and_plaintext_sums_keep_the_seed() {
    let f = fixture();
    let slots = f.params.slots();
    let (a, b) = (random_vec(slots, 1.0), random_vec(slots, 1.0));
    let pt = f.enc.encode(&a, 4, f.params.default_scale()).unwrap();
    let seeded = f.keys.encrypt_sk(&pt).unwrap();
    assert!(seeded.is_seeded());
    let pb = f.enc.encode(&b, 4, f.params.default_scale()).unwrap();
    let c = Complex64::new(0.25, -0.5);
    let zip = |op: fn(Complex64, Complex64) -> Complex64| -> Vec<Complex64> {
        a.iter().zip(&b).map(|(x, y)| op(*x, *y)).collect()
    };
    let sums = [
        (f.eval.add_plain(&seeded, &pb).unwrap(), zip(|x, y| x + y)),
        (f.eval.sub_plain(&seeded, &pb).unwrap(), zip(|x, y| x - y)),
        (
            f.eval.add_const(&seeded, c).unwrap(),
            a.iter().map(|x| x + c).collect(),
        ),
    ];
    let mut in_place = seeded.clone();
    f.eval.add_const_assign(&mut in_place, c).unwrap();
    let sums = sums
        .into_iter()
        .chain([(in_place, a.iter().map(|x| x + c).collect())]);
    for (ct, want) in sums {
        assert!(ct.is_seeded());
        let back = hecloud_rlwe::Ciphertext::from_bytes(f.params.rlwe(), &ct.to_bytes()).unwrap();
        assert_eq!(back.polys(), ct.polys());
        f.check(&want, &back, 30.0, "seeded sum");
    }
    // A product changes c1: no seed.
    assert!(!f.eval.mul_plain(&seeded, &pb).unwrap().is_seeded());
}

#[test]
fn multiplications_match_plaintext() {
    let f = fixture();
    let slots = f.params.slots();
    let (a, b) = (random_vec(slots, 1.0), random_vec(slots, 1.0));
    let (ca, cb) = (f.encrypt(&a, 4), f.encrypt(&b, 4));
    let prod: Vec<Complex64> = a.iter().zip(&b).map(|(x, y)| x * y).collect();
    // Separate steps.
    let t = f.eval.mul(&ca, &cb).unwrap();
    assert_eq!(t.degree(), 2);
    f.check(
        &prod,
        &f.eval.rescale(&t).unwrap(),
        25.0,
        "mul (degree 2) + rescale",
    );
    // Degrees 2 and 1 summed both ways round (the missing component
    // counts as zero): ab + ab and ab − ab.
    let pb = f.enc.encode(&b, 4, f.params.default_scale()).unwrap();
    let u = f.eval.mul_plain(&ca, &pb).unwrap();
    let twice: Vec<Complex64> = prod.iter().map(|x| x * 2.0).collect();
    let zeros = vec![Complex64::new(0.0, 0.0); slots];
    for (x, y, sub, want, what) in [
        (&u, &t, false, &twice, "degree 1 + degree 2"),
        (&u, &t, true, &zeros, "degree 1 − degree 2"),
        (&t, &u, false, &twice, "degree 2 + degree 1"),
        (&t, &u, true, &zeros, "degree 2 − degree 1"),
    ] {
        let s = if sub {
            f.eval.sub(x, y)
        } else {
            f.eval.add(x, y)
        }
        .unwrap();
        assert_eq!(s.degree(), 2, "{what}");
        f.check(want, &f.eval.rescale(&s).unwrap(), 25.0, what);
    }
    let r = f.eval.rescale(&f.eval.relinearize(&t).unwrap()).unwrap();
    assert_eq!((r.level(), r.degree()), (3, 1));
    f.check(&prod, &r, 30.0, "mul relin rescale");
    // Fused.
    let fused = f.eval.mul_relin_rescale(&ca, &cb).unwrap();
    assert_eq!(fused.level(), 3);
    assert!(((fused.scale() - r.scale()) / r.scale()).abs() < 1e-12);
    f.check(&prod, &fused, 30.0, "fused mul_relin_rescale");
    // Operands at different levels: the product is at the lower one, bit
    // for bit what the higher operand dropped to it gives.
    let cb3 = f.encrypt(&b, 3);
    let ca3 = f.eval.drop_level(&ca, 3).unwrap();
    for (x, y, xd, yd) in [(&ca, &cb3, &ca3, &cb3), (&cb3, &ca, &cb3, &ca3)] {
        let across = f.eval.mul(x, y).unwrap();
        assert_eq!(across.level(), 3);
        assert_eq!(across, f.eval.mul(xd, yd).unwrap());
        let fused = f.eval.mul_relin_rescale(x, y).unwrap();
        assert_eq!(fused, f.eval.mul_relin_rescale(xd, yd).unwrap());
        f.check(&prod, &fused, 30.0, "mul_relin_rescale across levels");
    }
    // Plaintext product.
    let r = f
        .eval
        .rescale(&f.eval.mul_plain(&ca, &pb).unwrap())
        .unwrap();
    f.check(&prod, &r, 30.0, "mul_plain");
    // Depth 4: a^16 over the whole modulus chain; a scaled into the unit disc.
    let small: Vec<Complex64> = a.iter().map(|x| x * 0.7).collect();
    let mut ct = f.encrypt(&small, 4);
    let mut want = small.clone();
    for _ in 0..4 {
        ct = f.eval.mul_relin_rescale(&ct, &ct).unwrap();
        want.iter_mut().for_each(|x| *x = *x * *x);
    }
    assert_eq!(ct.level(), 0);
    f.check(&want, &ct, 27.0, "a^16");
    // Levels exhausted: typed errors.
    assert!(matches!(
        f.eval.mul_relin_rescale(&ct, &ct),
        Err(CkksError::Rlwe(RlweError::LevelsExhausted { .. }))
    ));
    assert!(matches!(
        f.eval.rescale(&ct),
        Err(CkksError::Rlwe(RlweError::LevelsExhausted { .. }))
    ));
    assert!(f.eval.mul_const(&ct, 0.5).is_err());
    // Scale mismatch: a degree-2 product at Δ² plus a fresh Δ ciphertext.
    assert!(matches!(
        f.eval.add(&t, &ca),
        Err(CkksError::ScaleMismatch { .. })
    ));
}

#[test]
fn rotations_conjugation_and_sums_match_plaintext() {
    let f = fixture();
    let slots = f.params.slots();
    let a = random_vec(slots, 1.0);
    let ca = f.encrypt(&a, 3);
    let rot = |k: i64| -> Vec<Complex64> {
        (0..slots)
            .map(|i| a[(i as i64 + k).rem_euclid(slots as i64) as usize])
            .collect()
    };
    for k in ROTATIONS {
        f.check(
            &rot(k),
            &f.eval.rotate(&ca, k).unwrap(),
            22.0,
            &format!("rotate {k}"),
        );
    }
    let hoisted = f.eval.rotate_hoisted(&ca, &ROTATIONS).unwrap();
    for (k, ct) in ROTATIONS.iter().zip(&hoisted) {
        f.check(&rot(*k), ct, 29.0, &format!("hoisted rotate {k}"));
    }
    let conj: Vec<Complex64> = a.iter().map(|x| x.conj()).collect();
    f.check(&conj, &f.eval.conjugate(&ca).unwrap(), 29.0, "conjugate");
    // Rotate-and-sum over 64 slots.
    let sums: Vec<Complex64> = (0..slots)
        .map(|i| (0..64).map(|t| a[(i + t) % slots]).sum())
        .collect();
    f.check(
        &sums,
        &f.eval.rotate_and_sum(&ca, 64).unwrap(),
        18.0,
        "rotate_and_sum",
    );
    // Missing key.
    assert!(matches!(
        f.eval.rotate(&ca, 5),
        Err(CkksError::Rlwe(RlweError::MissingGaloisKey(_)))
    ));
    // No relinearization key.
    let bare = Evaluator::new(&f.params, EvaluationKeys::default());
    assert!(matches!(
        bare.mul_relin_rescale(&ca, &ca),
        Err(CkksError::Rlwe(RlweError::MissingRelinearizationKey))
    ));
    assert!(bare.conjugate(&ca).is_err());
}

/// A sum of rotations rescaled with one ModDown for all its key switches
/// (`RotationSum`) against the plaintext and against rotating, adding and
/// rescaling term by term; then the refusals.
#[test]
fn a_rescaled_sum_of_rotations_matches_plaintext() {
    let f = fixture();
    let slots = f.params.slots();
    let (a, b) = (random_vec(slots, 1.0), random_vec(slots, 1.0));
    // Raised by q_3 first, as a linear transform's diagonal products are,
    // so that the rescale brings them back to the default scale.
    let q3 = f.params.q_f64(3);
    let raise = |x: &[Complex64]| f.eval.mul_const_raw(&f.encrypt(x, 3), 1.0, q3).unwrap();
    let (ca, cb) = (raise(&a), raise(&b));
    let rot = |x: &[Complex64], k: i64| -> Vec<Complex64> {
        (0..slots)
            .map(|i| x[(i as i64 + k).rem_euclid(slots as i64) as usize])
            .collect()
    };
    let terms = [(&ca, &a, 1), (&cb, &b, 7), (&cb, &b, 0), (&ca, &a, -5)];
    let mut want = vec![Complex64::default(); slots];
    let mut sum = evaluator::RotationSum::default();
    let mut separate: Option<hecloud_rlwe::Ciphertext> = None;
    for (ct, x, k) in terms {
        for (w, v) in want.iter_mut().zip(rot(x, k)) {
            *w += v;
        }
        f.eval.add_rotation(&mut sum, ct, k).unwrap();
        let r = f.eval.rotate(ct, k).unwrap();
        separate = Some(match separate {
            None => r,
            Some(s) => f.eval.add(&s, &r).unwrap(),
        });
    }
    let fused = f.eval.rescale_rotation_sum(sum).unwrap();
    let separate = f.eval.rescale(&separate.unwrap()).unwrap();
    assert_eq!(
        (fused.level(), fused.scale()),
        (separate.level(), separate.scale())
    );
    f.check(&want, &separate, 26.0, "rotations added, then rescaled");
    f.check(&want, &fused, 26.0, "rotations rescaled with one ModDown");
    // Refusals: nothing to sum, a term at another level or scale, a
    // rotation without a key, no level to rescale.
    assert!(matches!(
        f.eval
            .rescale_rotation_sum(evaluator::RotationSum::default()),
        Err(CkksError::Rlwe(RlweError::EmptySum))
    ));
    let mut sum = evaluator::RotationSum::default();
    f.eval.add_rotation(&mut sum, &ca, 1).unwrap();
    let lower = f.eval.drop_level(&ca, 2).unwrap();
    assert!(matches!(
        f.eval.add_rotation(&mut sum, &lower, 1),
        Err(CkksError::Rlwe(RlweError::LevelMismatch { .. }))
    ));
    let mut doubled = ca.clone();
    doubled.set_scale(2.0 * ca.scale());
    assert!(matches!(
        f.eval.add_rotation(&mut sum, &doubled, 1),
        Err(CkksError::ScaleMismatch { .. })
    ));
    assert!(matches!(
        f.eval.add_rotation(&mut sum, &ca, 5),
        Err(CkksError::Rlwe(RlweError::MissingGaloisKey(_)))
    ));
    // The refused terms left the sum as it was: rot(a, 1) alone.
    f.check(
        &rot(&a, 1),
        &f.eval.rescale_rotation_sum(sum).unwrap(),
        26.0,
        "the sum after refusals",
    );
    let mut bottom = evaluator::RotationSum::default();
    f.eval
        .add_rotation(&mut bottom, &f.encrypt(&a, 0), 1)
        .unwrap();
    assert!(matches!(
        f.eval.rescale_rotation_sum(bottom),
        Err(CkksError::Rlwe(RlweError::LevelsExhausted { .. }))
    ));
}

#[test]
fn foreign_parameters_are_refused() {
    let f = fixture();
    let other = CkksParameters::new_insecure_for_tests(test_literal(11, 3), 45).unwrap();
    let keys2 = KeySet::generate(&other, &[], false).unwrap();
    let enc2 = Encoder::new(&other);
    let ct2 = keys2
        .encrypt(
            &enc2
                .encode(&random_vec(4, 1.0), 3, other.default_scale())
                .unwrap(),
        )
        .unwrap();
    let ca = f.encrypt(&random_vec(4, 1.0), 3);
    assert!(matches!(
        f.eval.add(&ca, &ct2),
        Err(CkksError::Rlwe(RlweError::ParameterMismatch))
    ));
    assert!(f.keys.decrypt(&ct2).is_err());
    assert!(f.enc.decode(&keys2.decrypt(&ct2).unwrap()).is_err());
}

/// Q primes larger than P's, with dnum left to the layout: grouped by
/// count (⌈|Q|/|P|⌉ = 3 digits) the first digit, 60 + 45 bits, is 45 bits
/// over P's 2 × 30, and a rotation came back as noise (−14 bits), with no
/// error. (A product hid it: its rescale divides the key-switching noise
/// by a prime.) The layout now takes one prime per digit.
#[test]
fn a_p_smaller_than_the_q_primes_still_rotates_right() {
    let literal = hecloud_rlwe::ParametersLiteral {
        log_q: vec![60, 45, 45, 45, 45],
        log_p: vec![30, 30],
        dnum: None,
        ..test_literal(11, 4)
    };
    let params = CkksParameters::new_insecure_for_tests(literal, 45).unwrap();
    assert_eq!(params.rlwe().dnum(), 5);
    let keys = KeySet::generate(&params, &[1], true).unwrap();
    let (enc, eval) = (
        Encoder::new(&params),
        Evaluator::new(&params, keys.evaluation_keys()),
    );
    let x = random_vec(params.slots(), 1.0);
    let pt = enc.encode(&x, 4, params.default_scale()).unwrap();
    let rotated = eval.rotate(&keys.encrypt(&pt).unwrap(), 1).unwrap();
    let want: Vec<Complex64> = (0..x.len()).map(|i| x[(i + 1) % x.len()]).collect();
    let r = report(
        &want,
        &enc.decode(&keys.decrypt(&rotated).unwrap()).unwrap(),
    );
    assert!(r.bits() > 28.0, "{r}");
}
