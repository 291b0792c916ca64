#!/usr/bin/env bash
# pki.sh: the node's own credentials under $NODE_DIR/pki, made once and kept: a service-account
# signing key pair, a static token file and one kubeconfig per client (admin, kubelet,
# controller-manager, scheduler). The API server makes its own serving certificate in
# pki/apiserver on first start. Safe to run again: existing files are kept.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
P=$NODE_DIR/pki
mkdir -p "$P"
umask 077
if [ ! -f "$P/sa.key" ]; then
	openssl genrsa -out "$P/sa.key" 2048 2>/dev/null
	openssl rsa -in "$P/sa.key" -pubout -out "$P/sa.pub" 2>/dev/null
fi
if [ ! -f "$P/tokens.csv" ]; then
	for n in admin kubelet kcm sched; do
		echo "$(openssl rand -hex 16)" > "$P/$n.token"
	done
	{
		echo "$(cat "$P/admin.token"),admin,admin,\"system:masters\""
		echo "$(cat "$P/kubelet.token"),system:node:$NODE_NAME,kubelet,\"system:nodes\""
		echo "$(cat "$P/kcm.token"),system:kube-controller-manager,kcm"
		echo "$(cat "$P/sched.token"),system:kube-scheduler,sched"
	} > "$P/tokens.csv"
fi
for n in admin kubelet kcm sched; do
	cat > "$P/$n.kubeconfig" <<K
apiVersion: v1
kind: Config
clusters:
- name: lw-node
  cluster: {server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true}
users:
- name: $n
  user: {token: $(cat "$P/$n.token")}
contexts:
- name: lw-node
  context: {cluster: lw-node, user: $n}
current-context: lw-node
K
done
