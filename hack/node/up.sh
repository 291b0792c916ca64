#!/usr/bin/env bash
# up.sh (make node): start a real single-node Kubernetes 1.37 (etcd, kube-apiserver,
# kube-scheduler, kube-controller-manager, containerd + runc, kubelet) inside its own network
# and private mount namespace, wait until the node is Ready and schedulable, and print how to
# use kubectl against it. Idempotent: a node that already runs is reported, a dead one is
# cleaned up first. Every run starts from an empty cluster (the PKI is kept). down.sh stops it.
# Settings: see lib.sh (NODE_DIR, NODE_CGROUP, NODE_NAME, NODE_BIN); KCM_ARGS, KUBELET_ARGS.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
HERE=$(cd "$(dirname "$0")" && pwd)
refuse_unless_root_linux
for b in etcd kube-apiserver kubectl; do
	[ -x "$NODE_BIN/$b" ] || die "missing $NODE_BIN/$b: run make envtest-bins"
done
for b in kubelet kube-scheduler kube-controller-manager; do
	[ -x "$NODE_BIN/$b" ] || die "missing $NODE_BIN/$b: run make node-bins"
done
for b in containerd containerd-shim-runc-v2 runc ctr iptables ip nsenter unshare openssl; do
	command -v "$b" > /dev/null || die "missing $b: run make node-deps"
done
[ -x /usr/lib/cni/bridge ] || die "missing /usr/lib/cni/bridge: run make node-deps"
[ -f "$NODE_BIN/images/pause.tar" ] || die "missing $NODE_BIN/images/pause.tar: run make image"
[ -d /sys/fs/cgroup/cpuset ] || die "refusing to start: this recipe needs the cgroup v1 hierarchies (no /sys/fs/cgroup/cpuset)"

KC=("$HERE/kubectl")
if p=$(ns_pid); then
	echo "node already running (namespace holder pid $p, NODE_DIR=$NODE_DIR)"
else
	[ -f "$RUN_DIR/ns.pid" ] && { echo "cleaning up a node that is no longer running"; "$HERE/down.sh"; }
	for d in /sys/fs/cgroup/*/"$NODE_CGROUP"; do
		[ -e "$d" ] && die "cgroup $d exists: another node with NODE_CGROUP=$NODE_CGROUP? run make node-down"
	done
	t0=$(date +%s%N)
	"$HERE/pki.sh"
	rm -rf "$NODE_DIR/var" "$LOG_DIR" "$NODE_DIR/fakesys"
	mkdir -p "$RUN_DIR" "$LOG_DIR" "$NODE_DIR/etc/cni" "$NODE_DIR/var"
	render() { sed -e "s|@DIR@|$NODE_DIR|g" -e "s|@CTRD_STATE@|$CTRD_STATE|g" -e "s|@CTRD_SOCK@|$CTRD_SOCK|g" \
		-e "s|@CGROUP@|$NODE_CGROUP|g" -e "s|@NODE_IP@|$NODE_IP|g" "$1" > "$2"; }
	render "$HERE/etc/containerd.toml.in" "$NODE_DIR/etc/containerd.toml"
	render "$HERE/etc/kubelet.yaml.in" "$NODE_DIR/etc/kubelet.yaml"
	render "$HERE/etc/10-lw-node.conflist.in" "$NODE_DIR/etc/cni/10-lw-node.conflist"
	printf 'KCM_ARGS=%q\nKUBELET_ARGS=%q\n' "${KCM_ARGS:-}" "${KUBELET_ARGS:-}" > "$RUN_DIR/args.env"
	# mountpoints of inner.sh's bind mounts; down.sh removes the ones made here
	: > "$RUN_DIR/created-dirs"
	for d in $NODE_HOST_DIRS; do
		[ -e "$d" ] || { mkdir -p "$d" && echo "$d" >> "$RUN_DIR/created-dirs"; }
	done
	# setsid: the node does not get the terminal's signals; not a group leader here, so
	# setsid does not fork and $! is inner.sh itself
	setsid unshare --net --mount --propagation private "$HERE/inner.sh" > "$LOG_DIR/inner.log" 2>&1 < /dev/null &
	echo $! > "$RUN_DIR/ns.pid"
	p=$!
	sleep 0.2
	# the ids of its namespaces, so down.sh finds every leftover process even after a crash
	echo "$(readlink "/proc/$p/ns/net") $(readlink "/proc/$p/ns/mnt")" > "$RUN_DIR/ns.ids"
	[ "$(readlink "/proc/$p/ns/net")" != "$(readlink /proc/self/ns/net)" ] ||
		{ "$HERE/down.sh"; die "the namespace holder $p is not in a namespace of its own"; }
	fail() { echo "node: $1; last lines of $LOG_DIR/*.log:" >&2; tail -n 5 "$LOG_DIR"/*.log >&2; "$HERE/down.sh" >&2; exit 1; }
	waitfor() { # description, command...
		local d=$1
		shift
		for _ in $(seq 1 360); do
			if "$@" > /dev/null 2>&1; then
				echo "$d after $((($(date +%s%N) - t0) / 1000000)) ms"
				return 0
			fi
			kill -0 "$p" 2> /dev/null || fail "the namespace holder exited"
			sleep 0.5
		done
		fail "timed out waiting for $d"
	}
	node_ready() { [ "$("${KC[@]}" get node "$NODE_NAME" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}')" = True ]; }
	node_untainted() { [ -z "$("${KC[@]}" get node "$NODE_NAME" -o 'jsonpath={.spec.taints}')" ]; }
	waitfor "kube-apiserver ready" "${KC[@]}" get --raw /readyz
	waitfor "node $NODE_NAME Ready" node_ready
	waitfor "node untainted" node_untainted
	waitfor "default service account" "${KC[@]}" get serviceaccount default
	waitfor "kube-root-ca.crt" "${KC[@]}" get configmap kube-root-ca.crt
fi
cat << USAGE
node $NODE_NAME is Ready (node IP $NODE_IP, pods 10.251.0.0/24; its API server listens only
inside the node's network namespace). kubectl against it:
  $HERE/kubectl get nodes
or, from a shell inside the namespace:
  nsenter --net --target $(cat "$RUN_DIR/ns.pid") bash
  export KUBECONFIG=$NODE_DIR/pki/admin.kubeconfig
Images: make image (imports into the node's containerd; imagePullPolicy: Never).
Stop it: make node-down
USAGE
