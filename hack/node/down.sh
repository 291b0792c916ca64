#!/usr/bin/env bash
# down.sh (make node-down): stop everything up.sh started, by PID: the kubelet and the
# controllers, every container (through containerd, then any process left in the node's
# cgroups), containerd, kube-apiserver, etcd, any other process in the node's namespaces, and
# the namespace holder; then remove the node's cgroups and the mountpoints up.sh made. The
# mounts lived only in the node's mount namespace and end with it. Safe to run twice.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || die "refusing to stop: needs root"
[ -d "$RUN_DIR" ] || { echo "no node state in $NODE_DIR"; exit 0; }
. "$(dirname "$0")/components.sh"
holder=$(ns_pid || true)
stop kubelet kube-controller-manager kube-scheduler
if [ -n "$holder" ]; then
	CTR=(nsenter --mount --net --target "$holder" ctr --address "$CTRD_SOCK" -n k8s.io)
	if "${CTR[@]}" version > /dev/null 2>&1; then
		for t in $("${CTR[@]}" tasks ls -q 2> /dev/null); do "${CTR[@]}" tasks kill -s SIGKILL "$t" > /dev/null 2>&1; done
		sleep 0.5
		for t in $("${CTR[@]}" tasks ls -q 2> /dev/null); do "${CTR[@]}" tasks delete -f "$t" > /dev/null 2>&1; done
		for c in $("${CTR[@]}" containers ls -q 2> /dev/null); do "${CTR[@]}" containers delete "$c" > /dev/null 2>&1; done
	fi
fi
# a process still in the node's cgroup tree is a container process of this node
for f in $(find "/sys/fs/cgroup/pids/$NODE_CGROUP" -name cgroup.procs 2> /dev/null); do
	for pid in $(cat "$f"); do kill -9 "$pid" 2> /dev/null; done
done
stop ledger lw-etcd-0 lw-etcd-1 lw-etcd-2
stop containerd kube-apiserver
stop etcd
# shims and anything else: every process in the node's network or mount namespace is ours
ids=$(cat "$RUN_DIR/ns.ids" 2> /dev/null || true)
if [ -n "$ids" ]; then
	netns=${ids% *} mntns=${ids#* }
	for d in /proc/[0-9]*; do
		pid=${d#/proc/}
		[ "$pid" = "$holder" ] && continue
		n=$(readlink "$d/ns/net" 2> /dev/null) || continue
		m=$(readlink "$d/ns/mnt" 2> /dev/null) || continue
		if [ "$n" = "$netns" ] || [ "$m" = "$mntns" ]; then
			echo "stopping leftover $pid: $(tr '\0' ' ' < "$d/cmdline" | cut -c1-100)"
			kill -9 "$pid" 2> /dev/null
		fi
	done
fi
if [ -n "$holder" ]; then
	kill "$holder" 2> /dev/null
	for _ in $(seq 1 40); do kill -0 "$holder" 2> /dev/null || break; sleep 0.25; done
	kill -9 "$holder" 2> /dev/null
fi
rc=0
# the cgroups, deepest first; a cgroup is removable once its last process has exited
for c in /sys/fs/cgroup/*/"$NODE_CGROUP"; do
	[ -d "$c" ] || continue
	for _ in $(seq 1 20); do
		find "$c" -depth -type d -exec rmdir {} + 2> /dev/null
		[ -d "$c" ] || break
		sleep 0.25
	done
	[ -d "$c" ] && { echo "node: could not remove cgroup $c" >&2; rc=1; }
done
if [ -f "$RUN_DIR/created-dirs" ]; then
	while read -r d; do rmdir "$d" 2> /dev/null || { echo "node: $d is not empty, left in place" >&2; rc=1; }; done < "$RUN_DIR/created-dirs"
fi
rm -f "$RUN_DIR"/*.pid "$RUN_DIR/created-dirs" "$RUN_DIR/ns.ids" "$RUN_DIR/args.env"
echo "node stopped"
exit $rc
