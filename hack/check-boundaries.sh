#!/usr/bin/env bash
# Enforces the package boundaries of DESIGN.md ("Packages and what may import what").
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
mod=github.com/lockwarden/lockwarden
fail=0
violation() { echo "boundary: $*" >&2; fail=1; }

pkgs() { go list "$@" 2>/dev/null || true; }

# pkg/clock, the one monotonic clock of the engines and the pod side: only the standard library
# and golang.org/x/sys/unix, so that every package below may use it within its own boundary.
for p in $(pkgs ./pkg/clock/...); do
	for imp in $(go list -f '{{join .Imports "\n"}}' "$p"); do
		case "$imp" in
		golang.org/x/sys/unix) ;;
		*.*/*) violation "$p imports $imp (allowed: stdlib, golang.org/x/sys/unix)" ;;
		esac
	done
done

# pkg/lease and pkg/fence: only the standard library, golang.org/x/sys/unix, go.etcd.io/etcd
# client packages, pkg/clock and each other, with no Kubernetes anywhere in their dependencies.
for p in $(pkgs ./pkg/lease/... ./pkg/fence/...); do
	for imp in $(go list -f '{{join .Imports "\n"}}' "$p"); do
		case "$imp" in
		golang.org/x/sys/unix | go.etcd.io/etcd/client/* | go.etcd.io/etcd/api/* | $mod/pkg/lease* | $mod/pkg/fence* | $mod/pkg/clock) ;;
		*.*/*) violation "$p imports $imp (allowed: stdlib, golang.org/x/sys/unix, go.etcd.io/etcd client, pkg/clock)" ;;
		esac
	done
	bad=$(go list -deps "$p" | grep -E '^(k8s\.io|sigs\.k8s\.io)/' | head -3 || true)
	[ -z "$bad" ] || violation "$p depends on Kubernetes: $(echo $bad)"
done

# pkg/redislock: the Redis engine, with no Kubernetes anywhere in its dependencies.
for p in $(pkgs ./pkg/redislock/...); do
	bad=$(go list -deps "$p" | grep -E '^(k8s\.io|sigs\.k8s\.io)/' | head -3 || true)
	[ -z "$bad" ] || violation "$p depends on Kubernetes: $(echo $bad)"
done

# pkg/leadership: the pod side needs no etcd access and never sees the controller.
for p in $(pkgs ./pkg/leadership/...); do
	bad=$(go list -deps "$p" | grep -E "^($mod/controllers|$mod/pkg/lease)(/|$)|^go\.etcd\.io/etcd/client/v3$" | head -3 || true)
	[ -z "$bad" ] || violation "$p depends on $(echo $bad)"
done

# pkg/eligibility, the rule for who may hold a lock: pure functions of the API types and
# pods. It imports only the standard library, k8s.io/api, k8s.io/apimachinery and api/, so
# that kubectl-dlock can share it with the controller without linking the controller.
for p in $(pkgs ./pkg/eligibility/...); do
	for imp in $(go list -f '{{join .Imports "\n"}}' "$p"); do
		case "$imp" in
		k8s.io/api/* | k8s.io/apimachinery/* | $mod/api/*) ;;
		*.*/*) violation "$p imports $imp (allowed: stdlib, k8s.io/api, k8s.io/apimachinery, api/)" ;;
		esac
	done
done

# cmd/kubectl-dlock: a kubectl plugin links neither the controller nor its manager or etcd.
bad=$(go list -deps ./cmd/kubectl-dlock | grep -E "^$mod/controllers(/|$)|^$mod/pkg/lease(/|$)|^go\.etcd\.io/etcd/client/|^sigs\.k8s\.io/controller-runtime/pkg/manager$" | head -3 || true)
[ -z "$bad" ] || violation "cmd/kubectl-dlock depends on $(echo $bad)"

# Nothing under pkg/ imports internal/ outside tests.
for p in $(pkgs ./pkg/...); do
	bad=$(go list -deps "$p" | grep -E "^$mod/internal(/|$)" | head -3 || true)
	[ -z "$bad" ] || violation "$p (non-test) depends on $(echo $bad)"
done

# api depends on no other package of this module.
for p in $(pkgs ./api/...); do
	bad=$(go list -deps "$p" | grep -E "^$mod/" | grep -v "^$mod/api" | head -3 || true)
	[ -z "$bad" ] || violation "$p depends on $(echo $bad)"
done

[ "$fail" -eq 0 ] && echo "package boundaries: ok"
exit "$fail"
