package train_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// programsWithEnv returns the PIDs of the live processes (not zombies)
// whose environment holds every one of kvs ("KEY=value"), read from
// /proc; nil where there is no /proc.
func programsWithEnv(kvs ...string) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil {
			continue
		}
		env := strings.Split(string(b), "\x00")
		if !allIn(kvs, env) {
			continue
		}
		if st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); err == nil {
			s := string(st)
			if i := strings.LastIndexByte(s, ')'); i >= 0 && strings.HasPrefix(s[i+1:], " Z") {
				continue // exited, not reaped yet
			}
		}
		pids = append(pids, pid)
	}
	return pids
}

func allIn(kvs, env []string) bool {
	for _, kv := range kvs {
		if !slices.Contains(env, kv) {
			return false
		}
	}
	return true
}

// waitProgramsGone waits, up to a minute (a condition polled), until no
// process has every one of kvs in its environment. It may run outside the
// test's goroutine.
func waitProgramsGone(kvs ...string) error {
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		pids := programsWithEnv(kvs...)
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the programs with %v still run after a minute: %v", kvs, pids)
		}
	}
}

// testMark is a value no other test's processes have in their
// environment.
func testMark(t testing.TB) string {
	return strings.ReplaceAll(t.Name(), "/", "_") + "-" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
}
