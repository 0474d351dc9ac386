package data

import (
	"context"
	"testing"
	"time"

	"github.com/matryer/is"
)

// testPool is an actor pool whose actors are plain values and whose clock
// is the test's, to check the growth and idle policy step by step.
func testPool(t *testing.T, min, max int) (p *actorPool[int, int], clock *time.Time, started, stopped *int) {
	t.Helper()
	p = newActorPool[int, int](context.Background(), "op", Pool[int, int]{Min: min, Max: max}, nil)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock = &t0
	started, stopped = new(int), new(int)
	p.now = func() time.Time { return *clock }
	p.newMember = func(context.Context) (*member[int], error) { *started++; return &member[int]{}, nil }
	p.stopMember = func(*member[int]) { *stopped++ }
	p.mu.Lock()
	for range min {
		m, _ := p.newMember(p.ctx)
		p.add(m)
		p.handOff(m)
	}
	p.size = min
	p.load.reset(*clock)
	p.mu.Unlock()
	t.Cleanup(func() { p.close(context.Background()) })
	return p, clock, started, stopped
}

func TestPoolGrowsOnlyWhenCallsKeepWaiting(t *testing.T) {
	is := is.New(t)
	p, clock, started, _ := testPool(t, 1, 3)
	advance := func(d time.Duration) { *clock = clock.Add(d) }
	tick := func() {
		is.Equal(len(p.tick(*clock)), 0)
		p.grows.Wait() // a growth started by tick
	}

	a, _, err := p.take() // the one actor is busy
	is.NoErr(err)
	is.True(a != nil)

	// A call waits for half of the window: no growth.
	_, ch, _ := p.take()
	advance(DefaultGrowAfter / 2)
	p.put(a, nil) // handed to the waiting call
	is.Equal(<-ch, a)
	advance(DefaultGrowAfter / 2)
	tick()
	is.Equal(*started, 1)

	// A call waits for the whole window: one actor more, handed to it.
	_, ch, _ = p.take()
	advance(DefaultGrowAfter - time.Millisecond)
	tick()
	is.Equal(*started, 1) // not yet
	advance(time.Millisecond)
	tick()
	is.Equal(*started, 2)
	b := <-ch
	is.True(b != a)

	// Calls keep waiting: the next actor needs another full window.
	_, ch, _ = p.take()
	advance(DefaultGrowAfter / 2)
	tick()
	is.Equal(*started, 2)
	advance(DefaultGrowAfter / 2)
	tick()
	is.Equal(*started, 3)
	c := <-ch

	// At Max it grows no more.
	_, ch, _ = p.take()
	advance(3 * DefaultGrowAfter)
	tick()
	is.Equal(*started, 3)
	p.put(a, nil)
	is.Equal(<-ch, a)
	p.put(a, nil)
	p.put(b, nil)
	p.put(c, nil)
	is.Equal(p.stats().Peak, 3)
}

func TestPoolStopsActorsIdleForIdleTimeout(t *testing.T) {
	is := is.New(t)
	p, clock, started, _ := testPool(t, 1, 3)
	advance := func(d time.Duration) { *clock = clock.Add(d) }
	grow := func() *member[int] {
		_, ch, _ := p.take()
		advance(DefaultGrowAfter)
		is.Equal(len(p.tick(*clock)), 0)
		p.grows.Wait()
		return <-ch
	}
	a, _, _ := p.take()
	b := grow()
	c := grow()
	is.Equal(*started, 3)
	p.put(a, nil)
	p.put(b, nil)
	p.put(c, nil)

	// A light load: each call goes to the actor used last (c), so a and b
	// stay idle, and leave the pool after IdleTimeout, the one idle
	// longest first; c stays, as the pool's Min.
	for i := range 4 {
		advance(DefaultIdleTimeout / 4)
		m, _, _ := p.take()
		is.Equal(m, c)
		p.put(m, nil)
		stop := p.tick(*clock)
		if i < 3 {
			is.Equal(len(stop), 0) // idle for less than IdleTimeout
			continue
		}
		is.Equal(stop, []*member[int]{a, b})
	}
	advance(10 * DefaultIdleTimeout)
	is.Equal(len(p.tick(*clock)), 0) // never below Min
	st := p.stats()
	is.Equal(st.Started, 3)
	is.Equal(st.Stopped, 2)
	m, _, _ := p.take()
	is.Equal(m, c)
	p.put(m, nil)
}

// A call that waited for an actor is handed the one put back first.
func TestPoolServesWaitingCallsInOrder(t *testing.T) {
	is := is.New(t)
	p, _, _, _ := testPool(t, 1, 1)
	a, _, _ := p.take()
	_, first, _ := p.take()
	_, second, _ := p.take()
	p.put(a, nil)
	is.Equal(<-first, a)
	select {
	case <-second:
		t.Fatal("the second call got an actor the first was given")
	default:
	}
	p.put(a, nil)
	is.Equal(<-second, a)
	p.put(a, nil)
}
