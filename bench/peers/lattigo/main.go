// Command lattigo-peer times Lattigo's ring NTT for hecloud's benchmarks.
//
// Usage: lattigo-peer -min-batch-ms 20 -samples 7 LOGN:Q1[,Q2,...] ...
//
// For each argument it builds a Lattigo ring of degree 2^LOGN over the given
// primes (the same primes hecloud uses) and prints one JSON line:
// {"logn":16,"limbs":1,"fwd_ns":...,"inv_ns":...,"mul_ns":...}
// with the fastest time (over short batches, as hecloud's own figures) of one
// forward NTT, one inverse NTT and one pointwise Montgomery product over all
// limbs, on one goroutine.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/tuneinsight/lattigo/v6/ring"
	"github.com/tuneinsight/lattigo/v6/utils/sampling"
)

type result struct {
	LogN  int     `json:"logn"`
	Limbs int     `json:"limbs"`
	FwdNs float64 `json:"fwd_ns"`
	InvNs float64 `json:"inv_ns"`
	MulNs float64 `json:"mul_ns"`
}

func minNs(samples int, minBatch time.Duration, op func()) float64 {
	op()
	calls := 0
	start := time.Now()
	for time.Since(start) < minBatch || calls == 0 {
		op()
		calls++
	}
	per := make([]float64, samples)
	for s := range per {
		t := time.Now()
		for i := 0; i < calls; i++ {
			op()
		}
		per[s] = float64(time.Since(t).Nanoseconds()) / float64(calls)
	}
	sort.Float64s(per)
	return per[0]
}

func parseSpec(spec string) (int, []uint64, error) {
	parts := strings.SplitN(spec, ":", 2)
	if len(parts) != 2 {
		return 0, nil, fmt.Errorf("want LOGN:Q1[,Q2...], got %q", spec)
	}
	logN, err := strconv.Atoi(parts[0])
	if err != nil {
		return 0, nil, err
	}
	var qs []uint64
	for _, s := range strings.Split(parts[1], ",") {
		q, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, nil, err
		}
		qs = append(qs, q)
	}
	return logN, qs, nil
}

func main() {
	minBatchMs := flag.Int("min-batch-ms", 20, "minimum duration of one timed batch")
	samples := flag.Int("samples", 7, "timed batches per figure (fastest reported)")
	flag.Parse()
	enc := json.NewEncoder(os.Stdout)
	prng, err := sampling.NewPRNG()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for _, spec := range flag.Args() {
		logN, qs, err := parseSpec(spec)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		r, err := ring.NewRing(1<<logN, qs)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		us := ring.NewUniformSampler(prng, r)
		a, b := us.ReadNew(), us.ReadNew()
		out := r.NewPoly()
		batch := time.Duration(*minBatchMs) * time.Millisecond
		res := result{LogN: logN, Limbs: len(qs)}
		res.FwdNs = minNs(*samples, batch, func() { r.NTT(a, a) })
		res.InvNs = minNs(*samples, batch, func() { r.INTT(a, a) })
		res.MulNs = minNs(*samples, batch, func() { r.MulCoeffsMontgomery(a, b, out) })
		if err := enc.Encode(res); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}
