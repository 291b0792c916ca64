# Shared settings of the hack/node scripts (sourced, not run). Every path is derived from the
# clone's location or from the environment, so the node works from any checkout:
#   NODE_DIR     state folder (default <repo>/bin/node): PKI, configs, logs, pid files, data
#   NODE_CGROUP  cgroupRoot of the kubelet, created in every cgroup v1 hierarchy (default lockwarden-node)
#   NODE_NAME    the Node object's name (default lw-node)
#   NODE_BIN     where etcd, kube-apiserver, kubectl, kubelet, ... are (default <repo>/bin)
# The node's network namespace holds the node IP 10.250.0.1 on a veth pair; pods get
# 10.251.0.0/24 from the CNI bridge; the Service range 10.252.0.0/16 is reachable only as
# far as the API server's own endpoint goes (there is no kube-proxy, see docs/e2e.md).
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
NODE_DIR=${NODE_DIR:-$REPO/bin/node}
NODE_CGROUP=${NODE_CGROUP:-lockwarden-node}
NODE_NAME=${NODE_NAME:-lw-node}
NODE_BIN=${NODE_BIN:-$REPO/bin}
NODE_IP=10.250.0.1
RUN_DIR=$NODE_DIR/run
LOG_DIR=$NODE_DIR/logs
# containerd's socket lives in the namespace's private /run: nothing on the host sees it.
CTRD_STATE=/run/$NODE_CGROUP/containerd
CTRD_SOCK=$CTRD_STATE/containerd.sock
# the mountpoints the kubelet and the CNI plugins hard-code; inner.sh bind-mounts folders of
# NODE_DIR over them inside the private mount namespace.
NODE_HOST_DIRS="/var/lib/kubelet /var/lib/cni /var/log/containers /var/log/pods"

die() { echo "node: $*" >&2; exit 1; }

# refuse prints why the node cannot start here, in one line, and exits 1.
refuse_unless_root_linux() {
	[ "$(uname -s)" = Linux ] || die "refusing to start: a real node needs Linux (this is $(uname -s))"
	[ "$(id -u)" = 0 ] || die "refusing to start: a real node needs root (namespaces, mounts, cgroups); run as root"
}

# ns_pid prints the PID of the namespace holder (inner.sh) if it is alive.
ns_pid() {
	local p
	p=$(cat "$RUN_DIR/ns.pid" 2>/dev/null) || return 1
	[ -n "$p" ] && kill -0 "$p" 2>/dev/null && echo "$p"
}
