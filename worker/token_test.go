//go:build unix

package worker

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/matryer/is"
)

func TestLaunchedToken(t *testing.T) {
	pipeWith := func(t *testing.T, s string) string {
		t.Helper()
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		w.WriteString(s)
		w.Close()
		// launchedToken closes the descriptor it is given: hand it a
		// duplicate that no *os.File owns.
		fd, err := syscall.Dup(int(r.Fd()))
		r.Close()
		if err != nil {
			t.Fatal(err)
		}
		return strconv.Itoa(fd)
	}
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		env     func(t *testing.T) map[string]string
		want    string
		wantErr string
	}{
		{"pipe", func(t *testing.T) map[string]string { return map[string]string{EnvTokenFD: pipeWith(t, "from-pipe")} }, "from-pipe", ""},
		{"file", func(t *testing.T) map[string]string { return map[string]string{EnvTokenFile: file} }, "from-file", ""},
		{"env", func(t *testing.T) map[string]string { return map[string]string{EnvToken: "from-env"} }, "from-env", ""},
		{"none", func(t *testing.T) map[string]string { return map[string]string{} }, "", ""},
		{"several", func(t *testing.T) map[string]string { return map[string]string{EnvToken: "a", EnvTokenFile: file} }, "", "not several"},
		{"missing file", func(t *testing.T) map[string]string { return map[string]string{EnvTokenFile: file + ".nope"} }, "", EnvTokenFile},
		{"too long", func(t *testing.T) map[string]string {
			return map[string]string{EnvTokenFD: pipeWith(t, strings.Repeat("x", maxTokenSize+1))}
		}, "", "longer than"},
		{"bad fd", func(t *testing.T) map[string]string { return map[string]string{EnvTokenFD: "two"} }, "", EnvTokenFD},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			got, err := launchedToken(tt.env(t))
			if tt.wantErr != "" {
				is.True(err != nil && strings.Contains(err.Error(), tt.wantErr)) // names what was wrong
				return
			}
			is.NoErr(err)
			is.Equal(got, tt.want)
		})
	}
}
