#!/usr/bin/env bash
# make fuzz: run every fuzz target of the module for a while each.
# usage: scripts/fuzz.sh [duration per target, default 20s] [packages, default ./...]
#
# Each package's tests are built once for fuzzing, and each target runs under
# a memory limit: a decoder that allocates what a hostile header declares
# fails the run (the fuzzer saves the input under testdata/fuzz/) instead of
# taking the machine down.
#   FUZZ_MEM       data memory per fuzzing process, MiB; default 1024. It is
#                  RLIMIT_DATA (ulimit -d: the heap and other private writable
#                  memory, not the fuzzer's shared input buffers, which an
#                  address-space limit would count), and the Go heap is asked
#                  to stay under half of it (GOMEMLIMIT).
#   FUZZ_PARALLEL  fuzzing processes per target; default: one per CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
time=${1:-20s}
shift || true
pkgs=("${@:-./...}")
mem=${FUZZ_MEM:-1024}
par=()
if [ -n "${FUZZ_PARALLEL:-}" ]; then
	par=(-test.parallel "$FUZZ_PARALLEL")
fi
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
cache="$(go env GOCACHE)/fuzz" # where go test -fuzz keeps its corpus too
for pkg in $(go list "${pkgs[@]}"); do
	dir=$(go list -f '{{.Dir}}' "$pkg")
	targets=$(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u || true)
	if [ -z "$targets" ]; then
		continue
	fi
	test="$bin/fuzz.test"
	go test -c -fuzz . -o "$test" "$pkg"
	for target in $targets; do
		echo "== $pkg $target ($time, ${mem} MiB)"
		(
			cd "$dir"
			ulimit -d $((mem * 1024))
			GOMEMLIMIT="$((mem / 2))MiB" "$test" -test.run '^$' -test.fuzz "^${target}\$" -test.fuzztime "$time" \
				-test.fuzzcachedir "$cache/$pkg" "${par[@]}"
		)
	done
done
