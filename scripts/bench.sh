#!/usr/bin/env bash
# Runs goray's benchmarks the way docs/benchmarks.md reports them: every
# benchmark 6 times, summarised by benchstat (median and spread).
#
#   scripts/bench.sh [regexp] [package...]
#
# Defaults: all benchmarks of ./ray. Raw output goes to bench.out.
set -euo pipefail
cd "$(dirname "$0")/.."
pattern=${1:-.}
shift || true
pkgs=${*:-./ray}
BENCHSTAT=$(go env GOPATH)/bin/benchstat
if [ ! -x "$BENCHSTAT" ]; then
  go install golang.org/x/perf/cmd/benchstat@latest
fi
go test -run '^$' -bench "$pattern" -benchmem -count 6 $pkgs | tee bench.out
"$BENCHSTAT" bench.out
