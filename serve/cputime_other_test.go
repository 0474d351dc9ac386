//go:build !unix

package serve_test

import "time"

// cpuTime is 0 where getrusage is missing: cpu-µs/req is not reported.
func cpuTime() time.Duration { return 0 }
