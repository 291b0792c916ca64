#!/usr/bin/env bash
# demo.sh (make node-demo): deploy lockwarden onto the running node the way a user does, and
# the fenced-worker example under it: a 3-member etcd with TLS client certificates beside the
# cluster (certificates made here with openssl), the lockwarden-etcd-client Secret,
# `kubectl apply -k config/e2e` (config/default with the node's image and endpoints), the
# ledger on the node IP, then `kubectl apply -k test/e2e/testdata/worker`. make node-down
# stops all of it by PID.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
HERE=$(cd "$(dirname "$0")" && pwd)
refuse_unless_root_linux
ns_pid > /dev/null || die "no node is running (NODE_DIR=$NODE_DIR): run make node"
[ -x "$NODE_BIN/images/fenced-worker" ] || die "missing $NODE_BIN/images/fenced-worker: run make image"
KC=("$HERE/kubectl")
P=$NODE_DIR/demo/pki
if [ ! -f "$P/client.crt" ]; then
	mkdir -p "$P"
	(
		cd "$P"
		umask 077
		openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 -subj /CN=lockwarden-demo-etcd-ca \
			-keyout ca.key -out ca.crt 2> /dev/null
		for n in server client; do
			openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$n" -keyout "$n.key" -out "$n.csr" 2> /dev/null
		done
		printf 'subjectAltName=IP:%s,IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n' "$NODE_IP" > server.ext
		printf 'extendedKeyUsage=clientAuth\n' > client.ext
		for n in server client; do
			openssl x509 -req -in "$n.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 -extfile "$n.ext" -out "$n.crt" 2> /dev/null
		done
		chmod 644 ca.crt server.crt client.crt
	)
fi
# alive NAME: the component's pid file names a live process
alive() {
	local p
	p=$(cat "$RUN_DIR/$1.pid" 2> /dev/null) && [ -n "$p" ] && kill -0 "$p" 2> /dev/null
}
for n in lw-etcd-0 lw-etcd-1 lw-etcd-2 ledger; do
	alive "$n" || "$HERE/component.sh" start "$n"
done
"${KC[@]}" apply -f "$REPO/config/manager/namespace.yaml"
"${KC[@]}" -n lockwarden-system create secret generic lockwarden-etcd-client \
	--from-file=ca.crt="$P/ca.crt" --from-file=tls.crt="$P/client.crt" --from-file=tls.key="$P/client.key" \
	--dry-run=client -o yaml | "${KC[@]}" apply -f -
"${KC[@]}" apply -k "$REPO/config/e2e"
"${KC[@]}" -n lockwarden-system rollout status deployment/lockwarden-manager --timeout=180s
"$REPO/hack/wait-lock-admission.sh" "${KC[@]}"
"${KC[@]}" apply -k "$REPO/test/e2e/testdata/worker"
"${KC[@]}" -n fenced-demo rollout status deployment/fenced-worker --timeout=120s
for _ in $(seq 1 120); do
	[ "$("${KC[@]}" -n fenced-demo get distributedlock ledger-writer -o 'jsonpath={.status.phase}')" = Held ] && break
	sleep 0.5
done
"${KC[@]}" -n fenced-demo get distributedlocks
