package worker

import (
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/matryer/is"
)

// TestPendingTable checks the pending-call table against a map: calls put
// with increasing IDs and taken in any order, some held long (their slots
// taken when the window of IDs comes round again), many at once (the
// array grows to its bound and the rest go to the map), unknown and taken
// IDs (late replies) not found, and takeAll returning every call once.
func TestPendingTable(t *testing.T) {
	is := is.New(t)
	rng := rand.New(rand.NewPCG(1, 2))
	var tab pendingTable
	model := map[uint64]string{}
	var next uint64
	check := func(id uint64) {
		p, ok := tab.take(id)
		name, want := model[id]
		is.Equal(ok, want) // found as the model says
		if ok {
			is.Equal(p.name, name)
			delete(model, id)
		}
		is.Equal(tab.len(), len(model))
	}
	_, ok := tab.take(1) // empty: nothing, no panic
	is.True(!ok)
	for round := range 6 {
		// Hold some calls long, then run a window of short ones past them.
		inflight := []int{8, 64, 300, 6000, 64, 1}[round]
		for range 3 {
			next++
			tab.put(next, pendingCall{name: "long"})
			model[next] = "long"
		}
		var window []uint64
		for range 20000 {
			if len(window) < inflight || rng.IntN(2) == 0 {
				next++
				name := string(rune('a' + next%26))
				tab.put(next, pendingCall{name: name})
				model[next] = name
				window = append(window, next)
				is.Equal(tab.len(), len(model))
				continue
			}
			i := rng.IntN(len(window)) // replies come in any order
			if rng.IntN(4) > 0 {
				i = 0 // mostly the oldest
			}
			id := window[i]
			window = slices.Delete(window, i, i+1)
			check(id)
			check(id)                   // a late second reply: not found
			check(next + 1 + uint64(i)) // an unknown ID: not found
		}
		for _, id := range window {
			check(id)
		}
		is.True(len(tab.slots) <= maxPendingSlots)
	}
	is.Equal(len(model), 18) // the long calls
	all := tab.takeAll()
	is.Equal(len(all), 18)
	for _, p := range all {
		is.Equal(p.name, "long")
	}
	is.Equal(tab.len(), 0)
	_, ok = tab.take(1)
	is.True(!ok)
	tab.put(next+1, pendingCall{name: "after"}) // usable again
	p, ok := tab.take(next + 1)
	is.True(ok && p.name == "after")
}

// TestIDTableGetAndValues checks the lookups a server connection's table
// of running work makes, against a map: get finds what put holds and
// leaves it, ID 0 (which a driver may send) is held like any other, and
// values yields every value once, slot array and map alike.
func TestIDTableGetAndValues(t *testing.T) {
	is := is.New(t)
	var tab idTable[int]
	model := map[uint64]int{}
	_, ok := tab.get(0) // empty: nothing, no panic
	is.True(!ok)
	_, ok = tab.take(0)
	is.True(!ok)
	is.Equal(len(slices.Collect(tab.values())), 0)
	rng := rand.New(rand.NewPCG(3, 4))
	ids := []uint64{0}
	for id := uint64(1); id <= 3000; id++ {
		ids = append(ids, id)
	}
	ids = append(ids, 1<<40, 1<<40+128, 1<<63) // far from the window; same slot as others
	for i, id := range ids {
		tab.put(id, i)
		model[id] = i
	}
	check := func() {
		t.Helper()
		is.Equal(tab.len(), len(model))
		for id, v := range model {
			got, ok := tab.get(id)
			is.True(ok)
			is.Equal(got, v)
		}
		_, ok := tab.get(5000)
		is.True(!ok)
		all := slices.Sorted(tab.values())
		want := slices.Sorted(maps.Values(model))
		is.Equal(all, want)
	}
	check()
	for range 2000 { // take some, in any order, then look again
		id := ids[rng.IntN(len(ids))]
		v, ok := tab.take(id)
		w, want := model[id]
		is.Equal(ok, want)
		if ok {
			is.Equal(v, w)
			delete(model, id)
		}
	}
	check()
	_, ok = model[0]
	if ok {
		_, ok = tab.take(0)
		is.True(ok)
		delete(model, 0)
		_, ok = tab.get(0)
		is.True(!ok)
	}
	check()
}
