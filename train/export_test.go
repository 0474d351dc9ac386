package train

import "context"

// HoldWorker makes every in-process worker call hold before it joins its
// run (nil: none), for tests of ranks that never join.
func HoldWorker(hold func(ctx context.Context, rank int)) {
	if hold == nil {
		holdWorker.Store(nil)
		return
	}
	holdWorker.Store(&hold)
}
