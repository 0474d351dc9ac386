package cluster

import (
	"context"
	"testing"

	"github.com/matryer/is"
)

// TestAfterFuncID: the numbered watch runs once when the task context is
// cancelled, unless stopped first; a stale number stops nothing; with
// another watch registered it falls back to a stop function; registered
// after the cancellation it runs at once.
func TestAfterFuncID(t *testing.T) {
	is := is.New(t)
	var c taskCtx
	ran := make(chan int, 4)

	id1, stop := c.AfterFuncID(func() { ran <- 1 })
	is.True(id1 != 0 && stop == nil)
	is.True(c.StopAfterFunc(id1))  // stopped before it ran
	is.True(!c.StopAfterFunc(id1)) // once

	id2, _ := c.AfterFuncID(func() { ran <- 2 })
	is.True(id2 != 0 && id2 != id1)
	is.True(!c.StopAfterFunc(id1)) // a stale number leaves the new watch

	other := c.AfterFunc(func() { ran <- 3 }) // the first slot is taken
	id4, stop4 := c.AfterFuncID(func() { ran <- 4 })
	is.True(id4 == 0 && stop4 != nil) // falls back to a stop function
	is.True(stop4())
	_ = other

	c.cancel()
	got := map[int]bool{<-ran: true, <-ran: true}
	is.Equal(got, map[int]bool{2: true, 3: true})
	is.True(!c.StopAfterFunc(id2)) // already ran

	id5, stop5 := c.AfterFuncID(func() { ran <- 5 })
	is.True(id5 == 0 && stop5 != nil)
	is.Equal(<-ran, 5) // registered after the cancellation: runs at once
	is.True(!stop5())
	is.Equal(len(ran), 0)
	is.Equal(c.Err(), context.Canceled)
}
