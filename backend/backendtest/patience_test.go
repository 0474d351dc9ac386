package backendtest

import (
	"testing"
	"time"
)

// TestWaitUsesPatience: the suite's waits end after Harness.Patience,
// not after the 20 s default.
func TestWaitUsesPatience(t *testing.T) {
	s := &suite{h: Harness{Patience: 10 * time.Millisecond}}
	start := time.Now()
	if s.waited(make(chan struct{})) {
		t.Fatal("waited for a channel that never closes")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the wait took %v with Patience 10ms", d)
	}
	closed := make(chan struct{})
	close(closed)
	if !s.waited(closed) {
		t.Fatal("a closed channel was not waited for")
	}
}
