#!/usr/bin/env bash
# component.sh start|stop NAME: start one component of the running node again inside its
# namespaces (with the flags inner.sh used), or stop it by PID. The e2e suite stops and
# restarts the kubelet this way (node lost, node deleted).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
[ $# = 2 ] || die "usage: component.sh start|stop NAME"
p=$(ns_pid) || die "no node is running (NODE_DIR=$NODE_DIR): run make node"
. "$(dirname "$0")/components.sh"
case $1 in
stop) stop "$2" ;;
start)
	declare -F "cmd_$2" > /dev/null || die "unknown component $2"
	# the started process outlives this script: its PID is in $RUN_DIR/$2.pid
	exec nsenter --net --mount --target "$p" -- "$(cd "$(dirname "$0")" && pwd)/component.sh" inside-start "$2"
	;;
inside-start) start "$2" ;;
*) die "usage: component.sh start|stop NAME" ;;
esac
