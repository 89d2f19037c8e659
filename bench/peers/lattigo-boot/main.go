// Command lattigo-boot-peer times Lattigo v6.2.0's CKKS bootstrapping
// (circuits/ckks/bootstrapping) for hecloud's benchmarks, with Lattigo's
// default sparse-secret parameter set N16QP1546H192H32.
//
// Usage: lattigo-boot-peer -logn 16 -mode boot|deep
//
// -logn below 16 shrinks the same literal the way Lattigo's own bootstrapping
// tests and examples do (LogN lowered, LogMessageRatio raised by 16 - logN):
// insecure, only so that a quick test can run the whole path.
//
// boot: bootstrappings (-runs of them timed, their median reported) of a
// full-slot random complex vector encrypted at level 0. deep: a degree-63
// Chebyshev approximation of sin(pi x)/2 applied four times in a row,
// bootstrapping whenever the levels left cannot hold the next application.
// Each mode prints one JSON line.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"math/big"
	"math/rand"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/tuneinsight/lattigo/v6/circuits/ckks/bootstrapping"
	"github.com/tuneinsight/lattigo/v6/circuits/ckks/polynomial"
	"github.com/tuneinsight/lattigo/v6/core/rlwe"
	"github.com/tuneinsight/lattigo/v6/schemes/ckks"
	"github.com/tuneinsight/lattigo/v6/utils"
	"github.com/tuneinsight/lattigo/v6/utils/bignum"
)

// Degree of the polynomial and number of applications of the deep workload.
const (
	degree       = 63
	applications = 4
	functionName = "sin(pi*x)/2"
)

func f(x float64) float64 { return math.Sin(math.Pi*x) / 2 }

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

// peakRSS reads VmHWM (the resident set's high-water mark) of this process.
func peakRSS() uint64 {
	file, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer file.Close()
	sc := bufio.NewScanner(file)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "VmHWM:" {
			kb, err := strconv.ParseUint(fields[1], 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return 0
}

// setup returns the residual and bootstrapping parameters of
// N16QP1546H192H32, shrunk to logN as Lattigo's tests do when logN < 16.
func setup(logN int) (ckks.Parameters, bootstrapping.Parameters) {
	lit := bootstrapping.N16QP1546H192H32
	residual := lit.SchemeParams
	btpLit := lit.BootstrappingParams
	residual.LogN = logN
	btpLit.LogN = utils.Pointy(logN)
	params, err := ckks.NewParametersFromLiteral(residual)
	must(err)
	btp, err := bootstrapping.NewParametersFromLiteral(params, btpLit)
	must(err)
	if logN < 16 {
		btp.Mod1ParametersLiteral.LogMessageRatio += 16 - logN
	}
	return params, btp
}

func emit(v map[string]interface{}) {
	out, err := json.Marshal(v)
	must(err)
	fmt.Println(string(out))
}

func main() {
	logN := flag.Int("logn", 16, "log2 N (16: Lattigo's default; 12 to 15: insecure test sizes)")
	mode := flag.String("mode", "boot", "boot: bootstrapping (-runs timed); deep: degree-63 polynomial applied 4 times")
	seed := flag.Int64("seed", 1, "seed of the random input vector")
	warmup := flag.Int("warmup", 0, "boot mode: untimed bootstrappings of the same ciphertext before the timed one (the heap then has its working set, as in a long-running server)")
	runs := flag.Int("runs", 1, "boot mode: timed bootstrappings; boot_ms is their median")
	flag.Parse()
	if *logN < 12 || *logN > 16 {
		fmt.Fprintln(os.Stderr, "-logn must be 12 to 16")
		os.Exit(2)
	}

	params, btpParams := setup(*logN)
	rng := rand.New(rand.NewSource(*seed))

	kgen := rlwe.NewKeyGenerator(params)
	sk := kgen.GenSecretKeyNew()
	ecd := ckks.NewEncoder(params)
	enc := rlwe.NewEncryptor(params, sk)
	dec := rlwe.NewDecryptor(params, sk)

	start := time.Now()
	evk, _, err := btpParams.GenEvaluationKeys(sk)
	must(err)
	keygen := time.Since(start)
	btp, err := bootstrapping.NewEvaluator(btpParams, evk)
	must(err)

	slots := params.MaxSlots()

	switch *mode {
	case "boot":
		values := make([]complex128, slots)
		for i := range values {
			values[i] = complex(2*rng.Float64()-1, 2*rng.Float64()-1)
		}
		// Level 0 is the lowest level Bootstrap accepts (Lattigo's own
		// tests bootstrap from there), so no level is wasted.
		pt := ckks.NewPlaintext(params, 0)
		must(ecd.Encode(values, pt))
		ct, err := enc.EncryptNew(pt)
		must(err)

		for i := 0; i < *warmup; i++ {
			_, err := btp.Bootstrap(ct)
			must(err)
		}

		if *runs < 1 {
			fmt.Fprintln(os.Stderr, "-runs must be at least 1")
			os.Exit(2)
		}
		var out *rlwe.Ciphertext
		times := make([]float64, *runs)
		for i := range times {
			start = time.Now()
			out, err = btp.Bootstrap(ct)
			must(err)
			times[i] = ms(time.Since(start))
		}
		sort.Float64s(times)
		boot := times[len(times)/2]

		have := make([]complex128, slots)
		must(ecd.Decode(dec.DecryptNew(out), have))
		prec := ckks.GetPrecisionStats(params, ecd, nil, values, have, 0, false)
		emit(map[string]interface{}{
			"logn":                *logN,
			"slots":               slots,
			"boot_ms":             boot,
			"boot_ms_runs":        times,
			"keygen_ms":           ms(keygen),
			"key_bytes":           evk.BinarySize(),
			"levels_left":         out.Level(),
			"precision_mean_bits": prec.AVGLog2Prec.Real,
			"precision_min_bits":  prec.MINLog2Prec.Real,
			"peak_rss_bytes":      peakRSS(),
		})

	case "deep":
		// The polynomial runs on the residual parameters, with a
		// relinearization key of their own (the bootstrapping keys live on
		// the bootstrapping parameters' modulus).
		rlk := kgen.GenRelinearizationKeyNew(sk)
		eval := ckks.NewEvaluator(params, rlwe.NewMemEvaluationKeySet(rlk))
		polyEval := polynomial.NewEvaluator(params, eval)

		fBig := func(x *big.Float) *big.Float {
			xf, _ := x.Float64()
			return new(big.Float).SetPrec(x.Prec()).SetFloat64(f(xf))
		}
		interval := bignum.Interval{
			A:     *bignum.NewFloat(-1, 128),
			B:     *bignum.NewFloat(1, 128),
			Nodes: degree,
		}
		cheb := bignum.ChebyshevApproximation(fBig, interval)
		coeffs := make([]float64, len(cheb.Coeffs))
		for i, c := range cheb.Coeffs {
			coeffs[i], _ = c[0].Float64()
		}
		// On [-1, 1] the change of basis is the identity, so the input goes
		// straight into the Chebyshev evaluation and no level is spent on it.
		poly := polynomial.NewPolynomial(cheb)
		depth := poly.Depth()

		values := make([]float64, slots)
		want := make([]float64, slots)
		for i := range values {
			values[i] = 2*rng.Float64() - 1
			want[i] = values[i]
			for k := 0; k < applications; k++ {
				want[i] = f(want[i])
			}
		}
		pt := ckks.NewPlaintext(params, params.MaxLevel())
		must(ecd.Encode(values, pt))
		ct, err := enc.EncryptNew(pt)
		must(err)

		var bootTotal, evalTotal time.Duration
		boots := 0
		start = time.Now()
		for k := 0; k < applications; k++ {
			if ct.Level() < depth {
				t := time.Now()
				ct, err = btp.Bootstrap(ct)
				must(err)
				bootTotal += time.Since(t)
				boots++
			}
			t := time.Now()
			ct, err = polyEval.Evaluate(ct, poly, params.DefaultScale())
			must(err)
			evalTotal += time.Since(t)
		}
		total := time.Since(start)

		have := make([]float64, slots)
		must(ecd.Decode(dec.DecryptNew(ct), have))
		prec := ckks.GetPrecisionStats(params, ecd, nil, want, have, 0, false)
		emit(map[string]interface{}{
			"logn":                *logN,
			"slots":               slots,
			"function":            functionName,
			"degree":              degree,
			"applications":        applications,
			"chebyshev_coeffs":    coeffs,
			"total_ms":            ms(total),
			"boots":               boots,
			"boot_ms_total":       ms(bootTotal),
			"eval_ms_total":       ms(evalTotal),
			"levels_left":         ct.Level(),
			"precision_mean_bits": prec.AVGLog2Prec.Real,
			"precision_min_bits":  prec.MINLog2Prec.Real,
			"peak_rss_bytes":      peakRSS(),
		})

	default:
		fmt.Fprintln(os.Stderr, "-mode must be boot or deep")
		os.Exit(2)
	}
}
