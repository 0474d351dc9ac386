package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
)

// The exit codes of goray.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// usageError is a command line the command cannot run: it exits 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// run runs goray with args and returns its exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRoot()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	fmt.Fprintf(stderr, "goray: %v\n", err)
	var ue usageError
	if errors.As(err, &ue) || strings.HasPrefix(err.Error(), "unknown command") {
		fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
		return exitUsage
	}
	return exitError
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "goray",
		Short: "Look at a goray cluster's TPU slices from a terminal or a browser",
		Long: `goray shows the TPU slices of a goray cluster: which are whole, free or
reserved, and by whom, drawn as chip grids in the terminal (goray slices)
or in a browser (goray dashboard), and checks TPU slice shapes (goray
validate).

Exit codes: 0 on success, 1 when the command failed, 2 on a usage error.`,
		SilenceErrors: true,
		SilenceUsage:  true,
		Args:          noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cmd.SetOut(cmd.ErrOrStderr())
			cmd.Help()
			return usagef("missing command")
		},
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(newSlices(), newValidate(), newDashboard(), newStatus())
	return root
}

// noArgs rejects positional arguments as a usage error.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("unknown command %q for %q", args[0], cmd.CommandPath())
	}
	return nil
}

// exactArgs wants n positional arguments, named by names.
func exactArgs(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != len(names) {
			return usagef("%s wants %d arguments, %s; got %d", cmd.CommandPath(), len(names), strings.Join(names, " and "), len(args))
		}
		return nil
	}
}
