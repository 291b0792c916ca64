#!/usr/bin/env bash
# Enforces the package boundaries of DESIGN.md ("Packages and what may import what").
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
mod=github.com/lockwarden/lockwarden
fail=0
violation() { echo "boundary: $*" >&2; fail=1; }

pkgs() { go list "$@" 2>/dev/null || true; }

# pkg/lease and pkg/fence: only the standard library, golang.org/x/sys/unix, go.etcd.io/etcd
# client packages and each other, with no Kubernetes anywhere in their dependencies.
for p in $(pkgs ./pkg/lease/... ./pkg/fence/...); do
	for imp in $(go list -f '{{join .Imports "\n"}}' "$p"); do
		case "$imp" in
		golang.org/x/sys/unix | go.etcd.io/etcd/client/* | go.etcd.io/etcd/api/* | $mod/pkg/lease* | $mod/pkg/fence*) ;;
		*.*/*) violation "$p imports $imp (allowed: stdlib, golang.org/x/sys/unix, go.etcd.io/etcd client)" ;;
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
