#!/usr/bin/env bash
# Runs every native Go fuzz target briefly (default 10s each). Found crashers
# are written to the package's testdata/fuzz and fail the run.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime="${1:-10s}"
status=0
for pkg in $(go list ./...); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  targets=$(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u || true)
  for t in $targets; do
    echo "fuzz: $pkg $t ($fuzztime)"
    if ! go test -run '^$' -fuzz "^${t}\$" -fuzztime "$fuzztime" "$pkg"; then
      status=1
    fi
  done
done
exit $status
