"""SEAL 4.x CKKS timings through TenSEAL's low-level binding (tenseal.sealapi).

Usage: python seal_ckks.py --logn 15 --logq 60,50,... --logp 60 --scale 50 --samples 3

Prints one JSON line with median times in milliseconds (one thread: SEAL's
CKKS operations are single-threaded), the serialized ciphertext size and the
precision (bits) of one multiplication. SEAL supports a single special prime:
the P primes are replaced by one prime of min(60, max(logp)) bits.
"""

import argparse
import json
import math
import os
import random
import statistics
import tempfile
import time

import tenseal.sealapi as seal


def median_ms(samples, op):
    op()
    ts = []
    for _ in range(samples):
        t = time.perf_counter()
        op()
        ts.append((time.perf_counter() - t) * 1e3)
    return statistics.median(ts)


def bits(want, have):
    err = max(abs(w - h) for w, h in zip(want, have))
    return -math.log2(err) if err > 0 else float("inf")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--logn", type=int, required=True)
    ap.add_argument("--logq", required=True)
    ap.add_argument("--logp", required=True)
    ap.add_argument("--scale", type=int, default=50)
    ap.add_argument("--samples", type=int, default=3)
    a = ap.parse_args()
    n = 1 << a.logn
    logq = [int(x) for x in a.logq.split(",")]
    special = min(60, max(int(x) for x in a.logp.split(",")))
    parms = seal.EncryptionParameters(seal.SCHEME_TYPE.CKKS)
    parms.set_poly_modulus_degree(n)
    parms.set_coeff_modulus(seal.CoeffModulus.Create(n, logq + [special]))
    ctx = seal.SEALContext(parms, True, seal.SEC_LEVEL_TYPE.NONE)
    res = {"logn": a.logn, "special_prime_bits": special}

    def keygen():
        kg = seal.KeyGenerator(ctx)
        pk = seal.PublicKey()
        kg.create_public_key(pk)
        rlk = seal.RelinKeys()
        kg.create_relin_keys(rlk)
        return kg, pk, rlk

    res["keygen_ms"] = median_ms(max(1, a.samples // 2), keygen)
    kg, pk, rlk = keygen()
    gk = seal.GaloisKeys()
    kg.create_galois_keys(gk)
    sk = kg.secret_key()
    enc_pk = seal.Encryptor(ctx, pk)
    enc_sk = seal.Encryptor(ctx, sk)
    dec = seal.Decryptor(ctx, sk)
    ev = seal.Evaluator(ctx)
    ecd = seal.CKKSEncoder(ctx)
    slots = ecd.slot_count()
    rng = random.Random(1)
    va = [complex(rng.uniform(-1, 1), rng.uniform(-1, 1)) for _ in range(slots)]
    vb = [complex(rng.uniform(-1, 1), rng.uniform(-1, 1)) for _ in range(slots)]
    scale = 2.0 ** a.scale
    pa, pb = seal.Plaintext(), seal.Plaintext()
    res["encode_ms"] = median_ms(a.samples, lambda: ecd.encode(va, scale, pa))
    ecd.encode(vb, scale, pb)
    ca, cb = seal.Ciphertext(), seal.Ciphertext()
    res["encrypt_pk_ms"] = median_ms(a.samples, lambda: enc_pk.encrypt(pa, ca))
    res["encrypt_sk_ms"] = median_ms(a.samples, lambda: enc_sk.encrypt_symmetric(pb, cb))
    out = seal.Ciphertext()

    def mul():
        ev.multiply(ca, cb, out)
        ev.relinearize_inplace(out, rlk)
        ev.rescale_to_next_inplace(out)

    res["mul_relin_rescale_ms"] = median_ms(a.samples, mul)
    rot = seal.Ciphertext()
    res["rotate_ms"] = median_ms(a.samples, lambda: ev.rotate_vector(ca, 1, gk, rot))
    pt = seal.Plaintext()
    res["decrypt_ms"] = median_ms(a.samples, lambda: dec.decrypt(ca, pt))
    res["decode_ms"] = median_ms(a.samples, lambda: ecd.decode_complex(pt))
    dec.decrypt(out, pt)
    res["precision_bits"] = bits([x * y for x, y in zip(va, vb)], ecd.decode_complex(pt))
    dec.decrypt(rot, pt)
    res["rotate_precision_bits"] = bits(va[1:] + va[:1], ecd.decode_complex(pt))
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "ct")
        ca.save(path)
        res["ct_bytes"] = os.path.getsize(path)
    print(json.dumps(res))


if __name__ == "__main__":
    main()
