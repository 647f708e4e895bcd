# leasehold: make help lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help
GO ?= go
SEED ?= 1
SEEDS ?= 1
SCENARIO ?= portfolio
RAPID_CHECKS ?= 100

.PHONY: help
help: ## List the targets
	@grep -hE '^[a-z][a-z-]*:.*## ' $(MAKEFILE_LIST) | awk -F ':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

# test ends with the concurrent parts under the race detector: the worker
# and its live runner, the fault injectors, the HTTP server, and the claim
# races. Each phase prints its command, then how long it took; without
# LEASEHOLD_TEST_POSTGRES the PostgreSQL suites skip, and the last line
# says so and names the command that runs them.
.PHONY: test
test: ## Run the whole test suite (what CI runs; the PostgreSQL suites need LEASEHOLD_TEST_POSTGRES, or make test-postgres)
	@set -e; total=$$SECONDS; \
	phase() { local name=$$1 start=$$SECONDS code=0; shift; printf '%q ' "$$@"; echo; "$$@" || code=$$?; \
	  echo "make test: $$name: $$((SECONDS - start))s$$([ $$code = 0 ] || echo ", exit $$code")"; return $$code; }; \
	phase vet $(GO) vet ./...; \
	phase "vet (broken variants)" $(GO) vet -tags leasehold_broken ./...; \
	phase tests $(GO) test -count=1 -timeout 15m ./...; \
	phase "broken variants (sim)" $(GO) test -count=1 -timeout 10m -tags leasehold_broken -run 'Broken|Shrink|NoVariant' ./sim; \
	phase "broken variants (cli)" $(GO) test -count=1 -timeout 5m -tags leasehold_broken -run 'ChaosBroken|SimBroken' ./cmd/leasehold/internal/cli; \
	phase fuzz $(GO) test -run '^$$' -fuzz '^FuzzHandlers$$' -fuzztime 15s ./httpapi; \
	phase "race (worker, faults)" $(GO) test -count=1 -race -timeout 10m ./worker ./faults/...; \
	phase "race (server, queue)" $(GO) test -count=1 -race -timeout 10m -run 'TestServe|TestTwoProcess|TestConcurrent' ./httpapi ./queue; \
	echo "make test: passed in $$((SECONDS - total))s"; \
	if [ -z "$$LEASEHOLD_TEST_POSTGRES" ]; then \
	  echo "make test: the PostgreSQL suites were skipped (LEASEHOLD_TEST_POSTGRES is not set): make test-postgres runs them"; \
	fi

# The PostgreSQL suites run inside make test whenever LEASEHOLD_TEST_POSTGRES
# names a server (.ci/run sets it); test-postgres finds or starts one with
# .ci/postgres and runs them alone.
.PHONY: test-postgres
test-postgres: ## Run the PostgreSQL store's suites, starting a test server if none answers
	url="$$(.ci/postgres)" && LEASEHOLD_TEST_POSTGRES="$$url" $(GO) test -count=1 -timeout 5m ./internal/pgtest && \
	  LEASEHOLD_TEST_POSTGRES="$$url" $(GO) test -count=1 -timeout 5m -run 'Postgres|Pg|TestTranscripts' ./queue/... ./worker ./cmd/leasehold/internal/cli ./cmd/leasehold/internal/liverun ./sim ./faults/...

.PHONY: rapid
rapid: ## Run the property tests with RAPID_CHECKS=N checks (default 100)
	RAPID_CHECKS=$(RAPID_CHECKS) $(GO) test -count=1 -timeout 60m -run 'Rapid' ./...

COMMIT := $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
BUILT := $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
# CLIPKG is the package whose commit and built variables the build stamps.
CLIPKG := github.com/leasehold/leasehold/cmd/leasehold/internal/cli

.PHONY: build
build: ## Build bin/leasehold with its version stamped
	$(GO) build -ldflags "-X $(CLIPKG).commit=$(COMMIT) -X $(CLIPKG).built=$(BUILT)" -o bin/leasehold ./cmd/leasehold

# STORE=postgres runs the demo on PostgreSQL: .ci/postgres finds a server
# (or installs and starts one) and prints its URL; the demo makes a fresh
# database (leasehold_demo) on it, and the workers connect over TCP.
.PHONY: demo
demo: build ## The live portfolio run: two real worker processes, signals, the wall clock (out/demo): make demo [STORE=sqlite|postgres]
	@case "$(STORE)" in ""|sqlite|postgres) ;; *) echo "make demo: STORE must be sqlite or postgres, not $(STORE)" >&2; exit 2;; esac
	bin/leasehold demo$(if $(filter postgres,$(STORE)), --postgres "$$(.ci/postgres)")

.PHONY: sim
sim: build ## Reproduce one seed or sweep many, with the coverage map: make sim SEED=n [SCENARIO=name|all] [SEEDS=count] [REPORT=dir] [STORE=postgres (the database: LEASEHOLD_DB)]
	bin/leasehold sim --seed $(SEED) --scenario $(SCENARIO) --seeds $(SEEDS) --coverage$(if $(REPORT), --report $(REPORT))$(if $(STORE), --store $(STORE))

.PHONY: evidence
evidence: build ## Simulated and live results into one report (out/evidence/index.html, .md, .json)
	$(GO) build -tags leasehold_broken -o bin/leasehold-broken ./cmd/leasehold
	bin/leasehold demo
	bin/leasehold chaos
	mkdir -p out/evidence
	$(GO) test -count=1 -run TestRunbook -json ./cmd/leasehold/internal/cli > out/evidence/runbook-test.json
	bin/leasehold evidence --runbook out/evidence/runbook-test.json

# chaos takes SEED only when it is given on the command line; otherwise the
# run draws a seed and prints it.
.PHONY: chaos
chaos: build ## The kill storm, live, with its Jepsen-style checker: make chaos [SEED=n] (out/chaos)
	bin/leasehold chaos$(if $(filter command line,$(origin SEED)), --seed $(SEED))

.PHONY: rehearse
rehearse: ## Release rehearsal: verify the artifact, snapshot, migrate a copy, run it, sweep; a gate checklist
	scripts/rehearse.sh

.PHONY: bench
bench: ## Run the benchmarks and print their ratios
	$(GO) test -run '^$$' -bench . -benchtime 1x -count 1 -timeout 30m ./...

.PHONY: bench-peers
bench-peers: ## leasehold beside River and goqite, same machine, same run (bench/peers, its own module); PEERS_FLAGS=...
	cd bench/peers && $(GO) run . $(PEERS_FLAGS)
	$(GO) test -run '^$$' -bench 'ClaimCompleteParts' -benchtime 1x -count 1 -timeout 30m ./queue

.PHONY: lint
lint: ## Check formatting and vet
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt would change the files above"; exit 1; }
	$(GO) vet ./...
