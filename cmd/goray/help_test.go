package main

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestExamplesRunAsWritten: in every command's Example, a flag is part of
// the command, never inside its trailing comment (`goray dashboard --help`
// once showed "# the sample in cmd/goray of a clone --demo 3s", so a copied
// line lost --demo), and every line names a subcommand of its own.
func TestExamplesRunAsWritten(t *testing.T) {
	var walk func(*cobra.Command)
	checked := 0
	walk = func(c *cobra.Command) {
		for line := range strings.SplitSeq(c.Example, "\n") {
			if strings.TrimSpace(line) == "" {
				continue
			}
			checked++
			cmd, comment, _ := strings.Cut(line, "#")
			if strings.Contains(comment, " --") || strings.HasPrefix(strings.TrimSpace(comment), "-") {
				t.Errorf("%s: example %q has a flag in its comment: put it before the #", c.CommandPath(), line)
			}
			if !strings.Contains(cmd, c.CommandPath()) {
				t.Errorf("%s: example %q does not run %q", c.CommandPath(), line, c.CommandPath())
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRoot())
	if checked < 3 {
		t.Fatalf("checked %d example lines; the commands have more", checked)
	}
}
