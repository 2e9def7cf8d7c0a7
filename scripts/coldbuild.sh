#!/usr/bin/env bash
# coldbuild.sh [REV]: the cold-build cost of the tree against its floor, in
# one run. The floor is a throwaway program importing only the design's
# own dependencies (the embedded nats-server, jetstream, msgpack, zerolog);
# the tree is `go build ./...`. Each build gets an empty GOCACHE of its own
# (the module cache stays warm: downloads are not the cost); CPU is user +
# system of the go command and everything it ran. REV (default HEAD) is
# built from a clean export of that commit, so an edit in progress is not
# measured. Prints one line per build and the ratio tree/floor.
#
# ATTR=1 instead builds the tree once, cold, with every compile, assemble
# and link timed through -toolexec, and prints where its CPU goes: the
# packages the floor builds too, those the required SDKs add, the tree's
# own packages, the links, and each other module (and the standard
# library's packages beyond the floors) on a line of its own. The timing
# wrapper adds CPU of its own, so these figures are shares, not the
# measure; the go command's own CPU is not split.
set -euo pipefail
rev=${1:-HEAD}
GO=${GO:-go}
root=$(git rev-parse --show-toplevel)
work=$(mktemp -d /tmp/coldbuild.XXXXXX)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
src=$work/src
mkdir -p "$src"
git -C "$root" archive "$rev" | tar -x -C "$src"
# The floor programs live in directories whose names start with "_": the
# go command builds them when named but leaves them out of ./..., so the
# tree's build is the tree's alone (in internal/, `go build ./...` also
# compiled and linked both of them, the SDK one with all of the SDKs).
mkdir -p "$src/_coldfloor"
cat >"$src/_coldfloor/main.go" <<'GO'
// Command coldfloor is the cold build's floor: the design's own
// dependencies and nothing else.
package main

import (
	_ "github.com/nats-io/nats-server/v2/server"
	_ "github.com/nats-io/nats.go/jetstream"
	_ "github.com/rs/zerolog"
	_ "github.com/vmihailenco/msgpack/v5"
)

func main() {}
GO
# The floor with the SDKs other issues require (the official AWS SDK for
# Bedrock, the MCP SDK, golang.org/x/oauth2 for Vertex): what the tree
# cannot drop.
mkdir -p "$src/_coldsdk"
cat >"$src/_coldsdk/main.go" <<'GO'
// Command coldsdk is the cold build's floor with the required SDKs.
package main

import (
	_ "github.com/aws/aws-sdk-go-v2/config"
	_ "github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	_ "github.com/modelcontextprotocol/go-sdk/mcp"
	_ "github.com/nats-io/nats-server/v2/server"
	_ "github.com/nats-io/nats.go/jetstream"
	_ "github.com/rs/zerolog"
	_ "github.com/vmihailenco/msgpack/v5"
	_ "golang.org/x/oauth2/google"
)

func main() {}
GO
cpu() { # cpu NAME PKG...: one cold build, prints user+sys seconds
	local name=$1; shift
	local cache=$work/cache-$name times=$work/time-$name
	mkdir -p "$cache"
	(cd "$src" && GOCACHE=$cache /usr/bin/time -f '%U %S %e' -o "$times" "$GO" build "$@" 2>"$work/err-$name") ||
		{ cat "$work/err-$name" >&2; exit 1; }
	awk -v n="$name" '{printf "%s: cpu %.1f s (user %.1f, sys %.1f), wall %.1f s\n", n, $1+$2, $1, $2, $3}' "$times" >&2
	awk '{print $1+$2}' "$times"
}
attribute() { # one cold, timed build of the tree; CPU by package group
	local cache=$work/cache-attr log=$work/tools.log
	mkdir -p "$cache"
	cat >"$work/toolexec" <<'SH'
#!/usr/bin/env bash
# toolexec wrapper: runs the tool, appending "tool package user sys".
pkg=- prev=
for a in "$@"; do [ "$prev" = -p ] && pkg=$a; prev=$a; done
exec /usr/bin/time -a -o "$COLDBUILD_LOG" -f "${1##*/} $pkg %U %S" "$@"
SH
	chmod +x "$work/toolexec"
	(cd "$src" && COLDBUILD_LOG=$log GOCACHE=$cache "$GO" build -toolexec "$work/toolexec" ./...) ||
		exit 1
	(cd "$src" && "$GO" list -deps ./_coldfloor) >"$work/floor.deps"
	(cd "$src" && "$GO" list -deps ./_coldsdk) >"$work/sdk.deps"
	(cd "$src" && "$GO" list -deps -f '{{.ImportPath}} {{with .Module}}{{.Path}}{{else}}std{{end}}' ./...) >"$work/tree.mods"
	local own
	own=$(cd "$src" && "$GO" list -m)
	awk -v own="$own" '
		FILENAME ~ /floor.deps$/ { floor[$1] = 1; next }
		FILENAME ~ /sdk.deps$/ { sdk[$1] = 1; next }
		FILENAME ~ /tree.mods$/ { mod[$1] = $2; next }
		{
			cpu = $3 + $4; total += cpu
			if ($1 == "link") { g = "links of the main packages" }
			else if ($2 == "-") { g = "other tool runs (cgo, gcc, version queries)" }
			else if ($2 in floor) { g = "packages the floor builds too" }
			else if ($2 in sdk) { g = "packages the required SDKs add" }
			else if (mod[$2] == own || $2 == "main") { g = "the tree'"'"'s own packages"; owned++ }
			else if (mod[$2] == "std" || mod[$2] == "") { g = "standard library beyond the floors" }
			else { g = mod[$2] }
			sum[g] += cpu; n[g]++
		}
		END {
			for (g in sum) printf "%7.1f s  %4d runs  %s\n", sum[g], n[g], g
			printf "%7.1f s  total tool CPU (%d own packages)\n", total, owned
		}' "$work/floor.deps" "$work/sdk.deps" "$work/tree.mods" "$log" | sort -rn
}
if [ "${ATTR:-}" = 1 ]; then
	echo "coldbuild attribution: $(git -C "$root" rev-parse --short "$rev") $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
	attribute
	exit 0
fi
echo "coldbuild: $(git -C "$root" rev-parse --short "$rev") $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg), $($GO version | cut -d' ' -f3)" >&2
floor=$(cpu floor -o /dev/null ./_coldfloor)
sdk=$(cpu floor+sdks -o /dev/null ./_coldsdk)
tree=$(cpu tree ./...)
awk -v f="$floor" -v s="$sdk" -v t="$tree" 'BEGIN{printf "ratio tree/floor: %.2f (tree %.1f s / floor %.1f s CPU); tree/(floor with the required SDKs): %.2f (%.1f s)\n", t/f, t, f, t/s, s}'
