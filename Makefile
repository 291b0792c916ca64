# lockwarden: `make help` lists the targets. Tools are pinned in hack/tools and built into ./bin
# from the Go module proxy; nothing is downloaded prebuilt.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

BIN        := $(CURDIR)/bin
TOOLS_DIR  := $(CURDIR)/hack/tools
TOOLS_MOD  := $(TOOLS_DIR)/go.mod $(TOOLS_DIR)/go.sum
K8S_VERSION_LDFLAGS := -X k8s.io/component-base/version.gitVersion=v1.37.2 \
	-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37

ETCD           := $(BIN)/etcd
ETCDUTL        := $(BIN)/etcdutl
KUBE_APISERVER := $(BIN)/kube-apiserver
KUBECTL        := $(BIN)/kubectl
CONTROLLER_GEN := $(BIN)/controller-gen
GOLANGCI_LINT  := $(BIN)/golangci-lint
HELM           := $(BIN)/helm
HELM_MOD       := $(TOOLS_DIR)/helm/go.mod $(TOOLS_DIR)/helm/go.sum

# The manager's image. A bare name (lockwarden:dev) would resolve to docker.io/library/lockwarden,
# someone else's image: `localhost/` names a local build that is never pulled from a registry.
# config/manager/manager.yaml and the chart's values name the same (make verify checks it).
IMG        ?= localhost/lockwarden:dev
# The manager's `--version`: set by `make build` and `make image`; a plain go build says "dev".
VERSION    ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
VERSION_LDFLAGS := -X main.version=$(VERSION)
ARGS       ?=
GO_TEST    ?= go test -race -count=1 -timeout 30m
# envtest finds kube-apiserver and etcd here (internal/testenv also looks in ./bin itself).
export KUBEBUILDER_ASSETS := $(BIN)

##@ General

.PHONY: help
help: ## List the targets.
	@if [ -t 1 ]; then on='\033[36m'; off='\033[0m'; else on=; off=; fi; \
	awk -v on="$$on" -v off="$$off" 'BEGIN {FS = ":.*##"} /^[a-zA-Z0-9_.-]+:.*##/ {printf "  %s%-16s%s %s\n", on, $$1, off, $$2} /^##@/ {printf "\n%s\n", substr($$0, 5)}' $(MAKEFILE_LIST)

##@ Development

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate deepcopy code for the API types.
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./api/...

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Generate the CRD and RBAC manifests from the API and controller markers.
	$(CONTROLLER_GEN) crd rbac:roleName=lockwarden-manager paths=./api/... paths=./controllers/... \
		output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac
	go run ./hack/crddoc config/crd/bases/*.yaml

.PHONY: fmt
fmt: ## Format the Go code.
	gofmt -w $$(git ls-files '*.go' | grep -v '^hack/tools/')

.PHONY: vet
vet: ## Run go vet.
	go vet ./...

.PHONY: lint
lint: $(GOLANGCI_LINT) ## Run golangci-lint with .golangci.yml.
	$(GOLANGCI_LINT) run ./...

.PHONY: verify
verify: $(CONTROLLER_GEN) $(GOLANGCI_LINT) $(HELM) ## Fail on stale generated files, gofmt, vet, lint, untidy modules, a broken package boundary, a chart that renders other objects than config/, or manifests that name another image than make image builds.
	hack/verify-generated.sh "$(MAKE)"
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '^hack/tools/')); \
		if [ -n "$$out" ]; then echo "gofmt needed (run make fmt):"; echo "$$out"; exit 1; fi
	go vet ./...
	go vet -tags e2e ./test/e2e/...
	$(GOLANGCI_LINT) run ./...
	$(GOLANGCI_LINT) run --build-tags e2e ./test/e2e/...
	go mod tidy -diff || { echo "go.mod/go.sum are not tidy: run go mod tidy"; exit 1; }
	cd $(TOOLS_DIR) && { go mod tidy -diff || { echo "hack/tools is not tidy: run go mod tidy there"; exit 1; }; }
	hack/check-boundaries.sh
	go test -count=1 -run '^TestHelmChart' ./cmd/lockwarden/
	@grep -q '^ *image: $(IMG)$$' config/manager/manager.yaml || { echo "config/manager/manager.yaml does not name the image make image builds ($(IMG))"; exit 1; }

.PHONY: test
test: envtest-bins build $(HELM) ## Run every test with -race: unit, engine (real etcd), envtest (real kube-apiserver), manager processes; as root also e2e on a real node.
	$(GO_TEST) ./...
	$(GO_TEST) -tags chaos -run Failpoint ./controllers/
	go test -count=1 -run NoRace ./pkg/leadership/ # schedules that trip controller-runtime's own data race under -race
	@if [ "$$(id -u)" = 0 ]; then $(MAKE) --no-print-directory e2e; \
	else echo "e2e SKIPPED, NOT counted as passed: it needs root (a real kubelet); run make e2e as root"; fi

##@ Build

.PHONY: build
build: run-bins ## Build the manager (./bin/lockwarden), the example workload, lockwarden-agent, the playground and kubectl-dlock.

.PHONY: run run-bins
run: envtest-bins run-bins ## Start the local playground: control plane, manager, workers, a live failover, kubectl-dlock in ./bin. ARGS=--demo-and-exit runs once and exits.
	$(BIN)/playground $(ARGS)
run-bins: ## Build what the playground runs and its hints use: the manager, the fenced-worker, lockwarden-agent, kubectl-dlock, the playground.
	CGO_ENABLED=0 go build -ldflags "$(VERSION_LDFLAGS)" -o $(BIN)/lockwarden ./cmd/lockwarden
	go build -o $(BIN)/fenced-worker ./examples/fenced-worker
	CGO_ENABLED=0 go build -o $(BIN)/lockwarden-agent ./cmd/lockwarden-agent
	go build -o $(BIN)/kubectl-dlock ./cmd/kubectl-dlock
	go build -o $(BIN)/playground ./cmd/playground

.PHONY: bench
bench: build ## Run every benchmark (17 minutes here, under 30): bench-lease, then lockwarden vs client-go; regenerates docs/benchmarks.md and docs/img/.
	mkdir -p $(BIN)/bench
	$(MAKE) -s --no-print-directory bench-lease | tee $(BIN)/bench/lease.md
	go run ./test/bench/compare -out docs/benchmarks.md -img docs/img -engine-report $(BIN)/bench/lease.md -logs $(BIN)/bench/logs -pprof $(BIN)/bench/pprof

.PHONY: bench-quick
bench-quick: build ## Smaller benchmark counts (under 5 minutes, without bench-lease); writes bin/bench-quick/, never docs/.
	go run ./test/bench/compare -quick -out $(BIN)/bench-quick/benchmarks.md -img $(BIN)/bench-quick/img

.PHONY: bench-lease
bench-lease: ## pkg/lease vs etcd's concurrency.Mutex on one embedded etcd with fsync on.
	go run ./test/bench/lease

.PHONY: bench-release
bench-release: envtest-bins ## Planned handoff: lockwarden's holder-confirmed release vs client-go's ReleaseOnCancel on one API server, one run (about 2 minutes).
	go test -count=1 -run '^$$' -bench PlannedHandoff -benchtime 20x ./controllers/ 2>&1 | grep -v leaderelection.go | tee $(BIN)/bench-release.log

.PHONY: docker-build
docker-build: ## Build the manager image (needs a Docker engine).
	docker build --build-arg VERSION=$(VERSION) -t $(IMG) .

##@ Install (the cluster of the current kubeconfig; docs/install.md)

# DEPLOY_DIR: config/default (one manager, embedded etcd on a PersistentVolumeClaim) or
# config/ha (two replicas, your etcd cluster over TLS), or an overlay of either.
DEPLOY_DIR       ?= config/default
DEPLOY_TIMEOUT   ?= 5m
UNDEPLOY_TIMEOUT ?= 10m
LOCK_CRD         := distributedlocks.lockwarden.io

.PHONY: install uninstall deploy undeploy
install: | $(KUBECTL) ## Install the DistributedLock CRD only (kubectl apply -k config/crd).
	$(KUBECTL) apply -k config/crd

uninstall: | $(KUBECTL) ## Delete the CRD; refuses while any DistributedLock is left (make undeploy first).
	@if $(KUBECTL) get crd $(LOCK_CRD) >/dev/null 2>&1; then \
		n=$$($(KUBECTL) get $(LOCK_CRD) -A -o name | wc -l); \
		if [ "$$n" -gt 0 ]; then \
			echo "uninstall: $$n DistributedLocks are left; deleting the CRD now would leave them stuck on their finalizers."; \
			echo "  with the manager running: make undeploy; with it gone: docs/install.md, Uninstall"; exit 1; \
		fi; \
	fi
	$(KUBECTL) delete -k config/crd --ignore-not-found

deploy: | $(KUBECTL) ## Apply DEPLOY_DIR (default config/default: one manager with embedded etcd; config/ha: two, your etcd), wait for the rollout.
	$(KUBECTL) apply -k $(DEPLOY_DIR)
	$(KUBECTL) -n lockwarden-system rollout status deployment/lockwarden-manager --timeout=$(DEPLOY_TIMEOUT)
	hack/wait-lock-admission.sh $(KUBECTL)

# The order matters: the locks first, while the manager still runs, so that each term ends
# (a held lock waits its lock delay) and the finalizers go; then the manager, RBAC, namespace
# and CRD. Deleting the manager first would leave every lock, its namespace and the CRD stuck.
undeploy: | $(KUBECTL) ## Delete every DistributedLock and wait for their finalizers while the manager runs, then everything of DEPLOY_DIR.
	@if $(KUBECTL) get crd $(LOCK_CRD) >/dev/null 2>&1; then \
		echo "undeploy: deleting every DistributedLock while the manager runs (a held lock waits its lock delay)"; \
		$(KUBECTL) delete $(LOCK_CRD) --all -A --wait --timeout=$(UNDEPLOY_TIMEOUT) || { \
			echo "undeploy: DistributedLocks still wait for their finalizers: is the manager running? docs/install.md, Uninstall"; exit 1; }; \
	fi
	$(KUBECTL) delete -k $(DEPLOY_DIR) --ignore-not-found --wait --timeout=$(UNDEPLOY_TIMEOUT)

##@ Redis engine (pkg/redislock; docs/redis.md)

.PHONY: redis-server test-redis bench-redis chaos-redis
redis-server: ## Install Debian's redis-server when missing (the Redis tests start their own on a free port).
	@command -v redis-server >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server; }
	@redis-server --version >&2

test-redis: redis-server ## Run the Redis engine's tests with -race on a real redis-server (about 20 s).
	$(GO_TEST) ./pkg/redislock/... ./internal/redistest/...

bench-redis: redis-server ## pkg/redislock vs bsm/redislock, redsync, rueidislock on one redis-server (about 2 minutes); prints markdown.
	nice -n 10 go run ./test/bench/redis

chaos-redis: redis-server ## Bounded Redis fault suite (under 2 minutes): client pause, proxy delay/jitter, server kill with and without AOF.
	go test -count=1 -timeout 5m ./test/chaos/redis/...

##@ Tools (built from hack/tools into ./bin)

.PHONY: tools envtest-bins
tools: $(ETCD) $(ETCDUTL) $(KUBE_APISERVER) $(KUBECTL) $(CONTROLLER_GEN) $(GOLANGCI_LINT) $(HELM) ## Build every pinned tool.
envtest-bins: $(ETCD) $(KUBE_APISERVER) $(KUBECTL) ## Build etcd, kube-apiserver and kubectl for envtest (about 9 minutes cold).

$(ETCD): $(TOOLS_MOD)
	cd $(TOOLS_DIR) && go build -o $@ go.etcd.io/etcd/server/v3
$(ETCDUTL): $(TOOLS_MOD)
	cd $(TOOLS_DIR) && go build -o $@ go.etcd.io/etcd/etcdutl/v3
$(KUBE_APISERVER): $(TOOLS_MOD)
	cd $(TOOLS_DIR) && go build -ldflags "$(K8S_VERSION_LDFLAGS)" -o $@ k8s.io/kubernetes/cmd/kube-apiserver
$(KUBECTL): $(TOOLS_MOD)
	cd $(TOOLS_DIR) && go build -ldflags "$(K8S_VERSION_LDFLAGS)" -o $@ k8s.io/kubernetes/cmd/kubectl
$(CONTROLLER_GEN): $(TOOLS_MOD)
	cd $(TOOLS_DIR) && go build -o $@ sigs.k8s.io/controller-tools/cmd/controller-gen
$(GOLANGCI_LINT): $(TOOLS_MOD)
	cd $(TOOLS_DIR) && go build -o $@ github.com/golangci/golangci-lint/v2/cmd/golangci-lint

.PHONY: helm
helm: $(HELM) ## Build the pinned Helm CLI (hack/tools/helm) for the chart render test (about 7 minutes cold).
$(HELM): $(HELM_MOD)
	cd $(TOOLS_DIR)/helm && go build -ldflags "-X helm.sh/helm/v4/internal/version.version=v4.3.2" -o $@ helm.sh/helm/v4/cmd/helm

##@ Fault injection (test/chaos; docs/reliability.md)

SEED     ?= 1
RUNS     ?= 10
DURATION ?= 30m

.PHONY: chaos chaos-long chaos-ci chaos-global
chaos: envtest-bins $(ETCDUTL) ## Run RUNS seeded fault-injection runs of SEED; one line per run, then `violations: <n>`.
	go run ./test/chaos/cmd/chaos -seed $(SEED) -runs $(RUNS)
chaos-long: envtest-bins $(ETCDUTL) ## Run seeded fault-injection runs until DURATION is up, then print totals.
	go run ./test/chaos/cmd/chaos -seed $(SEED) -duration $(DURATION)
chaos-ci: envtest-bins $(ETCDUTL) ## The bounded CI set: checker unit tests, then one seeded run per fault kind (each kind the first fault of one run).
	go test -count=1 ./test/chaos/...
	go run ./test/chaos/cmd/chaos -ci -seed $(SEED)
chaos-global: envtest-bins $(ETCDUTL) ## Global locks (issue 21): RUNS seeded runs of SEED, two clusters on one etcd, one ledger; one line per run with the failover, then `summary:`. Not in chaos-ci (minutes per run).
	go run ./test/chaos/cmd/chaos -global -seed $(SEED) -runs $(RUNS)

##@ Real node (hack/node; docs/e2e.md): needs root and Linux

KUBELET        := $(BIN)/kubelet
KUBE_SCHEDULER := $(BIN)/kube-scheduler
KUBE_CONTROLLER_MANAGER := $(BIN)/kube-controller-manager
IMAGES_DIR     := $(BIN)/images
NODE_DEBS      := containerd runc containernetworking-plugins iptables
E2E_TEST       ?= go test -race -count=1 -timeout 20m -tags e2e

.PHONY: node-bins node-deps node node-demo node-down image e2e bench-node
node-bins: $(KUBELET) $(KUBE_SCHEDULER) $(KUBE_CONTROLLER_MANAGER) ## Build kubelet, kube-scheduler and kube-controller-manager from hack/tools (about 12 minutes cold).

$(KUBELET): $(TOOLS_MOD)
	cd $(TOOLS_DIR) && nice -n 10 go build -ldflags "$(K8S_VERSION_LDFLAGS)" -o $@ k8s.io/kubernetes/cmd/kubelet
$(KUBE_SCHEDULER): $(TOOLS_MOD)
	cd $(TOOLS_DIR) && nice -n 10 go build -ldflags "$(K8S_VERSION_LDFLAGS)" -o $@ k8s.io/kubernetes/cmd/kube-scheduler
$(KUBE_CONTROLLER_MANAGER): $(TOOLS_MOD)
	cd $(TOOLS_DIR) && nice -n 10 go build -ldflags "$(K8S_VERSION_LDFLAGS)" -o $@ k8s.io/kubernetes/cmd/kube-controller-manager

node-deps: ## Install containerd, runc, the CNI plugins and iptables from Debian when missing (root).
	@missing=(); for p in $(NODE_DEBS); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || missing+=($$p); done; \
	if (( $${#missing[@]} )); then \
		[ "$$(id -u)" = 0 ] || { echo "node-deps: installing $${missing[*]} needs root"; exit 1; }; \
		echo "installing: $${missing[*]}"; apt-get update -qq; \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$${missing[@]}"; \
	else echo "node-deps: $(NODE_DEBS) installed"; fi

node: envtest-bins node-bins node-deps image ## Start a real single-node cluster in its own namespaces, wait until Ready, print how to use kubectl (root).
	hack/node/up.sh

node-demo: ## On the running node: 3-member TLS etcd beside it, kubectl apply -k config/e2e, the fenced-worker under a lock (root).
	hack/node/demo.sh

node-down: ## Stop the node by PID; remove its cgroups and the mountpoints it made.
	hack/node/down.sh

image: ## Build the manager, fenced-worker, lockwarden-agent, pause (and the benchmark's leworker, the e2e's stamper and crashee) images as docker-archive tarballs in ./bin/images; import them into a running node.
	mkdir -p $(IMAGES_DIR)
	CGO_ENABLED=0 go build -trimpath -ldflags "-s -w $(VERSION_LDFLAGS)" -o $(IMAGES_DIR)/lockwarden ./cmd/lockwarden
	CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o $(IMAGES_DIR)/fenced-worker ./examples/fenced-worker
	CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o $(IMAGES_DIR)/lockwarden-agent ./cmd/lockwarden-agent
	CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o $(IMAGES_DIR)/pause ./hack/node/pause
	go run ./hack/mkimage -name $(IMG) -out $(IMAGES_DIR)/lockwarden.tar \
		-file $(IMAGES_DIR)/lockwarden:/lockwarden -user 65532:65532 -entrypoint /lockwarden
	go run ./hack/mkimage -name localhost/fenced-worker:dev -out $(IMAGES_DIR)/fenced-worker.tar \
		-file $(IMAGES_DIR)/fenced-worker:/fenced-worker -user 65532:65532 -entrypoint /fenced-worker
	go run ./hack/mkimage -name localhost/lockwarden-agent:dev -out $(IMAGES_DIR)/lockwarden-agent.tar \
		-file $(IMAGES_DIR)/lockwarden-agent:/lockwarden-agent -user 65532:65532 -entrypoint /lockwarden-agent
	go run ./hack/mkimage -name localhost/lockwarden/pause:1 -out $(IMAGES_DIR)/pause.tar \
		-file $(IMAGES_DIR)/pause:/pause -user 65535:65535 -entrypoint /pause
	CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o $(IMAGES_DIR)/leworker ./test/e2e/leworker
	go run ./hack/mkimage -name localhost/leworker:dev -out $(IMAGES_DIR)/leworker.tar \
		-file $(IMAGES_DIR)/leworker:/leworker -user 65532:65532 -entrypoint /leworker
	CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o $(IMAGES_DIR)/stamper ./examples/migrate/controller-runtime/after
	go run ./hack/mkimage -name localhost/stamper:dev -out $(IMAGES_DIR)/stamper.tar \
		-file $(IMAGES_DIR)/stamper:/stamper -user 65532:65532 -entrypoint /stamper
	CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o $(IMAGES_DIR)/crashee ./test/e2e/crashee
	go run ./hack/mkimage -name localhost/crashee:dev -out $(IMAGES_DIR)/crashee.tar \
		-file $(IMAGES_DIR)/crashee:/crashee -user 65532:65532 -entrypoint /crashee
	@if [ "$$(id -u)" = 0 ] && hack/node/ctr version >/dev/null 2>&1; then \
		for i in lockwarden fenced-worker lockwarden-agent pause leworker stamper crashee; do hack/node/ctr images import $(IMAGES_DIR)/$$i.tar; done; fi

BENCH_SAMPLES ?= 20
bench-node: envtest-bins node-bins node-deps image ## Handoffs on real pods, lockwarden vs client-go (defaults and 4/3/1 s): planned with and without release, crash with a restart; BENCH_SAMPLES a row (root; about 35 minutes at 20).
	@[ "$$(id -u)" = 0 ] || { echo "bench-node: needs root (a real kubelet, namespaces, cgroups)"; exit 1; }
	BENCH_SAMPLES=$(BENCH_SAMPLES) go test -count=1 -timeout 120m -tags e2e -run '^$$' -bench HandoffRealPods -benchtime 1x ./test/e2e/ 2>&1 | tee $(BIN)/bench-node.log

e2e: envtest-bins node-bins node-deps image $(HELM) ## Run the end-to-end suite on a real node (root; about 6 minutes): test/e2e.
	@[ "$$(id -u)" = 0 ] || { echo "e2e: needs root (a real kubelet, namespaces, cgroups)"; exit 1; }
	$(E2E_TEST) ./test/e2e/ $(if $(RUN),-run '$(RUN)') -v 2>&1 | tee $(BIN)/e2e.log
