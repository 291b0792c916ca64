# components.sh (sourced inside the node's namespaces by inner.sh and component.sh): how each
# component of the node is started. `start NAME` runs it in the background at nice 10, logs to
# $LOG_DIR/NAME.log and writes its PID to $RUN_DIR/NAME.pid. Extra flags for the e2e suite:
# KCM_ARGS and KUBELET_ARGS (space-separated words).
D=$NODE_DIR
# the extra flags up.sh was given, so a restarted component gets the same ones
# shellcheck disable=SC1091
if [ -f "$RUN_DIR/args.env" ]; then . "$RUN_DIR/args.env"; fi

# cmd_NAME prints nothing; it sets CMD to the component's command line.
cmd_etcd() {
	CMD=("$NODE_BIN/etcd" --name node --data-dir "$D/var/etcd"
		--listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379
		--listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380
		--initial-cluster node=http://127.0.0.1:2380 --unsafe-no-fsync --log-level warn)
}
cmd_containerd() { CMD=(containerd --config "$D/etc/containerd.toml"); }
cmd_kube-apiserver() {
	CMD=("$NODE_BIN/kube-apiserver" --etcd-servers http://127.0.0.1:2379
		--bind-address 0.0.0.0 --advertise-address "$NODE_IP" --secure-port 6443 --cert-dir "$D/pki/apiserver"
		--token-auth-file "$D/pki/tokens.csv" --authorization-mode Node,RBAC
		--service-account-issuer https://kubernetes.default.svc --service-account-key-file "$D/pki/sa.pub"
		--service-account-signing-key-file "$D/pki/sa.key" --service-cluster-ip-range 10.252.0.0/16
		--enable-admission-plugins NodeRestriction --kubelet-preferred-address-types InternalIP
		--enable-priority-and-fairness=false --profiling=false)
}
cmd_kube-scheduler() {
	CMD=("$NODE_BIN/kube-scheduler" --kubeconfig "$D/pki/sched.kubeconfig"
		--authentication-kubeconfig "$D/pki/sched.kubeconfig" --authorization-kubeconfig "$D/pki/sched.kubeconfig"
		--leader-elect=false --bind-address 127.0.0.1)
}
cmd_kube-controller-manager() {
	# shellcheck disable=SC2206 # KCM_ARGS is a word list on purpose
	CMD=("$NODE_BIN/kube-controller-manager"
		--kubeconfig "$D/pki/kcm.kubeconfig" --authentication-kubeconfig "$D/pki/kcm.kubeconfig"
		--authorization-kubeconfig "$D/pki/kcm.kubeconfig" --leader-elect=false --bind-address 127.0.0.1
		--use-service-account-credentials --flex-volume-plugin-dir "$D/var/kcm-flexvolume"
		--service-account-private-key-file "$D/pki/sa.key" --root-ca-file "$D/pki/apiserver/apiserver.crt"
		${KCM_ARGS:-})
}
cmd_kubelet() {
	# shellcheck disable=SC2206 # KUBELET_ARGS is a word list on purpose
	CMD=("$NODE_BIN/kubelet" --config "$D/etc/kubelet.yaml" --kubeconfig "$D/pki/kubelet.kubeconfig"
		--hostname-override "$NODE_NAME" --node-ip "$NODE_IP" --v 2 ${KUBELET_ARGS:-})
}

start() { # NAME
	"cmd_$1"
	nice -n 10 "${CMD[@]}" >> "$LOG_DIR/$1.log" 2>&1 < /dev/null &
	echo $! > "$RUN_DIR/$1.pid"
	echo "$(date +%H:%M:%S.%3N) started $1 pid $!"
}

# stop NAME...: SIGTERM to each by PID, then wait up to 10 s for all of them, then SIGKILL.
stop() {
	local n p pids=()
	for n in "$@"; do
		p=$(cat "$RUN_DIR/$n.pid" 2> /dev/null) || continue
		rm -f "$RUN_DIR/$n.pid"
		kill "$p" 2> /dev/null && pids+=("$p")
	done
	for _ in $(seq 1 40); do
		local left=()
		for p in "${pids[@]}"; do kill -0 "$p" 2> /dev/null && left+=("$p"); done
		((${#left[@]})) || return 0
		pids=("${left[@]}")
		sleep 0.25
	done
	kill -9 "${pids[@]}" 2> /dev/null || true
}

# lockwarden's own etcd for demo.sh: 3 members with TLS (client and peer certificates from
# $D/demo/pki), on the node IP, outside the cluster; the same ports as config/e2e.
cmd_lw-etcd() { # member index 0..2
	local i=$1 port=$((32379 + 2 * $1)) p=$D/demo/pki
	CMD=("$NODE_BIN/etcd" --name "m$i" --data-dir "$D/var/lw-etcd-$i"
		--listen-client-urls "https://$NODE_IP:$port" --advertise-client-urls "https://$NODE_IP:$port"
		--listen-peer-urls "https://$NODE_IP:$((port + 1))" --initial-advertise-peer-urls "https://$NODE_IP:$((port + 1))"
		--initial-cluster "m0=https://$NODE_IP:32380,m1=https://$NODE_IP:32382,m2=https://$NODE_IP:32384"
		--cert-file "$p/server.crt" --key-file "$p/server.key" --trusted-ca-file "$p/ca.crt" --client-cert-auth
		--peer-cert-file "$p/server.crt" --peer-key-file "$p/server.key" --peer-trusted-ca-file "$p/ca.crt" --peer-client-cert-auth
		--unsafe-no-fsync --log-level warn)
}
cmd_lw-etcd-0() { cmd_lw-etcd 0; }
cmd_lw-etcd-1() { cmd_lw-etcd 1; }
cmd_lw-etcd-2() { cmd_lw-etcd 2; }
# the fenced-worker's ledger for demo.sh, on the node IP (test/e2e/testdata/worker points there)
cmd_ledger() { CMD=("$NODE_BIN/images/fenced-worker" ledger "--listen=$NODE_IP:8090"); }
