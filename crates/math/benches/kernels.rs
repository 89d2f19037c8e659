//! Criterion benches of the math kernels (`cargo bench -p hecloud-math`).
//! Peer comparisons (tfhe-ntt, Lattigo) live in `hecloud bench ntt`.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use hecloud_math::Modulus;
use hecloud_math::backend::{Backend, Combination, Scalar, Simd, SimdLevel, available};
use hecloud_math::prime::ntt_primes;
use hecloud_math::sampling::expand_seed_uniform;
use hecloud_math::{BaseConverter, Domain, NttTable, RnsBasis, Sampler};

fn ntt_one_limb(c: &mut Criterion) {
    let mut s = Sampler::from_seed([1; 32]);
    for bits in [50u32, 60] {
        let mut g = c.benchmark_group(format!("ntt_{bits}bit"));
        for log_n in 12..=17u32 {
            let n = 1usize << log_n;
            let q = ntt_primes(bits, n, 1, &[]).unwrap()[0];
            let t = NttTable::new(q, n).unwrap();
            let mut a: Vec<u64> = (0..n).map(|_| s.uniform_mod(q)).collect();
            for be in available() {
                g.bench_with_input(
                    BenchmarkId::new(format!("fwd/{}", be.name()), n),
                    &n,
                    |b, _| b.iter(|| be.ntt_forward(&t, black_box(&mut a))),
                );
                g.bench_with_input(
                    BenchmarkId::new(format!("inv/{}", be.name()), n),
                    &n,
                    |b, _| b.iter(|| be.ntt_inverse(&t, black_box(&mut a))),
                );
            }
        }
        g.finish();
    }
}

fn rns_28_limbs(c: &mut Criterion) {
    let n = 1 << 16;
    let primes: Vec<u64> = ntt_primes(60, n, 1, &[])
        .unwrap()
        .into_iter()
        .chain(ntt_primes(50, n, 27, &[]).unwrap())
        .collect();
    let basis = RnsBasis::new(n, &primes).unwrap();
    let p_basis = RnsBasis::new(n, &ntt_primes(61, n, 4, &primes).unwrap()).unwrap();
    let conv = BaseConverter::new(&basis, &p_basis).unwrap();
    let mut s = Sampler::from_seed([2; 32]);
    let mut x = s.uniform_poly(&basis, Domain::Coefficient);
    let y = s.uniform_poly(&basis, Domain::Ntt);
    let mut g = c.benchmark_group("rns_n65536_28limbs");
    g.sample_size(10);
    for threads in [1usize, 2] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        g.bench_function(BenchmarkId::new("forward_ntt", threads), |b| {
            b.iter(|| {
                pool.install(|| {
                    x.set_domain_unchecked(Domain::Coefficient);
                    x.to_ntt();
                })
            })
        });
        x.set_domain_unchecked(Domain::Ntt);
        g.bench_function(BenchmarkId::new("pointwise_product", threads), |b| {
            b.iter(|| pool.install(|| x.mul_assign(&y).unwrap()))
        });
        x.set_domain_unchecked(Domain::Coefficient);
        g.bench_function(BenchmarkId::new("base_conversion_28_to_4", threads), |b| {
            b.iter(|| pool.install(|| black_box(conv.convert(&x).unwrap())))
        });
        g.bench_function(BenchmarkId::new("expand_seed", threads), |b| {
            b.iter(|| pool.install(|| black_box(expand_seed_uniform(&[3; 32], &basis))))
        });
    }
    // The word-by-word sampler, for comparison with the seed expansion.
    g.bench_function("uniform_poly_word_by_word", |b| {
        b.iter(|| black_box(s.uniform_poly(&basis, Domain::Ntt)))
    });
    g.finish();
    let m = *basis.moduli().first().unwrap();
    let (mut a, bb) = (x.limb(0).to_vec(), y.limb(0).to_vec());
    c.bench_function("pointwise_product_one_limb_n65536/scalar", |b| {
        b.iter(|| Scalar.mul_pointwise(&m, black_box(&mut a), &bb))
    });
}

/// The AVX2 level with and without its FMA kernels (primes below 2^50), side
/// by side at n = 2^16: `fma` is the default AVX2 backend, `int` the 64-bit
/// integer kernels (and scalar code) it replaces.
fn avx2_fma_vs_int(c: &mut Criterion) {
    let Some(fma) = Simd::new(SimdLevel::Avx2) else {
        return;
    };
    let backends: [(&str, Simd); 2] = [("fma", fma), ("int", fma.without_fma())];
    let n = 1usize << 16;
    let primes = ntt_primes(50, n, 8, &[]).unwrap();
    let p61 = ntt_primes(61, n, 4, &[]).unwrap();
    let moduli: Vec<Modulus> = primes.iter().map(|&q| Modulus::new(q).unwrap()).collect();
    let q = primes[0];
    let m = moduli[0];
    let t = NttTable::new(q, n).unwrap();
    let mut s = Sampler::from_seed([3; 32]);
    let limb = |s: &mut Sampler, q: u64| -> Vec<u64> { (0..n).map(|_| s.uniform_mod(q)).collect() };
    let mut a = limb(&mut s, q);
    let b = limb(&mut s, q);
    let mut acc = limb(&mut s, q);
    let terms = 8;
    let ops: Vec<Vec<u64>> = (0..3 * terms).map(|_| limb(&mut s, q)).collect();
    let refs: Vec<&[u64]> = ops.iter().map(Vec::as_slice).collect();
    let (ks, rest) = refs.split_at(terms);
    let (kb, ka) = rest.split_at(terms);
    let (mut o0, mut o1) = (vec![0u64; n], vec![0u64; n]);
    // Base conversion: 8 sources of 50 bits to 4 primes below 2^50, and 4
    // sources of 61 bits (ModDown's P limbs) to the same 4.
    let src50: Vec<Vec<u64>> = primes.iter().map(|&p| limb(&mut s, p)).collect();
    let src61: Vec<Vec<u64>> = p61.iter().map(|&p| limb(&mut s, p)).collect();
    let w8: Vec<Vec<u64>> = moduli[..4]
        .iter()
        .map(|m| (0..8).map(|_| s.uniform_mod(m.value())).collect())
        .collect();
    let mut outs = vec![vec![0u64; n]; 4];
    // The key inner product for a 61-bit prime (P, or q₀): the 64-bit
    // integer kernel on every SIMD level, against the scalar u128 loop.
    let m61 = Modulus::new(p61[0]).unwrap();
    let ops61: Vec<Vec<u64>> = (0..3 * terms).map(|_| limb(&mut s, p61[0])).collect();
    let refs61: Vec<&[u64]> = ops61.iter().map(Vec::as_slice).collect();
    let (ks61, rest61) = refs61.split_at(terms);
    let (kb61, ka61) = rest61.split_at(terms);
    let mut g = c.benchmark_group("avx2_fma_vs_int_n65536_50bit");
    g.bench_function(format!("dot_product_pair_{terms}_61bit/scalar"), |bch| {
        bch.iter(|| Scalar.dot_product_pair(&m61, ks61, kb61, ka61, black_box(&mut o0), &mut o1))
    });
    g.bench_function(format!("dot_product_pair_{terms}_61bit/avx2"), |bch| {
        bch.iter(|| fma.dot_product_pair(&m61, ks61, kb61, ka61, black_box(&mut o0), &mut o1))
    });
    for (name, be) in &backends {
        g.bench_function(format!("ntt_fwd/{name}"), |bch| {
            bch.iter(|| be.ntt_forward(&t, black_box(&mut a)))
        });
        g.bench_function(format!("ntt_inv/{name}"), |bch| {
            bch.iter(|| be.ntt_inverse(&t, black_box(&mut a)))
        });
        g.bench_function(format!("mul_pointwise/{name}"), |bch| {
            bch.iter(|| be.mul_pointwise(&m, black_box(&mut a), &b))
        });
        g.bench_function(format!("mul_add_pointwise/{name}"), |bch| {
            bch.iter(|| be.mul_add_pointwise(&m, &a, &b, black_box(&mut acc)))
        });
        g.bench_function(format!("mul_scalar/{name}"), |bch| {
            bch.iter(|| be.mul_scalar(&m, black_box(&mut a), b[1]))
        });
        g.bench_function(format!("dot_product_pair_{terms}/{name}"), |bch| {
            bch.iter(|| be.dot_product_pair(&m, ks, kb, ka, black_box(&mut o0), &mut o1))
        });
        for (label, srcs, bits) in [("8x50bit", &src50, 50), ("4x61bit", &src61, 61)] {
            let refs: Vec<&[u64]> = srcs.iter().map(Vec::as_slice).collect();
            let bits = vec![bits; refs.len()];
            g.bench_function(format!("linear_combinations_{label}_to_4/{name}"), |bch| {
                bch.iter(|| {
                    let mut outputs: Vec<Combination<'_>> = moduli[..4]
                        .iter()
                        .zip(&w8)
                        .zip(outs.iter_mut())
                        .map(|((q, w), out)| Combination {
                            q,
                            out,
                            w: &w[..refs.len()],
                        })
                        .collect();
                    be.linear_combinations(&mut outputs, &refs, &bits);
                })
            });
        }
    }
    g.finish();
}

criterion_group!(benches, ntt_one_limb, rns_28_limbs, avx2_fma_vs_int);
criterion_main!(benches);
