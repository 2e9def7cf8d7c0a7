# Lanefleet — a Go worker fleet on NATS JetStream that runs LLM agent turns.
GO ?= go
PKGS := ./...

.PHONY: help build demo demo-http test test-short lint bench takeover-bench bench-cluster bench-listing bench-sessions soak fuzz tidy chaos chaos-subagents chaos-schedule rate-soak coldbuild coldbuild-attr

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

build: ## build the worker, publisher and gateway into bin/
	$(GO) build -buildvcs=auto -o bin/worker ./cmd/worker
	$(GO) build -buildvcs=auto -o bin/publisher ./cmd/publisher
	$(GO) build -buildvcs=auto -o bin/gateway ./cmd/gateway

demo: build ## embedded NATS + a worker + one message and its streamed reply
	./scripts/demo.sh

demo-http: build ## a worker with the scripted models and its HTTP gateway on http://127.0.0.1:8080 (loopback only, no token)
	./bin/worker --scripted --model scripted/echo --http 127.0.0.1:8080

test: ## gofmt and vet, then every test with the race detector
	@test -z "$$(gofmt -l .)" || (echo "gofmt needed:"; gofmt -l .; exit 1)
	$(GO) vet $(PKGS)
	$(GO) test -race -count=1 -timeout 30m $(PKGS)

chaos: ## fault soak: nats-server and worker processes, random faults (LANEFLEET_CHAOS=5m)
	LANEFLEET_CHAOS=$${LANEFLEET_CHAOS:-5m} $(GO) test -count=1 -timeout 2h -run TestChaosSoak -v ./integration

chaos-subagents: ## sub-agents under worker kills: parents × 3 children (LANEFLEET_SUBAGENT_CHAOS=50 parents)
	LANEFLEET_SUBAGENT_CHAOS=$${LANEFLEET_SUBAGENT_CHAOS:-50} $(GO) test -count=1 -timeout 30m -run TestSubagentsChaos -v ./integration

chaos-schedule: ## the issue's schedule measurements: @every 2s for 60 s across a worker SIGKILL, a SIGTERM restart and a stream-leader kill (3 nodes), and catch-up with the fleet stopped 30 s
	LANEFLEET_SCHED_SCENARIO=1 $(GO) test -count=1 -timeout 20m -run 'TestScheduleFaultScenario|TestScheduleCatchUpScenario' -v ./integration

rate-soak: ## provider rate limits: three workers against a mock that answers 429 above N requests a minute, offered 3× that, without --rate-limit (its 429s) then with it for the run (zero 429s, no 60 s span over N, every turn ends) (LANEFLEET_RATE_SOAK=10m, LANEFLEET_RATE_SOAK_RPM=120)
	LANEFLEET_RATE_SOAK=$${LANEFLEET_RATE_SOAK:-10m} LANEFLEET_RATE_SOAK_RPM=$${LANEFLEET_RATE_SOAK_RPM:-120} $(GO) test -count=1 -timeout 2h -run TestRateLimitSoak -v ./integration

test-short: ## quick tests without the fleet integration suite
	$(GO) test -short -count=1 $(PKGS)

lint: ## gofmt, vet, staticcheck and deadcode -test (tools pinned in go.mod; see .ci/lint)
	@test -z "$$(gofmt -l .)" || (gofmt -l . && exit 1)
	$(GO) vet $(PKGS)
	GO=$(GO) ./.ci/lint

bench: build ## fleet benchmark against an embedded server, real turns against a local model over HTTP (256 sessions with a 1 s model sending independently, and 1,000 with a 5 s model), fair lanes (256 sessions, 64 slots, 1 s model; before/after), the HTTP gateway against the Go client (distinct sessions, 64 in flight, 64 paced; the clients and the mock model in child processes of their own, CPU per turn of fleet + clients), worker takeover after SIGKILLs, a 3-node R3 cluster next to one R1 node (1-3 worker processes), then Go benchmarks
	$(GO) run ./internal/cmd/lanebench
	$(GO) run ./internal/cmd/lanebench -scenario turns
	$(GO) run ./internal/cmd/lanebench -scenario turns -turns-only interleaved -turns-seq 1000 -turns-delays 0 -turns-sync default
	$(GO) run ./internal/cmd/lanebench -scenario turns -turns-only interleaved -turns-seq 1000 -turns-delays 0 -turns-sync default -turns-api openai-responses
	$(GO) run ./internal/cmd/lanebench -scenario turns -turns-only interleaved -turns-seq 1000 -turns-delays 0 -turns-sync default -turns-api anthropic-messages
	$(GO) run ./internal/cmd/lanebench -scenario turns -turns-only interleaved -turns-seq 1000 -turns-delays 0 -turns-sync default -turns-api google-generative-ai
	$(GO) run ./internal/cmd/lanebench -scenario turns -turns-only conc256 -turns-delays 1s -turns-stagger
	$(GO) run ./internal/cmd/lanebench -scenario turns -turns-only conc1000 -turns-delays 5s -turns-sync always
	$(GO) run ./internal/cmd/lanebench -scenario turns -turns-only conc1000 -turns-delays 5s -turns-sync always -turns-stagger
	$(GO) run ./internal/cmd/lanebench -scenario fair -fair-duration 15s
	$(GO) run ./internal/cmd/lanebench -scenario gateway
	$(GO) run ./internal/cmd/lanebench -scenario takeover
	$(GO) run ./internal/cmd/lanebench -scenario listing -sync default
	$(GO) run ./internal/cmd/lanebench -scenario cluster
	$(GO) test -count=1 -run '^TestIdleStreams$$' -v ./gateway -args -gateway.streams=10000 | grep -E 'idle streams|heap per stream|^(ok|FAIL|---)'
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

takeover-bench: ## 100 SIGKILLs of worker processes mid-turn: death → resumed turn start p50/p99, repeated side effects and lost messages (both must be 0), next to the AckWait baseline
	$(GO) run ./internal/cmd/lanebench -scenario takeover

bench-listing: ## the sessions listing at 1,000,000 sessions through the session index (build time, store and heap; first and later pages through the admin code, the admin service and the gateway, p50/p99 of 50), next to the listing without an index at 100,000, interleaved
	$(GO) run ./internal/cmd/lanebench -scenario listing -sync default

bench-cluster: ## a 3-node cluster of nats-server processes (R3) next to one node (R1), each with 1, 2 and 3 worker processes, an instant and a 1 s model: turns/s, latency above the model, CPU per turn of every process, and what a turn asks of the servers (LANEFLEET_CLUSTER_DURATION=15s a run)
	$(GO) run ./internal/cmd/lanebench -scenario cluster -cluster-duration $${LANEFLEET_CLUSTER_DURATION:-15s}

bench-sessions: ## many sessions × 2 turns through one worker: memory, store and times per session (LANEFLEET_SESSIONS=100000)
	$(GO) run ./internal/cmd/lanebench -scenario sessions -sessions $${LANEFLEET_SESSIONS:-100000}

soak: ## a long-running worker: 64 sessions of 50 turns back to back through one worker (instant model, sync default), warmed up 2 min and until its transcript and context caches are full, then RSS, heap and turns/s after each of five 30 s rounds, and RSS after 45 s idle; first as configured by default (sessions kept forever: the server's index of them grows with every turn), then with retention that holds within the soak (--session-ttl 1m, --event-max-age 1m) (~14 min)
	$(GO) run ./internal/cmd/lanebench -scenario soak -sync default -soak-session-turns 50 -soak-warmup 2m -soak-idle 45s
	$(GO) run ./internal/cmd/lanebench -scenario soak -sync default -soak-session-turns 50 -soak-warmup 2m -soak-idle 45s -soak-session-ttl 1m -soak-event-max-age 1m

coldbuild: ## cold-build CPU of the tree (go build ./...) against its floor (nats-server, jetstream, msgpack, zerolog only), each with an empty GOCACHE, in one run (REV=HEAD; issue 29's target: 1.5x)
	GO=$(GO) ./scripts/coldbuild.sh $${REV:-HEAD}

coldbuild-attr: ## where the tree's cold-build CPU goes: one cold build timed per compile and link, summed by floor, required SDKs, own packages, links and each other module (REV=HEAD)
	ATTR=1 GO=$(GO) ./scripts/coldbuild.sh $${REV:-HEAD}

fuzz: ## run each fuzz target briefly
	./scripts/fuzz.sh 20s
