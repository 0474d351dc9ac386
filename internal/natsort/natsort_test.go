package natsort

import (
	"slices"
	"testing"
)

func TestCompare(t *testing.T) {
	got := []string{"w10", "w2", "cpu-1", "v6e-16-1-w0", "w1", "v6e-16-0-w3", "w02", "v6e-16-0-w12"}
	slices.SortStableFunc(got, Compare)
	want := []string{"cpu-1", "v6e-16-0-w3", "v6e-16-0-w12", "v6e-16-1-w0", "w1", "w2", "w02", "w10"}
	if !slices.Equal(got, want) {
		t.Fatalf("sorted %v, want %v", got, want)
	}
}
