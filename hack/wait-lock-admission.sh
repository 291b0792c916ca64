#!/usr/bin/env bash
# Wait until the API server admits a DistributedLock (make deploy runs this after the rollout).
#
# Right after the CRD and the admission policies (config/policy) are applied, a create of a
# lock can be refused for a few seconds with "ServiceUnavailable: Resource kind
# lockwarden.io/v1alpha1, Kind=DistributedLock not found. There can be a delay between when
# CustomResourceDefinitions are created and when they are available": the API server's
# MutatingAdmissionPolicy dispatcher has no type converter for the new kind yet
# (k8s.io/apiserver pkg/admission/plugin/policy/mutating/dispatcher.go, dispatchOne), and that
# error ignores the policy's failurePolicy. A server-side dry run goes through the same
# admission and stores nothing.
#
# Usage: [WAIT_TIMEOUT=seconds] hack/wait-lock-admission.sh KUBECTL [KUBECTL-ARGS...]
# (default 60 s; KUBECTL-ARGS such as --kubeconfig go before every kubectl command).
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: [WAIT_TIMEOUT=seconds] hack/wait-lock-admission.sh KUBECTL [KUBECTL-ARGS...]" >&2; exit 2; }
timeout=${WAIT_TIMEOUT:-60}
probe='{"apiVersion":"lockwarden.io/v1alpha1","kind":"DistributedLock",
"metadata":{"generateName":"admission-probe-","namespace":"default"},
"spec":{"candidates":{"selector":{"matchLabels":{"app":"admission-probe"}}}}}'
start=$SECONDS
while :; do
	if out=$(printf '%s' "$probe" | "$@" create --dry-run=server -o name -f - 2>&1); then
		echo "a DistributedLock is admitted ($((SECONDS - start)) s after the rollout)"
		exit 0
	fi
	if ((SECONDS - start >= timeout)); then
		echo "deploy: the API server still refuses a DistributedLock after ${timeout} s (a server-side dry run):" >&2
		echo "$out" >&2
		exit 1
	fi
	sleep 0.5
done
