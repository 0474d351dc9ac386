package backend_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
)

func TestResourcesValidate(t *testing.T) {
	tests := []struct {
		name    string
		r       backend.Resources
		wantErr []string // substrings; nil means valid
	}{
		{"nil", nil, nil},
		{"zero and fractions", backend.Resources{"CPU": 0.5, "TPU": 4, "memory": 1 << 30, "custom": 0}, nil},
		{"negative", backend.Resources{"CPU": -1}, []string{`resource "CPU"`, "-1", ">= 0"}},
		{"1e15 CPUs", backend.Resources{"CPU": 1e15}, []string{`resource "CPU"`, "1e+15", "at most 1e+14"}},
		{"2 PiB memory", backend.Resources{"memory": 2 << 50}, []string{`resource "memory"`, "at most 1e+14"}},
		{"1e300", backend.Resources{"x": 1e300}, []string{`resource "x"`, "at most"}},
		{"MaxFloat64", backend.Resources{"x": math.MaxFloat64}, []string{`resource "x"`, "at most"}},
		{"rounds to zero", backend.Resources{"CPU": 1e-5}, []string{`resource "CPU"`, "1e-05", "rounds to 0", "0.0001"}},
		{"negative zero", backend.Resources{"CPU": math.Copysign(0, -1)}, []string{`resource "CPU"`, "negative zero"}},
		{"MaxAmount is valid", backend.Resources{"memory": backend.MaxAmount}, nil},
		{"Granularity is valid", backend.Resources{"CPU": backend.Granularity}, nil},
		{"NaN", backend.Resources{"TPU": math.NaN()}, []string{`resource "TPU"`, "NaN", "finite"}},
		{"+Inf", backend.Resources{"memory": math.Inf(1)}, []string{`resource "memory"`, "+Inf"}},
		{"-Inf", backend.Resources{"GPU": math.Inf(-1)}, []string{`resource "GPU"`, "-Inf"}},
		{"empty name", backend.Resources{"": 1}, []string{"empty name"}},
		{"empty name with zero amount", backend.Resources{"": 0}, []string{"empty name"}},
		{"first bad name in order", backend.Resources{"b": -1, "a": -2, "CPU": 1}, []string{`resource "a"`, "-2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			err := tt.r.Validate()
			if tt.wantErr == nil {
				is.NoErr(err)
				return
			}
			is.True(err != nil)
			is.True(errors.Is(err, backend.ErrInvalidArgument))
			for _, want := range tt.wantErr {
				is.True(strings.Contains(err.Error(), want)) // the error names the resource and amount
			}
		})
	}
}

func TestFits(t *testing.T) {
	var tenth float64
	for range 10 {
		tenth += 0.1
	}
	tests := []struct {
		name       string
		need, free backend.Resources
		want       bool
	}{
		{"nothing needed", nil, nil, true},
		{"zero of an absent resource", backend.Resources{"GPU": 0}, backend.Resources{"CPU": 1}, true},
		{"exact", backend.Resources{"CPU": 2, "TPU": 4}, backend.Resources{"CPU": 2, "TPU": 4}, true},
		{"fraction", backend.Resources{"CPU": 0.5}, backend.Resources{"CPU": 1}, true},
		{"too much", backend.Resources{"CPU": 2.5}, backend.Resources{"CPU": 2}, false},
		{"absent resource", backend.Resources{"TPU": 1}, backend.Resources{"CPU": 8}, false},
		{"one of many too much", backend.Resources{"CPU": 1, "TPU": 8}, backend.Resources{"CPU": 8, "TPU": 4}, false},
		{"0.1 added 10 times needs 1.0", backend.Resources{"CPU": tenth}, backend.Resources{"CPU": 1}, true},
		{"1.0 fits 0.1 added 10 times", backend.Resources{"CPU": 1}, backend.Resources{"CPU": tenth}, true},
		{"below granularity is nothing", backend.Resources{"CPU": backend.Granularity / 4}, nil, true},
		{"one granularity too much", backend.Resources{"CPU": 1 + backend.Granularity}, backend.Resources{"CPU": 1}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			is.Equal(backend.Fits(tt.need, tt.free), tt.want)
		})
	}
}

func TestQuantize(t *testing.T) {
	t.Run("0.1 added 10 times is 1.0", func(t *testing.T) {
		is := is.New(t)
		var sum float64
		for range 10 {
			sum += 0.1
		}
		is.True(sum != 1.0) // the float drift Quantize exists for
		is.Equal(backend.Quantize(sum), backend.Quantize(1.0))
	})
	t.Run("adding and releasing fractions never drifts", func(t *testing.T) {
		is := is.New(t)
		free := backend.Quantize(8)
		for range 1000 {
			free -= backend.Quantize(0.3)
		}
		for range 1000 {
			free += backend.Quantize(0.3)
		}
		is.Equal(free, backend.Quantize(8))
	})
	tests := []struct {
		in   float64
		want int64
	}{
		{0, 0}, {1, 10000}, {0.5, 5000}, {0.0001, 1}, {0.00004, 0}, {0.00006, 1}, {64 << 30, (64 << 30) * 10000},
		{backend.MaxAmount, backend.MaxAmount * 10000},
	}
	for _, tt := range tests {
		t.Run(backend.FormatAmount("", tt.in), func(t *testing.T) {
			is := is.New(t)
			is.Equal(backend.Quantize(tt.in), tt.want)
			is.Equal(backend.Quantize(backend.Dequantize(tt.want)), tt.want) // round trip
		})
	}
}

// TestQuantizeSaturates: amounts beyond int64 never wrap to a negative or
// small number.
func TestQuantizeSaturates(t *testing.T) {
	tests := []struct {
		in   float64
		want int64
	}{
		{1e15, math.MaxInt64}, {2 << 50, math.MaxInt64}, {1e300, math.MaxInt64}, {math.MaxFloat64, math.MaxInt64},
		{math.Inf(1), math.MaxInt64}, {-1e300, math.MinInt64}, {math.NaN(), 0},
	}
	for _, tt := range tests {
		t.Run(backend.FormatAmount("", tt.in), func(t *testing.T) {
			is := is.New(t)
			is.Equal(backend.Quantize(tt.in), tt.want)
		})
	}
}

func TestParseQuantity(t *testing.T) {
	tests := []struct {
		in      string
		want    float64
		wantErr bool
	}{
		{"4GiB", 4 << 30, false},
		{"512MiB", 512 << 20, false},
		{"1.5", 1.5, false},
		{"8", 8, false},
		{"2KiB", 2 << 10, false},
		{"1TiB", 1 << 40, false},
		{"4Gi", 4 << 30, false},
		{"256Mi", 256 << 20, false},
		{"16Ki", 16 << 10, false},
		{"2Ti", 2 << 40, false},
		{"0.5GiB", 512 << 20, false},
		{" 32GiB ", 32 << 30, false},
		{"32 GiB", 32 << 30, false},
		{"bad", 0, true},
		{"", 0, true},
		{"GiB", 0, true},
		{"4GB", 0, true},
		{"4gib", 0, true},
		{"4 G", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			is := is.New(t)
			got, err := backend.ParseQuantity(tt.in)
			if tt.wantErr {
				is.True(err != nil)
				is.True(strings.Contains(err.Error(), "KiB/MiB/GiB/TiB")) // says what is valid
				return
			}
			is.NoErr(err)
			is.Equal(got, tt.want)
		})
	}
}

func TestParseQuantityErrorNamesInput(t *testing.T) {
	for _, in := range []string{"fourGiB", "x512MiB"} {
		t.Run(in, func(t *testing.T) {
			is := is.New(t)
			_, err := backend.ParseQuantity(in)
			is.True(err != nil)
			is.True(strings.Contains(err.Error(), `"`+in+`"`)) // the error quotes what the user wrote
		})
	}
}

func TestFormatAmount(t *testing.T) {
	tests := []struct {
		name string
		v    float64
		want string
	}{
		{"memory", 4 << 30, "4GiB"},
		{"memory", 512 << 20, "512MiB"},
		{"memory", 1536 << 20, "1536MiB"},
		{"memory", 64 << 30, "64GiB"},
		{"memory", 1000, "1000"},
		{"memory", 1<<20 + 1, "1048577"},
		{"memory", 0, "0"},
		{"CPU", 1 << 30, "1073741824"},
		{"CPU", 0.5, "0.5"},
		{"TPU", 4, "4"},
	}
	for _, tt := range tests {
		t.Run(tt.name+"="+tt.want, func(t *testing.T) {
			is := is.New(t)
			is.Equal(backend.FormatAmount(tt.name, tt.v), tt.want)
		})
	}
}

func TestResourcesString(t *testing.T) {
	tests := []struct {
		r    backend.Resources
		want string
	}{
		{nil, "{}"},
		{backend.Resources{"TPU": 4, "CPU": 1}, "{CPU: 1, TPU: 4}"},
		{backend.Resources{"memory": 32 << 30, "CPU": 0.5, "GPU": 0}, "{CPU: 0.5, memory: 32GiB}"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			is := is.New(t)
			is.Equal(tt.r.String(), tt.want)
		})
	}
}

func TestResourcesAddClone(t *testing.T) {
	is := is.New(t)
	a := backend.Resources{"CPU": 1}
	sum := a.Add(backend.Resources{"CPU": 0.5, "TPU": 4})
	is.Equal(sum, backend.Resources{"CPU": 1.5, "TPU": 4})
	is.Equal(a, backend.Resources{"CPU": 1}) // Add does not modify its receiver
	is.Equal(backend.Resources(nil).Add(nil), backend.Resources{})
	is.Equal(backend.Resources(nil).Clone(), backend.Resources(nil))
	c := a.Clone()
	c["CPU"] = 9
	is.Equal(a["CPU"], 1.0) // Clone is a copy
}
