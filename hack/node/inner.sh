#!/usr/bin/env bash
# inner.sh: the node's namespace holder. up.sh starts it with
# `unshare --net --mount --propagation private`, so every mount below and every socket of the
# node exists only in these namespaces. It starts etcd, containerd, kube-apiserver,
# kube-scheduler, kube-controller-manager and the kubelet (pid files in $RUN_DIR), then waits;
# down.sh stops them by PID. The commands are in components.sh.
set -u
. "$(dirname "$0")/lib.sh"
D=$NODE_DIR
ts() { date +%H:%M:%S.%3N; }
echo "$(ts) inner.sh pid $$"
# --- network: lo plus a veth pair carrying the node IP (this kernel has no dummy driver)
ip link set lo up
ip link add lwnode0 type veth peer name lwnode1
ip addr add "$NODE_IP/24" dev lwnode0
ip link set lwnode1 up
ip link set lwnode0 up
# --- the kubelet's cgroupRoot in every v1 hierarchy (cpuset needs cpus and mems copied)
for c in /sys/fs/cgroup/*/; do
	[ "$c" = /sys/fs/cgroup/unified/ ] && continue
	mkdir -p "$c$NODE_CGROUP"
done
cat /sys/fs/cgroup/cpuset/cpuset.cpus > "/sys/fs/cgroup/cpuset/$NODE_CGROUP/cpuset.cpus"
cat /sys/fs/cgroup/cpuset/cpuset.mems > "/sys/fs/cgroup/cpuset/$NODE_CGROUP/cpuset.mems"
# --- the kubelet sets these machine-wide; show it the values it wants, read-only, here only
mkdir -p "$D/fakesys"
for kv in vm/overcommit_memory=1 vm/panic_on_oom=0 kernel/panic=10 kernel/panic_on_oops=1 \
	kernel/keys/root_maxkeys=1000000 kernel/keys/root_maxbytes=25000000; do
	k=${kv%=*} v=${kv#*=}
	[ "$(cat "/proc/sys/$k")" = "$v" ] && continue
	f=$D/fakesys/${k//\//.}
	echo "$v" > "$f"
	mount --bind "$f" "/proc/sys/$k" && mount -o remount,bind,ro "/proc/sys/$k"
done
# --- state off the host: a private /run (sockets, netns files, runc state) and bind mounts
# over the folders the kubelet and CNI hard-code (up.sh made any missing mountpoint)
mount -t tmpfs -o mode=755 tmpfs /run
for d in $NODE_HOST_DIRS; do
	s=$D/var/host${d//\//-}
	mkdir -p "$s" && mount --bind "$s" "$d"
done
mkdir -p "$CTRD_STATE" "$D/var/etcd" "$D/pki/apiserver"
. "$(dirname "$0")/components.sh"
start etcd
start containerd
start kube-apiserver
for _ in $(seq 1 240); do "$NODE_BIN/kubectl" --kubeconfig "$D/pki/admin.kubeconfig" get --raw /readyz > /dev/null 2>&1 && break; sleep 0.5; done
echo "$(ts) kube-apiserver ready"
for _ in $(seq 1 60); do ctr --address "$CTRD_SOCK" version > /dev/null 2>&1 && break; sleep 0.5; done
for img in "$NODE_BIN"/images/*.tar; do
	ctr --address "$CTRD_SOCK" -n k8s.io images import "$img" >> "$LOG_DIR/import.log" 2>&1 ||
		echo "$(ts) import $img: exit $?"
done
echo "$(ts) images imported"
start kube-scheduler
start kube-controller-manager
start kubelet
echo "$(ts) all started"
# stay alive as the namespaces' holder until down.sh ends us; a component that exits does
# not end the node (the e2e test stops and restarts the kubelet on purpose)
trap 'kill "$sp" 2> /dev/null; exit 0' TERM INT
while :; do
	sleep 3600 &
	sp=$!
	wait "$sp"
done
