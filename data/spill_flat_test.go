package data_test

import (
	"cmp"
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/data"
)

// flatRow holds no pointers: it is spilled as its bytes in memory, not
// with gob.
type flatRow struct {
	K   int32
	V   float64
	Tag [3]byte
	OK  bool
}

// Rows of a flat type spilled as their bytes come back exactly (NaN and
// -0 bit for bit), sorted stably, and their aggregation states too.
func TestSpillFlatRows(t *testing.T) {
	is := is.New(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 4))
	rows := make([]flatRow, 60_000)
	for i := range rows {
		rows[i] = flatRow{K: int32(rng.IntN(500)), V: rng.NormFloat64(), Tag: [3]byte{byte(i), byte(i >> 8), 7}, OK: i%3 == 0}
	}
	rows[10].V, rows[20].V = math.NaN(), math.Copysign(0, -1)
	budget := data.MemoryBudget(data.MinMemoryBudget)

	var st data.Stats
	got, err := data.Take(ctx, data.SortBy(data.FromItems(rows), func(r flatRow) int32 { return r.K }, budget), len(rows)+1, data.CollectStats(&st))
	is.NoErr(err)
	want := slices.Clone(rows)
	slices.SortStableFunc(want, func(a, b flatRow) int { return cmp.Compare(a.K, b.K) })
	is.Equal(len(got), len(want))
	for i := range want {
		if got[i] != want[i] && !(math.IsNaN(got[i].V) && math.IsNaN(want[i].V)) {
			t.Fatalf("row %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	is.True(st.Operators[1].Memory.SpillFiles > 1) // it did spill
	negZero := false
	for _, r := range got {
		negZero = negZero || (r.V == 0 && math.Signbit(r.V))
	}
	is.True(negZero) // -0 kept bit for bit

	sums, err := data.Take(ctx, data.GroupBy(data.FromItems(rows), func(r flatRow) int32 { return r.K },
		data.CountOf[flatRow](), budget), 1000, data.CollectStats(&st))
	is.NoErr(err)
	counts := map[int32]int64{}
	for _, r := range rows {
		counts[r.K]++
	}
	is.Equal(len(sums), len(counts))
	for _, g := range sums {
		is.Equal(g.Value, counts[g.Key])
	}
}
