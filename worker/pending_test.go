package worker

import (
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
