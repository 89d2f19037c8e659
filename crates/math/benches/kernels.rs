//! Criterion benches of the math kernels (`cargo bench -p hecloud-math`).
//! Peer comparisons (tfhe-ntt, Lattigo) live in `hecloud bench ntt`.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use hecloud_math::backend::{Backend, Scalar, available};
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

criterion_group!(benches, ntt_one_limb, rns_28_limbs);
criterion_main!(benches);
