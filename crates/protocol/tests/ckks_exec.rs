//! Graph execution over CKKS checked against plaintext arithmetic on fresh
//! random inputs: every operation by name, then random graphs (only those
//! validation accepts), which must all run without error and match, each
//! output at exactly the level, degree and scale validation predicted.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use hecloud_ckks::polynomial::ChebyshevPolynomial;
use hecloud_ckks::{CkksParameters, Encoder, KeySet, params::test_literal};
use hecloud_protocol::*;
use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore, SeedableRng};

const LEVELS: usize = 6;
const ROTATIONS: [i64; 6] = [1, 2, 4, 3, -1, -5];

struct Setup {
    params: Arc<CkksParameters>,
    ks: KeySet,
    enc: Encoder,
    keys: SessionKeys,
}

fn setup() -> Setup {
    let params = CkksParameters::new_insecure_for_tests(test_literal(10, LEVELS), 45).unwrap();
    let ks = KeySet::generate(&params, &ROTATIONS, true).unwrap();
    let sp = SessionParams {
        ckks: Some(params.clone()),
        tfhe: None,
        bgv: None,
    };
    let keys = SessionKeys::from_parts(sp, ks.evaluation_keys(), None).unwrap();
    Setup {
        enc: Encoder::new(&params),
        params,
        ks,
        keys,
    }
}

fn seed() -> u64 {
    let s = rand_core::TryRngCore::try_next_u64(&mut rand_core::OsRng).unwrap_or(1);
    eprintln!("seed {s}");
    s
}

fn uniform(rng: &mut ChaCha20Rng, n: usize, lo: f64, hi: f64) -> Vec<f64> {
    (0..n)
        .map(|_| lo + (hi - lo) * (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64)
        .collect()
}

impl Setup {
    fn slots(&self) -> usize {
        self.params.slots()
    }

    fn encrypt(&self, x: &[f64]) -> Object {
        let pt = self
            .enc
            .encode_real(x, LEVELS, self.params.default_scale())
            .unwrap();
        Object::CkksCiphertext(self.ks.encrypt(&pt).unwrap())
    }

    fn decrypt(&self, o: &Object) -> Vec<f64> {
        let Object::CkksCiphertext(c) = o else {
            panic!("not a ciphertext: {:?}", o.kind())
        };
        self.enc.decode_real(&self.ks.decrypt(c).unwrap()).unwrap()
    }

    fn run(&self, g: &Graph, inputs: &[Object]) -> Vec<(String, Object)> {
        let types: Vec<ValueType> = inputs.iter().map(|o| o.value_type().unwrap()).collect();
        let v = validate(g, &self.keys.capabilities(), &types)
            .unwrap_or_else(|e| panic!("refused: {e}"));
        execute(&v, &self.keys, inputs, &AtomicBool::new(false), &mut |_| {})
            .unwrap_or_else(|e| panic!("failed: {e}"))
    }
}

fn rot(x: &[f64], k: i64) -> Vec<f64> {
    let n = x.len() as i64;
    (0..n).map(|j| x[(j + k).rem_euclid(n) as usize]).collect()
}

fn close(name: &str, got: &[f64], want: &[f64], tol: f64) {
    for (j, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "{name}: slot {j}: got {g}, want {w}"
        );
    }
}

#[test]
fn every_operation_matches_plaintext() {
    let s = setup();
    let mut rng = ChaCha20Rng::seed_from_u64(seed());
    let n = s.slots();
    let x = uniform(&mut rng, n, -1.0, 1.0);
    let y = uniform(&mut rng, n, -1.0, 1.0);
    let pv = uniform(&mut rng, n, -1.0, 1.0);
    let v = uniform(&mut rng, 100, -1.0, 1.0);
    let mut vpad = v.clone();
    vpad.resize(n, 0.0);
    let pt = Object::CkksPlaintext(
        s.enc
            .encode_real(&pv, LEVELS, s.params.default_scale())
            .unwrap(),
    );

    let mut g = Graph::new();
    let (xi, yi, pi) = (g.input(0), g.input(1), g.input(2));
    let vi = g.plain(v.clone());
    let c25 = g.constant(2.5);
    let c03 = g.constant(0.3);
    let cm3 = g.constant(-3.0);
    let mut want: Vec<(&str, Vec<f64>)> = Vec::new();
    let mut out = |g: &mut Graph, name: &'static str, node: u32, w: Vec<f64>| {
        g.output(name, node);
        want.push((name, w));
    };
    let zip = |a: &[f64], b: &[f64], f: fn(f64, f64) -> f64| -> Vec<f64> {
        a.iter().zip(b).map(|(&p, &q)| f(p, q)).collect()
    };
    let n1 = g.add(xi, yi);
    out(&mut g, "x+y", n1, zip(&x, &y, |a, b| a + b));
    let n2 = g.sub(xi, pi);
    out(&mut g, "x-pt", n2, zip(&x, &pv, |a, b| a - b));
    let n3 = g.sub(pi, xi);
    out(&mut g, "pt-x", n3, zip(&pv, &x, |a, b| a - b));
    let n4 = g.sub(c25, xi);
    out(&mut g, "2.5-x", n4, x.iter().map(|a| 2.5 - a).collect());
    let n4b = g.add(xi, c25);
    out(&mut g, "x+2.5", n4b, x.iter().map(|a| a + 2.5).collect());
    let n5 = g.add(vi, xi);
    out(&mut g, "v+x", n5, zip(&vpad, &x, |a, b| a + b));
    let n5b = g.sub(xi, vi);
    out(&mut g, "x-v", n5b, zip(&x, &vpad, |a, b| a - b));
    let m = g.mul(xi, yi);
    let n6 = g.rescale(m); // fused multiply-relinearize-rescale
    out(&mut g, "x*y", n6, zip(&x, &y, |a, b| a * b));
    let m2 = g.mul(yi, xi);
    let n7 = g.rescale(m2);
    out(&mut g, "y*x unfused", n7, zip(&x, &y, |a, b| a * b));
    out(&mut g, "y*x raw", m2, zip(&x, &y, |a, b| a * b));
    let m3 = g.mul(pi, xi);
    let n8 = g.rescale(m3);
    out(&mut g, "pt*x", n8, zip(&x, &pv, |a, b| a * b));
    let m4 = g.mul(xi, vi);
    let n9 = g.rescale(m4);
    out(&mut g, "x*v", n9, zip(&x, &vpad, |a, b| a * b));
    let n10 = g.mul(xi, c03);
    out(&mut g, "x*0.3", n10, x.iter().map(|a| a * 0.3).collect());
    let n11 = g.mul(cm3, xi);
    out(&mut g, "-3*x", n11, x.iter().map(|a| -3.0 * a).collect());
    let n12 = g.rotate(xi, 3);
    out(&mut g, "rot 3", n12, rot(&x, 3));
    let n13 = g.rotate(xi, -5);
    out(&mut g, "rot -5", n13, rot(&x, -5));
    let n14 = g.rotate_and_sum(xi, 8);
    let rs: Vec<f64> = (0..n)
        .map(|j| (0..8).map(|t| x[(j + t) % n]).sum())
        .collect();
    out(&mut g, "rotsum 8", n14, rs);
    let n15 = g.conjugate(xi);
    out(&mut g, "conj", n15, x.clone());
    let n16 = g.neg(xi);
    out(&mut g, "neg", n16, x.iter().map(|a| -a).collect());
    // Dropped as low as decoding still checks it (rescaled once: one level
    // down, about the default scale).
    let checked = s
        .params
        .checked_decoding_level(2.0 * s.params.default_scale(), LEVELS - 1);
    assert!(checked < LEVELS - 1, "a level to drop");
    let n16b = g.drop_level(n6, checked as u32);
    out(&mut g, "x*y dropped", n16b, zip(&x, &y, |a, b| a * b));
    // The same, the server working the level out from the exact scale.
    let n16c = g.drop_for_decryption(n6);
    out(
        &mut g,
        "x*y for decryption",
        n16c,
        zip(&x, &y, |a, b| a * b),
    );
    let sig = ChebyshevPolynomial::interpolate(|t| 1.0 / (1.0 + (-3.0 * t).exp()), 7, -1.0, 1.0);
    let n17 = g.chebyshev(xi, sig.coeffs.clone(), -1.0, 1.0);
    out(
        &mut g,
        "sigmoid",
        n17,
        x.iter().map(|&a| sig.eval(a)).collect(),
    );
    let ex = ChebyshevPolynomial::interpolate(f64::exp, 5, -2.0, 2.0);
    let n18 = g.chebyshev(yi, ex.coeffs.clone(), -2.0, 2.0);
    out(&mut g, "exp", n18, y.iter().map(|&a| ex.eval(a)).collect());
    // A chain: ((x·y) rescaled + v) rotated by 1.
    let n19 = g.add(n6, vi);
    let n20 = g.rotate(n19, 1);
    let chain: Vec<f64> = x
        .iter()
        .zip(&y)
        .zip(&vpad)
        .map(|((a, b), c)| a * b + c)
        .collect();
    out(&mut g, "chain", n20, rot(&chain, 1));
    // An input returned as is.
    out(&mut g, "x", xi, x.clone());

    let inputs = vec![s.encrypt(&x), s.encrypt(&y), pt];
    let results = s.run(&g, &inputs);
    assert_eq!(results.len(), want.len());
    for ((name, obj), (wname, w)) in results.iter().zip(&want) {
        assert_eq!(name, wname);
        close(name, &s.decrypt(obj), w, 1e-5);
        if name == "x*y for decryption" {
            let Some(ValueType::CkksCiphertext { level, scale, .. }) = obj.value_type() else {
                panic!("{name}: not a CKKS ciphertext")
            };
            assert!(level < LEVELS - 1, "{name}: not dropped");
            assert_eq!(level, s.params.checked_decoding_level(scale, LEVELS - 1));
        }
    }
}

/// A reference value of the random-graph generator.
#[derive(Clone)]
enum Ref {
    Ct(Vec<f64>),
    /// A clear operand node (a constant or a vector).
    Clear,
}

#[test]
fn random_graphs_accepted_by_validation_run_and_match_plaintext() {
    let s = setup();
    let seed = seed();
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    let n = s.slots();
    let caps = s.keys.capabilities();
    let mut total_ops = 0;
    for round in 0..4 {
        let inputs_ref: Vec<Vec<f64>> = (0..3).map(|_| uniform(&mut rng, n, -1.0, 1.0)).collect();
        let inputs: Vec<Object> = inputs_ref.iter().map(|x| s.encrypt(x)).collect();
        let types: Vec<ValueType> = inputs.iter().map(|o| o.value_type().unwrap()).collect();
        let mut g = Graph::new();
        let mut refs: Vec<Ref> = Vec::new();
        for (i, x) in inputs_ref.iter().enumerate() {
            g.input(i as u32);
            refs.push(Ref::Ct(x.clone()));
        }
        let mut accepted = 0;
        for _ in 0..60 {
            let cts: Vec<u32> = (0..refs.len())
                .filter(|&i| matches!(refs[i], Ref::Ct(_)))
                .map(|i| i as u32)
                .collect();
            let pick = |rng: &mut ChaCha20Rng| cts[(rng.next_u32() as usize) % cts.len()];
            let a = pick(&mut rng);
            let b = pick(&mut rng);
            let Ref::Ct(ra) = refs[a as usize].clone() else {
                unreachable!()
            };
            let Ref::Ct(rb) = refs[b as usize].clone() else {
                unreachable!()
            };
            let before = g.nodes.len();
            let mut new_refs: Vec<Ref> = Vec::new();
            let zip = |f: &dyn Fn(f64, f64) -> f64| -> Vec<f64> {
                ra.iter().zip(&rb).map(|(&p, &q)| f(p, q)).collect()
            };
            match rng.next_u32() % 12 {
                0 => {
                    g.add(a, b);
                    new_refs.push(Ref::Ct(zip(&|p, q| p + q)));
                }
                1 => {
                    g.sub(a, b);
                    new_refs.push(Ref::Ct(zip(&|p, q| p - q)));
                }
                2 => {
                    let m = g.mul(a, b);
                    g.rescale(m);
                    new_refs.push(Ref::Ct(zip(&|p, q| p * q)));
                    new_refs.push(Ref::Ct(zip(&|p, q| p * q)));
                }
                3 => {
                    g.mul(a, b);
                    new_refs.push(Ref::Ct(zip(&|p, q| p * q)));
                }
                4 => {
                    g.rescale(a);
                    new_refs.push(Ref::Ct(ra.clone()));
                }
                5 => {
                    let c = if rng.next_u32() % 2 == 0 {
                        (rng.next_u32() % 5) as f64 - 2.0
                    } else {
                        uniform(&mut rng, 1, -1.0, 1.0)[0]
                    };
                    let cn = g.constant(c);
                    if rng.next_u32() % 2 == 0 {
                        g.mul(a, cn);
                    } else {
                        g.mul(cn, a);
                    }
                    new_refs.push(Ref::Clear);
                    new_refs.push(Ref::Ct(ra.iter().map(|p| p * c).collect()));
                }
                6 => {
                    let c = uniform(&mut rng, 1, -1.0, 1.0)[0];
                    let cn = g.constant(c);
                    g.sub(cn, a);
                    new_refs.push(Ref::Clear);
                    new_refs.push(Ref::Ct(ra.iter().map(|p| c - p).collect()));
                }
                7 => {
                    let len = 1 + (rng.next_u32() as usize) % n;
                    let v = uniform(&mut rng, len, -1.0, 1.0);
                    let mut vp = v.clone();
                    vp.resize(n, 0.0);
                    let vn = g.plain(v);
                    if rng.next_u32() % 2 == 0 {
                        g.add(a, vn);
                        new_refs.push(Ref::Clear);
                        new_refs.push(Ref::Ct(ra.iter().zip(&vp).map(|(p, q)| p + q).collect()));
                    } else {
                        let m = g.mul(vn, a);
                        g.rescale(m);
                        let r: Vec<f64> = ra.iter().zip(&vp).map(|(p, q)| p * q).collect();
                        new_refs.push(Ref::Clear);
                        new_refs.push(Ref::Ct(r.clone()));
                        new_refs.push(Ref::Ct(r));
                    }
                }
                8 => {
                    let k = ROTATIONS[(rng.next_u32() as usize) % ROTATIONS.len()];
                    g.rotate(a, k);
                    new_refs.push(Ref::Ct(rot(&ra, k)));
                }
                9 => {
                    let m = 1usize << (rng.next_u32() % 4);
                    g.rotate_and_sum(a, m as u32);
                    new_refs.push(Ref::Ct(
                        (0..n)
                            .map(|j| (0..m).map(|t| ra[(j + t) % n]).sum())
                            .collect(),
                    ));
                }
                10 => {
                    g.neg(a);
                    new_refs.push(Ref::Ct(ra.iter().map(|p| -p).collect()));
                }
                _ => {
                    let d = 2 + (rng.next_u32() as usize) % 6;
                    let (lo, hi) = if rng.next_u32() % 2 == 0 {
                        (-1.0, 1.0)
                    } else {
                        (-4.0, 4.0)
                    };
                    if ra.iter().any(|&t| t < lo || t > hi) {
                        continue;
                    }
                    let p = ChebyshevPolynomial {
                        coeffs: uniform(&mut rng, d + 1, -0.5, 0.5),
                        a: lo,
                        b: hi,
                    };
                    g.chebyshev(a, p.coeffs.clone(), lo, hi);
                    new_refs.push(Ref::Ct(ra.iter().map(|&t| p.eval(t)).collect()));
                }
            }
            // Keep magnitudes modest (precision), and keep only what validates.
            let too_big = new_refs
                .iter()
                .any(|r| matches!(r, Ref::Ct(v) if v.iter().any(|t| t.abs() > 8.0)));
            let mut probe = g.clone();
            probe.output("probe", (g.nodes.len() - 1) as u32);
            if too_big || validate(&probe, &caps, &types).is_err() {
                g.nodes.truncate(before);
                continue;
            }
            accepted += 1;
            refs.extend(new_refs);
        }
        for (i, r) in refs.iter().enumerate() {
            if matches!(r, Ref::Ct(_)) {
                g.output(format!("n{i}"), i as u32);
            }
        }
        let v = validate(&g, &caps, &types).unwrap();
        let done = std::cell::Cell::new(0);
        let results = execute(&v, &s.keys, &inputs, &AtomicBool::new(false), &mut |p| {
            assert_eq!(p.done, done.get() + 1);
            done.set(p.done);
        })
        .unwrap_or_else(|e| panic!("seed {seed} round {round}: a validated graph failed: {e}"));
        assert_eq!(done.get(), v.schedule().len());
        // Validation plans with the evaluator's own planner: every output's
        // level, degree and scale are predicted exactly (the scale to the bit).
        let predicted = v.output_types();
        assert_eq!(predicted.len(), results.len());
        for ((name, obj), (pname, want)) in results.iter().zip(&predicted) {
            assert_eq!(name, pname);
            let Object::CkksCiphertext(c) = obj else {
                panic!("{name}: not a ciphertext")
            };
            let ValueType::CkksCiphertext {
                level,
                scale,
                degree,
            } = want
            else {
                panic!("{name}: predicted {want:?}")
            };
            let at = format!("seed {seed} round {round} {name}");
            assert_eq!(c.level(), *level, "{at}: level");
            assert_eq!(c.degree(), *degree, "{at}: degree");
            assert_eq!(
                c.scale().to_bits(),
                scale.to_bits(),
                "{at}: scale 2^{} executed, 2^{} predicted",
                c.scale().log2(),
                scale.log2()
            );
        }
        for (name, obj) in &results {
            let i: usize = name[1..].parse().unwrap();
            let Ref::Ct(want) = &refs[i] else {
                unreachable!()
            };
            let got = s.decrypt(obj);
            close(
                &format!("seed {seed} round {round} {name}"),
                &got,
                want,
                1e-3,
            );
        }
        total_ops += accepted;
    }
    assert!(
        total_ops > 60,
        "only {total_ops} random operations accepted"
    );
}

#[test]
fn cancellation_progress_and_mismatches() {
    let s = setup();
    let x = s.encrypt(&[0.5; 4]);
    let mut g = Graph::new();
    let mut y = g.input(0);
    for _ in 0..6 {
        y = g.rotate(y, 1);
    }
    g.output("y", y);
    let types = vec![x.value_type().unwrap()];
    let v = validate(&g, &s.keys.capabilities(), &types).unwrap();
    // Cancelled after two nodes.
    let cancel = AtomicBool::new(false);
    let err = execute(&v, &s.keys, std::slice::from_ref(&x), &cancel, &mut |p| {
        if p.done == 2 {
            cancel.store(true, Ordering::Relaxed);
        }
    })
    .unwrap_err();
    assert_eq!(err, ExecError::Cancelled { done: 2, total: 7 });
    // Inputs other than those validated.
    let other = s.encrypt(&[0.5; 4]);
    let Object::CkksCiphertext(mut c) = other else {
        unreachable!()
    };
    c.drop_to_level(2).unwrap();
    let e = execute(
        &v,
        &s.keys,
        &[Object::CkksCiphertext(c)],
        &AtomicBool::new(false),
        &mut |_| {},
    )
    .unwrap_err();
    assert!(
        matches!(e, ExecError::InputMismatch { index: 0, .. }),
        "{e}"
    );
    assert!(matches!(
        execute(&v, &s.keys, &[], &AtomicBool::new(false), &mut |_| {}),
        Err(ExecError::InputMismatch { .. })
    ));
    // Keys without the rotation key the graph was validated with.
    let mut ev = s.ks.evaluation_keys();
    ev.galois = hecloud_rlwe::GaloisKeys::new();
    let bare = SessionKeys::from_parts(
        SessionParams {
            ckks: Some(s.params.clone()),
            tfhe: None,
            bgv: None,
        },
        ev,
        None,
    )
    .unwrap();
    assert!(matches!(
        execute(&v, &bare, &[x], &AtomicBool::new(false), &mut |_| {}),
        Err(ExecError::KeysMismatch(_))
    ));
}

/// A session spec naming a relinearization key's bytes and Galois keys,
/// and a store holding their bytes by id.
fn stored_session(
    relin: &[u8],
    galois: &hecloud_rlwe::GaloisKeys,
) -> (SessionSpec, std::collections::HashMap<ObjectId, Vec<u8>>) {
    let galois: Vec<Vec<u8>> = galois.iter().map(|k| k.to_bytes(true)).collect();
    let spec = SessionSpec {
        params: ParamSpec {
            ckks: Some(CkksParamSpec::from_literal(&test_literal(10, LEVELS), 45)),
            tfhe: None,
        },
        relin_key: Some(ObjectId::of(relin)),
        galois_keys: galois.iter().map(|b| ObjectId::of(b)).collect(),
        ..SessionSpec::default()
    };
    let mut store: std::collections::HashMap<ObjectId, Vec<u8>> =
        galois.into_iter().map(|b| (ObjectId::of(&b), b)).collect();
    store.insert(ObjectId::of(relin), relin.to_vec());
    (spec, store)
}

#[test]
fn session_keys_load_from_payloads_and_check_hashes() {
    let s = setup();
    let ev = s.ks.evaluation_keys();
    let relin = ev.relin.as_ref().unwrap().to_bytes(true);
    let (spec, store) = stored_session(&relin, &ev.galois);
    let spec = SessionSpec::decode(&spec.encode()).unwrap();
    // Insecure literal refused unless allowed.
    assert!(matches!(
        SessionParams::build(&spec.params, false),
        Err(SessionError::Ckks(_))
    ));
    let sp = || SessionParams::build(&spec.params, true).unwrap();
    let keys = SessionKeys::load(&spec, sp(), |id| store.get(id).cloned()).unwrap();
    let caps = keys.capabilities();
    assert!(caps.relin_key);
    assert_eq!(caps.galois_elements.len(), ROTATIONS.len() + 1);
    // The loaded keys compute: rotate by 3.
    let x: Vec<f64> = (0..s.slots()).map(|i| i as f64 / 1000.0).collect();
    let ct = s.encrypt(&x);
    let mut g = Graph::new();
    let i = g.input(0);
    let r = g.rotate(i, 3);
    g.output("r", r);
    let v = validate(&g, &caps, &[ct.value_type().unwrap()]).unwrap();
    let out = execute(&v, &keys, &[ct], &AtomicBool::new(false), &mut |_| {}).unwrap();
    close("loaded rot", &s.decrypt(&out[0].1), &rot(&x, 3), 1e-5);
    // Missing object, altered bytes, wrong kind, duplicates.
    let mut missing = store.clone();
    missing.remove(&ObjectId::of(&relin));
    assert!(matches!(
        SessionKeys::load(&spec, sp(), |id| missing.get(id).cloned()),
        Err(SessionError::MissingObject(_))
    ));
    let mut altered = store.clone();
    altered.get_mut(&ObjectId::of(&relin)).unwrap()[100] ^= 1;
    assert!(matches!(
        SessionKeys::load(&spec, sp(), |id| altered.get(id).cloned()),
        Err(SessionError::HashMismatch(_))
    ));
    let mut swapped = spec.clone();
    swapped.relin_key = Some(spec.galois_keys[0]);
    assert!(matches!(
        SessionKeys::load(&swapped, sp(), |id| store.get(id).cloned()),
        Err(SessionError::Object { .. })
    ));
    let mut dup = spec.clone();
    dup.galois_keys.push(spec.galois_keys[0]);
    assert!(matches!(
        SessionKeys::load(&dup, sp(), |id| store.get(id).cloned()),
        Err(SessionError::DuplicateGaloisKey(_))
    ));
    // Descriptors come from the payload.
    let (d, _) = sp()
        .describe(ObjectKind::CkksGaloisKey, &store[&spec.galois_keys[0]])
        .unwrap();
    assert_eq!(d.id, spec.galois_keys[0]);
    assert!(d.galois_element % 2 == 1 && d.level as usize == LEVELS);
    assert!(value_type_of(&d).is_err()); // a key is not a job input
    assert!(matches!(
        sp().input_types(&[d]),
        Err(ObjectError::WrongKind { .. })
    ));
    // Ciphertext descriptors give the input types; foreign ones are refused.
    let ct = s.encrypt(&[1.0]);
    let (d, _) = sp()
        .describe(ObjectKind::CkksCiphertext, &ct.to_bytes())
        .unwrap();
    assert_eq!(
        sp().input_types(std::slice::from_ref(&d)).unwrap(),
        vec![ct.value_type().unwrap()]
    );
    let mut foreign = d.clone();
    foreign.param_hash[0] ^= 1;
    assert_eq!(
        sp().input_types(&[d, foreign.clone()]),
        Err(ObjectError::ParameterMismatch(foreign.id))
    );
}

/// A session's ciphertexts and keys are bound to one secret key: keys of
/// two key folders in one session are refused when it loads, an input
/// encrypted under another folder's key is refused before anything runs
/// (it would compute noise, with no error of its own), and a result
/// decrypts under its own key only.
#[test]
fn objects_of_another_key_folder_are_refused() {
    let s = setup();
    let stranger = KeySet::generate(&s.params, &ROTATIONS, true).unwrap();
    assert_eq!(s.keys.ckks_key_id().unwrap(), s.ks.secret_key().key_id());
    // Keys of two folders.
    let relin = stranger.evaluation_keys().relin.unwrap().to_bytes(true);
    let (spec, store) = stored_session(&relin, &s.ks.evaluation_keys().galois);
    let sp = SessionParams::build(&spec.params, true).unwrap();
    assert!(matches!(
        SessionKeys::load(&spec, sp, |id| store.get(id).cloned()),
        Err(SessionError::KeyMismatch { scheme: "CKKS" })
    ));

    // An input of another folder, alone or beside one of the session's.
    let x: Vec<f64> = (0..s.slots()).map(|i| i as f64 / 1000.0).collect();
    let pt = s
        .enc
        .encode_real(&x, LEVELS, s.params.default_scale())
        .unwrap();
    let foreign = Object::CkksCiphertext(stranger.encrypt(&pt).unwrap());
    let own = s.encrypt(&x);
    let mut g = Graph::new();
    let (a, b) = (g.input(0), g.input(1));
    let sum = g.add(a, b);
    g.output("sum", sum);
    let types = vec![own.value_type().unwrap(), foreign.value_type().unwrap()];
    let v = validate(&g, &s.keys.capabilities(), &types).unwrap();
    for (inputs, index) in [
        ([own.clone(), foreign.clone()], 1),
        ([foreign.clone(), own.clone()], 0),
    ] {
        let e = execute(&v, &s.keys, &inputs, &AtomicBool::new(false), &mut |_| {}).unwrap_err();
        assert!(
            matches!(&e, ExecError::InputMismatch { index: i, reason } if *i == index && reason.contains("key")),
            "{e}"
        );
    }
    // The session's own inputs run; the result is theirs alone.
    let out = execute(
        &v,
        &s.keys,
        &[own.clone(), own],
        &AtomicBool::new(false),
        &mut |_| {},
    )
    .unwrap();
    let Object::CkksCiphertext(ct) = &out[0].1 else {
        unreachable!()
    };
    assert_eq!(ct.key_id(), s.ks.secret_key().key_id());
    assert!(stranger.decrypt(ct).is_err());
    let doubled: Vec<f64> = x.iter().map(|v| 2.0 * v).collect();
    close("own sum", &s.decrypt(&out[0].1), &doubled, 1e-5);
}
