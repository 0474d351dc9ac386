//go:build !unix

package ray_test

import "time"

// cpuTime is 0 where getrusage is missing: the CPU ratios are not reported.
func cpuTime() time.Duration { return 0 }
