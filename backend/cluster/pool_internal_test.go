package cluster

import (
	"sync"
	"testing"
	"time"

	"github.com/matryer/is"
)

// TestPoolQuit: once quit closes, every pool goroutine exits: the idle
// ones (woken with a nil runner), the ones still running (when their work
// returns), and one started after quit (after its work); work handed to
// the pool before runs exactly once.
func TestPoolQuit(t *testing.T) {
	is := is.New(t)
	var wg sync.WaitGroup
	quit := make(chan struct{})
	p := newPool(&wg, quit, 4)
	var mu sync.Mutex
	ran := 0
	count := funcRunner(func() { mu.Lock(); ran++; mu.Unlock() })
	for range 20 {
		p.run(count) // most go to idle goroutines
	}
	release := make(chan struct{})
	started := make(chan struct{}, 2)
	for range 2 {
		p.run(funcRunner(func() { started <- struct{}{}; <-release; count() }))
	}
	<-started
	<-started
	close(quit)
	close(release)
	p.run(count) // after quit
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("pool goroutines still running 30s after quit")
	}
	is.Equal(ran, 23)
	is.Equal(p.live.Load(), int32(0))
}
