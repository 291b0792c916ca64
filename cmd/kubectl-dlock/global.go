package main

import (
	"fmt"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// holderText is get's HOLDER cell: the holder's name, or for a Global lock held by another
// cluster "@" and that cluster's name (its pods are not in this cluster).
func holderText(l *lockv1.DistributedLock, st *lockv1.DistributedLockStatus) string {
	if l.Spec.IsGlobal() && st.Holder == "" && st.GlobalCluster != "" {
		return "@" + st.GlobalCluster
	}
	return orDash(st.Holder)
}

// globalHead is why's first line for a Global lock: where the global term is, by this
// cluster's status.
func globalHead(l *lockv1.DistributedLock) string {
	st := &l.Status
	head := fmt.Sprintf("global lock %s (%s/%s): phase %s, strategy %s among this cluster's candidates",
		l.Spec.GlobalName, l.Namespace, l.Name, orDash(string(st.Phase)), l.Spec.Strategy)
	switch {
	case st.GlobalHolderUID != "":
		head += fmt.Sprintf(", holder %s in this cluster (%s, token %d, round %d)", st.Holder, orDash(st.GlobalCluster), st.FencingToken, st.GlobalRound)
	case st.GlobalCluster != "":
		head += fmt.Sprintf(", held by cluster %s (token %d)", st.GlobalCluster, st.FencingToken)
	}
	return head
}

// globalView is the lock as pkg/eligibility judges it: a Global lock's holder in this
// cluster is status.globalHolderUID (its status never sets holderUID), and a term held by
// another cluster has no local holder.
func globalView(l *lockv1.DistributedLock) *lockv1.DistributedLockStatus {
	st := l.Status.DeepCopy()
	st.HolderUID = st.GlobalHolderUID
	if st.HolderUID == "" {
		st.Holder = ""
	}
	return st
}

// errGlobalRelease refuses release on a Global lock: its holder's release goes through the
// global term's own ending, which has no release request yet.
func errGlobalRelease(l *lockv1.DistributedLock) error {
	return fmt.Errorf("%w: lock %s/%s is a Global lock (globalName %s): release is not supported for Global locks yet; delete the holder pod, or set spec.suspend, to end its term", ErrRefused, l.Namespace, l.Name, l.Spec.GlobalName)
}
