"""SEAL 4.x BFV timings through TenSEAL (bfv_vector), for `hecloud bench addcmp`.

Usage:
    python seal_bfv.py sum --logn 13 --n 1024 --samples 5
    python seal_bfv.py mul --logn 14 --samples 5
    python seal_bfv.py rotate --logn 14 --samples 5

Prints one JSON line: the op, log N, the median time in milliseconds ("ms"),
the plaintext modulus and the bit sizes of the Q primes and of SEAL's single
special prime ("logp"). Every result is decrypted and checked against the
same computation on the plaintexts mod t; a mismatch exits with status 1.

- sum: encrypts n vectors of N random values mod t (not timed), then times
  adding them all: n-1 in-place additions (`acc.add_(v)`) into an
  accumulator that is reset to a copy of the first vector (untimed) before
  each sample. Each addition goes through TenSEAL's Python wrapper (a type
  check and one pybind11 call, about a microsecond) around SEAL's
  `Evaluator::add_inplace`.
- mul: times one ciphertext x ciphertext product in place (`c.mul_(b)` on an
  untimed copy c of a). TenSEAL relinearizes automatically (the context's
  auto_relin is on), so this is SEAL's `multiply_inplace` (BFV tensoring
  with the BEHZ base extension) followed by `relinearize_inplace`; BFV has
  no modulus switch after it.
- rotate: TenSEAL's BFVVector has no rotation, so this one op uses SEAL
  directly through TenSEAL's low-level binding (tenseal.sealapi) on the same
  parameters: `Evaluator::rotate_rows(ct, 1)` (each of the two rows of N/2
  slots shifts left by one) with the Galois key of that one step.

Parameters: SEAL's 128-bit default moduli (CoeffModulus::BFVDefault, the
last prime being SEAL's special prime), also the default of the Lattigo BGV
peer (bench/peers/lattigo-bgv) so both work on the same RNS limbs:
N = 2^13: 43, 43, 44, 44 + 44 bits (log QP = 218); N = 2^14: 48, 48, 48,
49 x 5 + 49 bits (log QP = 438), the HE Standard's maximum for 128-bit
classical security with a ternary secret (SEAL's SEALContext refuses
anything above it). --logq/--logp override them. The plaintext modulus is
65537 (prime, = 1 mod 2N, so all N slots batch). Everything runs on one
thread (SEAL's operations are single-threaded; TenSEAL's pool is n_threads=1).
"""

import argparse
import json
import random
import statistics
import sys
import time

import tenseal as ts
import tenseal.sealapi as seal

# HE Standard maximum log2(QP) for 128-bit classical security (ternary secret).
MAX_LOG_QP = {10: 27, 11: 54, 12: 109, 13: 218, 14: 438, 15: 881}

# SEAL's CoeffModulus::BFVDefault bit sizes (the last is the special prime).
DEFAULT_MODULI = {
    12: [36, 36, 37],
    13: [43, 43, 44, 44, 44],
    14: [48, 48, 48, 49, 49, 49, 49, 49, 49],
    15: [55] * 15 + [56],
}


def time_ms(samples, reset, op):
    """Median of `samples` timed runs of op (after one warm-up), each after an untimed reset."""
    reset()
    op()
    ts_ = []
    for _ in range(samples):
        reset()
        t = time.perf_counter()
        op()
        ts_.append((time.perf_counter() - t) * 1e3)
    return statistics.median(ts_)


def check(op, have, want, t):
    for i, (h, w) in enumerate(zip(have, want)):
        if h % t != w % t:
            sys.exit(f"{op}: slot {i} decrypts to {h % t}, want {w % t}")
    if len(have) < len(want):
        sys.exit(f"{op}: {len(have)} slots decrypted, want {len(want)}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("op", choices=["sum", "mul", "rotate"])
    ap.add_argument("--logn", type=int, required=True)
    ap.add_argument("--n", type=int, default=1024, help="vectors to add (sum)")
    ap.add_argument("--samples", type=int, default=5)
    ap.add_argument("--logq", help="bit sizes of the Q primes (default: BFVDefault)")
    ap.add_argument("--logp", help="bit size of the special prime (default: BFVDefault)")
    ap.add_argument("--t", type=int, default=65537, help="plaintext modulus")
    a = ap.parse_args()
    if a.samples < 1 or a.n < 1:
        sys.exit("--samples and --n must be at least 1")
    if (a.logq is None) != (a.logp is None):
        sys.exit("give both --logq and --logp")
    if a.logq is not None:
        logq = [int(x) for x in a.logq.split(",")]
        logp = [int(x) for x in a.logp.split(",")]
        if len(logp) != 1:
            sys.exit("SEAL has a single special prime: give one --logp")
    elif a.logn in DEFAULT_MODULI:
        logq, logp = DEFAULT_MODULI[a.logn][:-1], DEFAULT_MODULI[a.logn][-1:]
    else:
        sys.exit(f"no default moduli for logn {a.logn}: give --logq and --logp")
    if sum(logq + logp) > MAX_LOG_QP.get(a.logn, 0):
        sys.exit(f"log QP = {sum(logq + logp)} is above the HE Standard's 128-bit bound")
    n = 1 << a.logn
    t = a.t
    rng = random.Random(1)
    res = {"op": a.op, "logn": a.logn, "t": t, "logq": logq, "logp": logp}

    if a.op == "rotate":
        parms = seal.EncryptionParameters(seal.SCHEME_TYPE.BFV)
        parms.set_poly_modulus_degree(n)
        parms.set_coeff_modulus(seal.CoeffModulus.Create(n, logq + logp))
        parms.set_plain_modulus(t)
        ctx = seal.SEALContext(parms, True, seal.SEC_LEVEL_TYPE.TC128)
        kg = seal.KeyGenerator(ctx)
        pk = seal.PublicKey()
        kg.create_public_key(pk)
        gk = seal.GaloisKeys()
        # The binding resolves a list to Galois elements (not steps): a row
        # rotation by one step left is the element 3 (SEAL's GaloisTool).
        kg.create_galois_keys([3], gk)
        enc = seal.Encryptor(ctx, pk)
        dec = seal.Decryptor(ctx, kg.secret_key())
        ev = seal.Evaluator(ctx)
        ecd = seal.BatchEncoder(ctx)
        va = [rng.randrange(t) for _ in range(n)]
        pt = seal.Plaintext()
        ecd.encode(va, pt)
        ca, out = seal.Ciphertext(), seal.Ciphertext()
        enc.encrypt(pt, ca)
        res["ms"] = time_ms(a.samples, lambda: None, lambda: ev.rotate_rows(ca, 1, gk, out))
        dec.decrypt(out, pt)
        half = n // 2
        want = [va[(i // half) * half + (i % half + 1) % half] for i in range(n)]
        check(a.op, ecd.decode_int64(pt), want, t)
        print(json.dumps(res))
        return

    ctx = ts.context(
        ts.SCHEME_TYPE.BFV,
        poly_modulus_degree=n,
        plain_modulus=t,
        coeff_mod_bit_sizes=logq + logp,
        n_threads=1,
    )
    assert ctx.auto_relin
    if a.op == "sum":
        vs = [[rng.randrange(t) for _ in range(n)] for _ in range(a.n)]
        cts = [ts.bfv_vector(ctx, v) for v in vs]
        want = [sum(col) % t for col in zip(*vs)]
        acc = [None]

        def reset():
            acc[0] = cts[0].copy()

        def add_all():
            x = acc[0]
            for c in cts[1:]:
                x.add_(c)

        res["n"] = a.n
        res["ms"] = time_ms(a.samples, reset, add_all)
        check(a.op, acc[0].decrypt(), want, t)
    else:
        va = [rng.randrange(t) for _ in range(n)]
        vb = [rng.randrange(t) for _ in range(n)]
        ca, cb = ts.bfv_vector(ctx, va), ts.bfv_vector(ctx, vb)
        out = [None]

        def reset():
            out[0] = ca.copy()

        res["ms"] = time_ms(a.samples, reset, lambda: out[0].mul_(cb))
        check(a.op, out[0].decrypt(), [x * y for x, y in zip(va, vb)], t)
    print(json.dumps(res))


if __name__ == "__main__":
    main()
