package main

import (
	"context"
	"fmt"
	"path/filepath"

	"sigs.k8s.io/controller-runtime/pkg/client"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// hint prints what to try next, in another terminal, while the playground keeps running.
func (p *playground) hint(ctx context.Context) {
	var l lockv1.DistributedLock
	reports := hintLock{holder: "reports-0", delay: 20}
	if err := p.k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: shellLock}, &l); err == nil && l.Status.Holder != "" {
		reports = hintLock{holder: l.Status.Holder, delay: l.Spec.EffectiveLockDelaySeconds(), preferred: l.Spec.PreferredHolder}
	}
	rel, _ := filepath.Rel(p.root, p.kubeconfig)
	p.say("%s", hintText(p.root, rel, reports, p.metricsAt, p.probesAt))
}

// hintLock is what the hint says about reports-leader: its holder, lock delay and
// spec.preferredHolder (strategy Preferred).
type hintLock struct {
	holder    string
	delay     int32
	preferred string
}

// hintText is the hint for a playground whose kubeconfig is at kubeconfig (relative to root):
// ./bin first on PATH, so that kubectl is the pinned 1.37 client and kubectl dlock finds the
// plugin; a kubectl wait that waits, for the other reports pod to take over after an
// operator's release of reports-leader.
func hintText(root, kubeconfig string, reports hintLock, metricsAt, probesAt string) string {
	other := "reports-1"
	if reports.holder == other {
		other = "reports-0"
	}
	// Releasing the preferred holder alone hands the lock back to it by preemption once the
	// other pod holds it: --prefer moves the preference with the release.
	prefer := ""
	if reports.preferred == reports.holder {
		prefer = " --prefer " + other
	}
	return fmt.Sprintf(`
The playground keeps running. In another terminal, from %s:
  export KUBECONFIG=$PWD/%s PATH=$PWD/bin:$PATH   # ./bin's kubectl 1.37 and kubectl-dlock
  kubectl get distributedlocks -o wide
  kubectl get dlock -w
  kubectl describe dlock %s
  kubectl dlock why %s
  kubectl delete pod $(kubectl get dlock %s -o jsonpath='{.status.holder}')   # a graceful handoff
  kubectl dlock history %s
  kubectl dlock release %s --reason "try it"%s   # ends %s's term: Releasing, then the %s lock delay
  kubectl wait dlock/%s --for=jsonpath='{.status.holder}'=%s --timeout=2m   # returns once %s holds it
  kubectl dlock get %s   # one row per slot: NAME[i], its holder and token (docs/slots.md)
  kubectl delete pod $(kubectl get dlock %s -o jsonpath='{.status.slots[0].holder}')   # slot 1's term ends at once; no pod waits, so it stays Pending (Slots 2/3)
  kubectl dlock history %s   # a section per slot
The manager serves http://%s/metrics and http://%s/readyz (and /healthz).
Logs of every process (kube-apiserver, its etcd, lockwarden's etcd, the manager, the ledger and
each worker) are in ./.playground/*.log. Ctrl-C stops everything and removes ./.playground.`,
		root, kubeconfig, lock, lock, lock, lock, shellLock, prefer, reports.holder, fmt.Sprintf("%d s", reports.delay), shellLock, other, other,
		slotLock, slotLock, slotLock, metricsAt, probesAt)
}
