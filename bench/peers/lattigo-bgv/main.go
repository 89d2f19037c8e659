// Command lattigo-bgv-peer times Lattigo v6.2.0's BGV for hecloud's
// `bench addcmp`, on one goroutine (the bench sets GOMAXPROCS=1).
//
// Usage:
//
//	lattigo-bgv-peer -op sum -logn 13 -n 1024 -samples 5
//	lattigo-bgv-peer -op mul -logn 14 -samples 5
//	lattigo-bgv-peer -op rotate -logn 14 -samples 5
//
// Each run prints one JSON line: the op, log N, the median time in
// milliseconds ("ms"), the plaintext modulus and the bit sizes of the Q and
// P primes. Every result is decrypted and checked against the same
// computation on the plaintexts mod t; a mismatch exits with status 1.
//
//   - sum: encrypts n ciphertexts full of random values mod t (not timed),
//     then times adding them all, n-1 in-place Adds into an accumulator
//     (the accumulator is reset to a copy of the first ciphertext, untimed,
//     before each sample).
//   - mul: times one ciphertext x ciphertext product with relinearization
//     (MulRelin into a preallocated ciphertext: tensoring in the NTT domain
//     plus one key switch, no modulus switch) at the top level.
//   - rotate: times one row rotation by 1 (RotateColumns(ct, 1): each of the
//     two rows of N/2 slots shifts left by one), with its Galois key.
//
// Parameters (overridable with -logq/-logp). By default both Lattigo and the
// SEAL peer (bench/peers/seal/seal_bfv.py) use SEAL's own 128-bit default
// moduli (CoeffModulus::BFVDefault), so the two peers work on the same
// number and size of RNS limbs:
//
//	N = 2^13: Q = 43, 43, 44, 44 bits, P = 44 bits (log QP = 218)
//	N = 2^14: Q = 48, 48, 48, 49, 49, 49, 49, 49 bits, P = 49 bits (log QP = 438)
//
// These are 128-bit secure per the HE Standard (Albrecht et al. 2018,
// Table 1, classical security, ternary secret, which is Lattigo's default
// secret distribution, and error sigma 3.2): the maximum log2(QP) for 128
// bits is 218 at N = 2^13 and 438 at N = 2^14. Lattigo's own 128-bit BGV
// example at N = 2^14 (ExampleParameters128BitLogN14LogQP438: 40 + 11x29-bit
// Q, 40 + 39-bit P) sits at the same bound with more, smaller limbs. The
// primes are taken just below 2^bits (Lattigo's downstream NTT-friendly
// primes), so log2(QP) never exceeds the sum of the bit sizes; the program
// refuses any set above the bound. The plaintext modulus is t = 65537
// (t = 1 mod 2N, so the N slots are all usable).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/tuneinsight/lattigo/v6/core/rlwe"
	"github.com/tuneinsight/lattigo/v6/ring"
	"github.com/tuneinsight/lattigo/v6/schemes/bgv"
)

// maxLogQP is the HE Standard's maximum log2(QP) for 128-bit classical
// security with a ternary secret.
var maxLogQP = map[int]int{10: 27, 11: 54, 12: 109, 13: 218, 14: 438, 15: 881, 16: 1761}

// defaultModuli are SEAL's CoeffModulus::BFVDefault bit sizes (the last one
// is the special prime, Lattigo's P).
var defaultModuli = map[int][]int{
	12: {36, 36, 37},
	13: {43, 43, 44, 44, 44},
	14: {48, 48, 48, 49, 49, 49, 49, 49, 49},
	15: {55, 55, 55, 55, 55, 55, 55, 55, 55, 55, 55, 55, 55, 55, 55, 56},
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}

func ints(s string) []int {
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			fmt.Fprintln(os.Stderr, "bad list:", s)
			os.Exit(2)
		}
		out = append(out, v)
	}
	return out
}

func median(ts []float64) float64 {
	sort.Float64s(ts)
	return ts[len(ts)/2]
}

// timeMs runs op once untimed (warm-up), then samples times, each after an
// untimed reset, and returns the median in milliseconds.
func timeMs(samples int, reset, op func()) float64 {
	reset()
	op()
	ts := make([]float64, samples)
	for i := range ts {
		reset()
		start := time.Now()
		op()
		ts[i] = float64(time.Since(start).Nanoseconds()) / 1e6
	}
	return median(ts)
}

// primes returns NTT-friendly primes (= 1 mod 2N) just below 2^b for each
// b of qBits then pBits, all distinct and different from t.
func primes(logN int, qBits, pBits []int, t uint64) (q, p []uint64) {
	gens := map[int]*ring.NTTFriendlyPrimesGenerator{}
	next := func(b int) uint64 {
		g, ok := gens[b]
		if !ok {
			gen := ring.NewNTTFriendlyPrimesGenerator(uint64(b), uint64(2<<logN))
			g = &gen
			gens[b] = g
		}
		for {
			x, err := g.NextDownstreamPrime()
			must(err)
			if x != t {
				return x
			}
		}
	}
	for _, b := range qBits {
		q = append(q, next(b))
	}
	for _, b := range pBits {
		p = append(p, next(b))
	}
	return
}

func randomValues(r *rand.Rand, n int, t uint64) []uint64 {
	v := make([]uint64, n)
	for i := range v {
		v[i] = r.Uint64() % t
	}
	return v
}

func main() {
	op := flag.String("op", "sum", "sum, mul or rotate")
	logN := flag.Int("logn", 13, "log2 N")
	n := flag.Int("n", 1024, "ciphertexts to add (sum)")
	samples := flag.Int("samples", 5, "timed samples")
	logQ := flag.String("logq", "", "bit sizes of the Q primes (default: SEAL's BFVDefault for N)")
	logP := flag.String("logp", "", "bit sizes of the P primes (default: SEAL's special prime)")
	t := flag.Uint64("t", 65537, "plaintext modulus")
	flag.Parse()

	var qBits, pBits []int
	if *logQ != "" || *logP != "" {
		if *logQ == "" || *logP == "" {
			fail("give both -logq and -logp")
		}
		qBits, pBits = ints(*logQ), ints(*logP)
	} else {
		def, ok := defaultModuli[*logN]
		if !ok {
			fail("no default moduli for logn %d: give -logq and -logp", *logN)
		}
		qBits, pBits = def[:len(def)-1], def[len(def)-1:]
	}
	q, p := primes(*logN, qBits, pBits, *t)
	params, err := bgv.NewParametersFromLiteral(bgv.ParametersLiteral{
		LogN:             *logN,
		Q:                q,
		P:                p,
		PlaintextModulus: *t,
	})
	must(err)
	bound, ok := maxLogQP[*logN]
	if !ok || params.LogQP() > float64(bound) {
		fail("log QP = %.2f is above the HE Standard's 128-bit bound at logn %d", params.LogQP(), *logN)
	}
	if *samples < 1 {
		fail("-samples must be at least 1")
	}

	kgen := rlwe.NewKeyGenerator(params)
	sk, pk := kgen.GenKeyPairNew()
	ecd := bgv.NewEncoder(params)
	enc := rlwe.NewEncryptor(params, pk)
	dec := rlwe.NewDecryptor(params, sk)
	slots := params.MaxSlots()
	tm := params.PlaintextModulus()
	r := rand.New(rand.NewSource(1))
	encrypt := func(v []uint64) *rlwe.Ciphertext {
		pt := bgv.NewPlaintext(params, params.MaxLevel())
		must(ecd.Encode(v, pt))
		ct, err := enc.EncryptNew(pt)
		must(err)
		return ct
	}
	check := func(ct *rlwe.Ciphertext, want []uint64) {
		have := make([]uint64, slots)
		must(ecd.Decode(dec.DecryptNew(ct), have))
		for i := range want {
			if have[i] != want[i] {
				fail("%s: slot %d decrypts to %d, want %d", *op, i, have[i], want[i])
			}
		}
	}

	res := map[string]any{
		"op":     *op,
		"logn":   *logN,
		"t":      tm,
		"logq":   qBits,
		"logp":   pBits,
		"log_qp": params.LogQP(),
	}
	switch *op {
	case "sum":
		if *n < 1 {
			fail("-n must be at least 1")
		}
		eval := bgv.NewEvaluator(params, nil)
		cts := make([]*rlwe.Ciphertext, *n)
		want := make([]uint64, slots)
		for i := range cts {
			v := randomValues(r, slots, tm)
			for j := range want {
				want[j] = (want[j] + v[j]) % tm
			}
			cts[i] = encrypt(v)
		}
		acc := cts[0].CopyNew()
		res["n"] = *n
		res["ms"] = timeMs(*samples, func() { acc.Copy(cts[0]) }, func() {
			for _, ct := range cts[1:] {
				must(eval.Add(acc, ct, acc))
			}
		})
		check(acc, want)
	case "mul":
		rlk := kgen.GenRelinearizationKeyNew(sk)
		eval := bgv.NewEvaluator(params, rlwe.NewMemEvaluationKeySet(rlk))
		a, b := randomValues(r, slots, tm), randomValues(r, slots, tm)
		ctA, ctB := encrypt(a), encrypt(b)
		out := bgv.NewCiphertext(params, 1, params.MaxLevel())
		res["ms"] = timeMs(*samples, func() {}, func() { must(eval.MulRelin(ctA, ctB, out)) })
		want := make([]uint64, slots)
		for i := range want {
			want[i] = a[i] * b[i] % tm
		}
		check(out, want)
	case "rotate":
		gk := kgen.GenGaloisKeyNew(params.GaloisElement(1), sk)
		eval := bgv.NewEvaluator(params, rlwe.NewMemEvaluationKeySet(nil, gk))
		a := randomValues(r, slots, tm)
		ctA := encrypt(a)
		out := bgv.NewCiphertext(params, 1, params.MaxLevel())
		res["ms"] = timeMs(*samples, func() {}, func() { must(eval.RotateColumns(ctA, 1, out)) })
		half := slots / 2
		want := make([]uint64, slots)
		for i := range want {
			row, j := i/half, i%half
			want[i] = a[row*half+(j+1)%half]
		}
		check(out, want)
	default:
		fail("unknown -op %q (sum, mul or rotate)", *op)
	}
	line, err := json.Marshal(res)
	must(err)
	fmt.Println(string(line))
}
