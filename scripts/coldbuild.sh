#!/usr/bin/env bash
# coldbuild.sh [REV]: the cold-build cost of the tree against its floor, in
# one run. The floor is a throwaway program importing only the design's
# own dependencies (the embedded nats-server, jetstream, msgpack, zerolog);
# the tree is `go build ./...`. Each build gets an empty GOCACHE of its own
# (the module cache stays warm: downloads are not the cost); CPU is user +
# system of the go command and everything it ran. REV (default HEAD) is
# built from a clean export of that commit, so an edit in progress is not
# measured. Prints one line per build and the ratio tree/floor.
set -euo pipefail
rev=${1:-HEAD}
GO=${GO:-go}
root=$(git rev-parse --show-toplevel)
work=$(mktemp -d /tmp/coldbuild.XXXXXX)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
src=$work/src
mkdir -p "$src"
git -C "$root" archive "$rev" | tar -x -C "$src"
mkdir -p "$src/internal/coldfloor"
cat >"$src/internal/coldfloor/main.go" <<'GO'
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
mkdir -p "$src/internal/coldsdk"
cat >"$src/internal/coldsdk/main.go" <<'GO'
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
echo "coldbuild: $(git -C "$root" rev-parse --short "$rev") $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg), $($GO version | cut -d' ' -f3)" >&2
floor=$(cpu floor -o /dev/null ./internal/coldfloor)
sdk=$(cpu floor+sdks -o /dev/null ./internal/coldsdk)
tree=$(cpu tree ./...)
awk -v f="$floor" -v s="$sdk" -v t="$tree" 'BEGIN{printf "ratio tree/floor: %.2f (tree %.1f s / floor %.1f s CPU); tree/(floor with the required SDKs): %.2f (%.1f s)\n", t/f, t, f, t/s, s}'
