package backend_test

import (
	"math"
	"strings"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/tpu"
)

func TestPlacementGroupSpecValidate(t *testing.T) {
	cpu := backend.Bundle{Resources: backend.Resources{backend.CPU: 1}}
	tests := []struct {
		name string
		spec *backend.PlacementGroupSpec
		want string // "" means valid
	}{
		{"valid", &backend.PlacementGroupSpec{Bundles: []backend.Bundle{cpu}}, ""},
		{"MaxBundles", &backend.PlacementGroupSpec{Bundles: make([]backend.Bundle, backend.MaxBundles+1)}, "at most 10000"},
		{"no bundles", &backend.PlacementGroupSpec{}, "at least one bundle"},
		{"bad strategy", &backend.PlacementGroupSpec{Strategy: 9, Bundles: []backend.Bundle{cpu}}, "unknown strategy 9"},
		{"overflowing amount", &backend.PlacementGroupSpec{Bundles: []backend.Bundle{cpu, {Resources: backend.Resources{backend.Memory: 1e300}}}}, "bundle 1"},
		{"negative zero", &backend.PlacementGroupSpec{Bundles: []backend.Bundle{{Resources: backend.Resources{backend.CPU: math.Copysign(0, -1)}}}}, "negative zero"},
		{"empty bundle", &backend.PlacementGroupSpec{Bundles: []backend.Bundle{{}}}, "empty bundle"},
		{"nil", nil, "nil placement group spec"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			err := tt.spec.Validate("op")
			if tt.want == "" {
				is.NoErr(err)
				return
			}
			is.Equal(backend.CodeOf(err), backend.InvalidArgument)
			is.True(strings.Contains(err.Error(), tt.want)) // names what is wrong
		})
	}
}

func TestSliceRequestAmounts(t *testing.T) {
	is := is.New(t)
	_, err := (&backend.SliceRequest{Shape: tpu.SliceShape{Generation: tpu.V6e, Topology: tpu.MustParseTopology("4x4")}, BundleResources: backend.Resources{backend.CPU: 1e15}}).Resolve("reserve")
	is.Equal(backend.CodeOf(err), backend.InvalidArgument)
	is.True(strings.Contains(err.Error(), "at most"))
}
