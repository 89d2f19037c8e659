//! Criterion benches of the object format (`cargo bench -p hecloud-rlwe`):
//! a fresh seeded ciphertext at N = 2^16 with 28 primes (the CKKS n16
//! preset's top level: 11 MiB with residues packed to their primes' bit
//! lengths), as the service moves it.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use hecloud_math::{Domain, RnsPoly};
use hecloud_rlwe::{
    Ciphertext, Encryptor, KeyGenerator, Parameters, ParametersLiteral, Plaintext,
    SecretDistribution,
};

fn ciphertext_n65536(c: &mut Criterion) {
    let mut log_q = vec![60];
    log_q.extend([50; 27]);
    let params = Parameters::new(ParametersLiteral {
        log_n: 16,
        log_q,
        log_p: vec![61; 4],
        secret: SecretDistribution::Ternary,
        sigma: 3.2,
        dnum: None,
        plaintext_modulus: None,
    })
    .unwrap();
    let level = params.max_level();
    let sk = KeyGenerator::new(&params).gen_secret_key().unwrap();
    let m = RnsPoly::zero(params.q_at(level).unwrap(), Domain::Ntt);
    let pt = Plaintext::new(&params, m, level, 1.0).unwrap();
    let ct = Encryptor::new(&params).encrypt_sk(&sk, &pt).unwrap();
    let bytes = ct.to_bytes();
    let mut g = c.benchmark_group("ciphertext_n65536_28limbs_seeded");
    g.sample_size(20);
    g.bench_function("to_bytes", |b| b.iter(|| black_box(ct.to_bytes())));
    // What a client sends: the bytes and their BLAKE3 (the object id).
    g.bench_function("to_bytes_then_hash", |b| {
        b.iter(|| {
            let out = ct.to_bytes();
            let h = blake3::hash(&out);
            black_box((out, h))
        })
    });
    g.bench_function("write_pieces_hashed", |b| {
        b.iter(|| {
            let mut out = Vec::with_capacity(ct.serialized_len());
            let mut h = blake3::Hasher::new();
            ct.write_pieces(|p| {
                h.update(p);
                out.extend_from_slice(p);
            });
            black_box((out, h.finalize()))
        })
    });
    g.bench_function("from_bytes", |b| {
        b.iter(|| black_box(Ciphertext::from_bytes(&params, &bytes).unwrap()))
    });
    g.finish();
}

criterion_group!(benches, ciphertext_n65536);
criterion_main!(benches);
