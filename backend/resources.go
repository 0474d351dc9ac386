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

// Validate returns an InvalidArgument error naming the first negative,
// NaN or infinite amount, or empty name.
func (r Resources) Validate() error {
	bad := false
	for name, v := range r {
		if name == "" || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
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
		v := r[name]
		if name == "" {
			return Errorf(InvalidArgument, "", "resource with empty name")
		}
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return Errorf(InvalidArgument, "", "resource %q has invalid amount %v: amounts must be finite and >= 0", name, v)
		}
	}
	return nil
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

// Quantize converts an amount to integer units of [Granularity].
func Quantize(v float64) int64 { return int64(math.Round(v / Granularity)) }

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
