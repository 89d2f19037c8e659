// Command lattigo-ckks-peer times Lattigo v6.2.0's CKKS for hecloud's
// benchmarks, on one goroutine, at the parameters hecloud uses.
//
// Usage: lattigo-ckks-peer -logn 16 -logq 60,50,... -logp 61,61 -scale 50 -samples 5
//
// Prints one JSON line with median times in milliseconds, serialized sizes
// in bytes and the precision (bits) of one multiplication.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"math/cmplx"
	"math/rand"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/tuneinsight/lattigo/v6/core/rlwe"
	"github.com/tuneinsight/lattigo/v6/schemes/ckks"
)

func medianMs(samples int, op func()) float64 {
	op()
	ts := make([]float64, samples)
	for i := range ts {
		start := time.Now()
		op()
		ts[i] = float64(time.Since(start).Nanoseconds()) / 1e6
	}
	sort.Float64s(ts)
	return ts[len(ts)/2]
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

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func precisionBits(want, have []complex128) float64 {
	maxErr := 0.0
	for i := range want {
		maxErr = math.Max(maxErr, cmplx.Abs(want[i]-have[i]))
	}
	return -math.Log2(maxErr)
}

func main() {
	logN := flag.Int("logn", 16, "log2 N")
	logQ := flag.String("logq", "", "bit sizes of the Q primes")
	logP := flag.String("logp", "", "bit sizes of the P primes")
	logScale := flag.Int("scale", 50, "log2 of the default scale")
	samples := flag.Int("samples", 5, "timed samples per operation")
	flag.Parse()

	params, err := ckks.NewParametersFromLiteral(ckks.ParametersLiteral{
		LogN:            *logN,
		LogQ:            ints(*logQ),
		LogP:            ints(*logP),
		LogDefaultScale: *logScale,
	})
	must(err)

	res := map[string]float64{}
	res["logn"] = float64(*logN)
	res["log_qp"] = params.LogQP()
	res["dnum"] = float64(params.BaseRNSDecompositionVectorSize(params.MaxLevelQ(), params.MaxLevelP()))

	kgen := rlwe.NewKeyGenerator(params)
	var sk *rlwe.SecretKey
	var pk *rlwe.PublicKey
	var rlk *rlwe.RelinearizationKey
	var gk *rlwe.GaloisKey
	galEl := params.GaloisElement(1)
	res["keygen_ms"] = medianMs(*samples, func() {
		sk, pk = kgen.GenKeyPairNew()
		rlk = kgen.GenRelinearizationKeyNew(sk)
		gk = kgen.GenGaloisKeyNew(galEl, sk)
	})
	evk := rlwe.NewMemEvaluationKeySet(rlk, gk)
	ecd := ckks.NewEncoder(params)
	encPk := rlwe.NewEncryptor(params, pk)
	encSk := rlwe.NewEncryptor(params, sk)
	dec := rlwe.NewDecryptor(params, sk)
	eval := ckks.NewEvaluator(params, evk)

	slots := params.MaxSlots()
	r := rand.New(rand.NewSource(1))
	a := make([]complex128, slots)
	b := make([]complex128, slots)
	for i := range a {
		a[i] = complex(2*r.Float64()-1, 2*r.Float64()-1)
		b[i] = complex(2*r.Float64()-1, 2*r.Float64()-1)
	}
	pt := ckks.NewPlaintext(params, params.MaxLevel())
	res["encode_ms"] = medianMs(*samples, func() { must(ecd.Encode(a, pt)) })
	ptB := ckks.NewPlaintext(params, params.MaxLevel())
	must(ecd.Encode(b, ptB))
	var ctA, ctB *rlwe.Ciphertext
	res["encrypt_pk_ms"] = medianMs(*samples, func() { ctA, err = encPk.EncryptNew(pt); must(err) })
	res["encrypt_sk_ms"] = medianMs(*samples, func() { ctB, err = encSk.EncryptNew(ptB); must(err) })
	var out *rlwe.Ciphertext
	res["mul_relin_rescale_ms"] = medianMs(*samples, func() {
		out, err = eval.MulRelinNew(ctA, ctB)
		must(err)
		must(eval.Rescale(out, out))
	})
	var rot *rlwe.Ciphertext
	res["rotate_ms"] = medianMs(*samples, func() { rot, err = eval.RotateNew(ctA, 1); must(err) })
	var ptOut *rlwe.Plaintext
	res["decrypt_ms"] = medianMs(*samples, func() { ptOut = dec.DecryptNew(ctA) })
	have := make([]complex128, slots)
	res["decode_ms"] = medianMs(*samples, func() { must(ecd.Decode(ptOut, have)) })

	want := make([]complex128, slots)
	for i := range want {
		want[i] = a[i] * b[i]
	}
	must(ecd.Decode(dec.DecryptNew(out), have))
	res["precision_bits"] = precisionBits(want, have)
	for i := range want {
		want[i] = a[(i+1)%slots]
	}
	must(ecd.Decode(dec.DecryptNew(rot), have))
	res["rotate_precision_bits"] = precisionBits(want, have)

	res["ct_bytes"] = float64(ctA.BinarySize())
	res["rlk_bytes"] = float64(rlk.BinarySize())
	res["gk_bytes"] = float64(gk.BinarySize())
	res["pk_bytes"] = float64(pk.BinarySize())
	line, err := json.Marshal(res)
	must(err)
	fmt.Println(string(line))
}
