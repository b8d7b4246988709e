#!/usr/bin/env bash
# Runs every native Go fuzz target briefly. A crasher is written to the
# package's testdata/fuzz and fails the run.
#
# The budget is a count of executions (default 30000x, ~1-10s a target here),
# not a duration: with a duration, Go 1.26's fuzz coordinator can end a clean
# run with a bare "context deadline exceeded" (golang/go#75804, fixed in Go
# 1.27). A count never takes that path. The test timeout is raised from
# go test's 10 minutes: a target with many patterns to build per input
# (FuzzReaderManySecrets) takes 3-4 minutes for its count on a busy machine.
set -euo pipefail
cd "$(dirname "$0")/.."
budget="${1:-30000x}"
status=0
for pkg in $(go list ./...); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  targets=$(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u || true)
  for t in $targets; do
    echo "fuzz: $pkg $t ($budget)"
    if ! go test -run '^$' -fuzz "^${t}\$" -fuzztime "$budget" -timeout 30m "$pkg"; then
      status=1
    fi
  done
done
exit $status
