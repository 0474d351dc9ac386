package backend

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Well-known resource names.
const (
	// CPU is the resource name of CPU cores.
	CPU = "CPU"
	// Memory is the resource name of memory, in bytes.
	Memory = "memory"
	// TPU is the resource name of TPU chips (Ray's "TPU" resource; GKE's
	// google.com/tpu).
	TPU = "TPU"
)

// Resources is an amount of named resources: CPU, memory (bytes), TPU (chips)
// and custom names. Amounts may be fractional (0.5 CPU). A nil map is the
// empty amount.
type Resources map[string]float64

// Granularity is the smallest resource amount backends account for; amounts
// are rounded to multiples of it, as Ray does, so that adding and releasing
// fractions never drifts.
const Granularity = 1e-4

// MaxAmount is the largest amount of one resource that a task, actor,
// bundle or node may name: 1e14 (1e14 CPUs, or 100 TB of memory in bytes).
// Amounts are accounted in integer units of [Granularity], and this bound
// keeps every amount, and sums of thousands of them, inside int64.
const MaxAmount = 1e14

// Validate returns an InvalidArgument error naming the first invalid amount
// (sorted by name) and what is valid: an amount must be finite, 0 or at
// least [Granularity] (an amount that would round to 0 is refused rather
// than taken as "nothing"), not negative (nor -0), and at most
// [MaxAmount]. An empty name is invalid too.
func (r Resources) Validate() error {
	bad := false
	for name, v := range r {
		if name == "" || amountErr(v) != "" {
			bad = true
			break
		}
	}
	if !bad {
		return nil
	}
	names := make([]string, 0, len(r))
	for k := range r {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, name := range names {
		if name == "" {
			return Errorf(InvalidArgument, "", "resource with empty name")
		}
		if msg := amountErr(r[name]); msg != "" {
			return Errorf(InvalidArgument, "", "resource %q has invalid amount %v: %s", name, r[name], msg)
		}
	}
	return nil
}

// ValidAmount reports whether v is a valid resource amount (see
// [Resources.Validate]). It is the cheap check of a hot path; Validate words
// the error.
func ValidAmount(v float64) bool {
	return v == 0 && !math.Signbit(v) || v >= Granularity/2 && v <= MaxAmount
}

// amountErr says what is wrong with amount v, or "".
func amountErr(v float64) string {
	switch {
	case ValidAmount(v):
		return ""
	case math.IsNaN(v) || math.IsInf(v, 0):
		return "amounts must be finite"
	case v == 0:
		return "negative zero; use 0"
	case v < 0:
		return "amounts must be >= 0"
	case v > MaxAmount:
		return fmt.Sprintf("amounts must be at most %g (backend.MaxAmount)", float64(MaxAmount))
	default:
		return fmt.Sprintf("it rounds to 0; amounts are counted in units of %g, so use 0 or at least %g", Granularity, Granularity)
	}
}

// Names returns the names with a non-zero amount, sorted.
func (r Resources) Names() []string {
	names := make([]string, 0, len(r))
	for k, v := range r {
		if v != 0 || k == "" {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	return names
}

// Clone returns a copy.
func (r Resources) Clone() Resources {
	if r == nil {
		return nil
	}
	out := make(Resources, len(r))
	for k, v := range r {
		out[k] = v
	}
	return out
}

// Add returns r + o as a new map.
func (r Resources) Add(o Resources) Resources {
	out := r.Clone()
	if out == nil {
		out = Resources{}
	}
	for k, v := range o {
		out[k] += v
	}
	return out
}

// String renders the amounts sorted by name, e.g. "{CPU: 1, TPU: 4}".
func (r Resources) String() string {
	var b strings.Builder
	b.WriteByte('{')
	for i, name := range r.Names() {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(name)
		b.WriteString(": ")
		b.WriteString(FormatAmount(name, r[name]))
	}
	b.WriteByte('}')
	return b.String()
}

// FormatAmount renders one amount; memory is shown in bytes with a binary
// unit when it is a whole number of them.
func FormatAmount(name string, v float64) string {
	if name == Memory && v >= 1<<20 && math.Mod(v, 1<<20) == 0 {
		if math.Mod(v, 1<<30) == 0 {
			return strconv.FormatFloat(v/(1<<30), 'f', -1, 64) + "GiB"
		}
		return strconv.FormatFloat(v/(1<<20), 'f', -1, 64) + "MiB"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// Fits reports whether need fits in free, amount by amount.
func Fits(need, free Resources) bool {
	for k, v := range need {
		if v > 0 && Quantize(v) > Quantize(free[k]) {
			return false
		}
	}
	return true
}

// Quantize converts an amount to integer units of [Granularity]. Amounts
// beyond what int64 holds saturate at the int64 bounds (NaN gives 0), so no
// amount wraps around to a negative or tiny one; validated amounts (at most
// [MaxAmount]) are exact.
func Quantize(v float64) int64 {
	q := math.Round(v / Granularity)
	switch {
	case q >= math.MaxInt64:
		return math.MaxInt64
	case q <= math.MinInt64:
		return math.MinInt64
	case q != q:
		return 0
	}
	return int64(q)
}

// Dequantize converts integer units of [Granularity] back to an amount.
func Dequantize(q int64) float64 { return float64(q) * Granularity }

// ParseQuantity parses a memory-style amount such as "4GiB", "512MiB",
// "1.5", used by cluster files.
func ParseQuantity(s string) (float64, error) {
	s = strings.TrimSpace(s)
	orig := s
	mult := 1.0
	for _, u := range []struct {
		suffix string
		mult   float64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40}} {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSuffix(s, u.suffix), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil {
		return 0, fmt.Errorf("quantity %q: want a number with an optional KiB/MiB/GiB/TiB suffix", orig)
	}
	return v * mult, nil
}
