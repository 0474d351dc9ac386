package cluster

import (
	"context"
	"testing"

	"github.com/matryer/is"
)

// TestLazyCancelAfterFunc: functions registered on a task context run once
// when it is cancelled, unless stopped first; the first registration
// (kept outside the map) and later ones behave alike.
func TestLazyCancelAfterFunc(t *testing.T) {
	is := is.New(t)
	var l lazyCancel
	ran := make(chan int, 4)
	stop1 := l.afterFunc(func() { ran <- 1 }, nil)
	stop2 := l.afterFunc(func() { ran <- 2 }, nil)
	stop3 := l.afterFunc(func() { ran <- 3 }, nil)
	is.True(stop1())  // the first one, stopped
	is.True(!stop1()) // once
	is.True(stop3())
	stop4 := l.afterFunc(func() { ran <- 4 }, nil) // takes the free first slot
	l.cancelWith(context.Canceled, nil)
	got := map[int]bool{<-ran: true, <-ran: true}
	is.Equal(got, map[int]bool{2: true, 4: true})
	is.True(!stop2() && !stop4()) // already ran
	l.afterFunc(func() { ran <- 5 }, nil)
	is.Equal(<-ran, 5) // registered after the cancellation: runs at once
	is.Equal(len(ran), 0)
}
