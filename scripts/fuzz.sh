#!/usr/bin/env bash
# make fuzz: run every fuzz target of the module for a while each.
# usage: scripts/fuzz.sh [duration per target, default 20s]
set -euo pipefail
cd "$(dirname "$0")/.."
time=${1:-20s}
for pkg in $(go list ./...); do
	dir=$(go list -f '{{.Dir}}' "$pkg")
	for target in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u); do
		echo "== $pkg $target ($time)"
		go test -run '^$' -fuzz "^${target}\$" -fuzztime "$time" "$pkg"
	done
done
