package controllers

import (
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/pkg/lease"
)

// Status transitions of a Global lock (docs/global-contract.md, "Status as published"). A
// Global lock never sets status.holderUID (finding F5: a reader that knows only
// cluster-scoped locks must never lead a global term); its holder pod is globalHolderUID, set
// only while this cluster holds the term.

// publishedOf reads what the status shows of the global term.
func publishedOf(st *lockv1.DistributedLockStatus) publishedTerm {
	p := publishedTerm{
		phase: st.Phase, cluster: st.GlobalCluster, holder: st.Holder, holderUID: st.GlobalHolderUID,
		token: st.FencingToken, round: st.GlobalRound, roundToken: st.GlobalToken, delay: st.GlobalLockDelaySeconds,
		maxToken: st.MaxFencingToken,
	}
	if c := meta.FindStatusCondition(st.Conditions, lockv1.ConditionHeld); c != nil {
		p.heldReason = c.Reason
	}
	return p
}

// publishRound writes round into st: the term of K's grant g (token, on lease) held here,
// phase Held, or Releasing for reason. The round vouches for token; the delay published is
// the one K's record carries (fixed per token: finding L2).
func publishRound(st *lockv1.DistributedLockStatus, gen int64, cluster string, g lease.GlobalRecord, token int64, leaseID clientv3.LeaseID,
	round int64, leaseSeconds int32, releasing bool, reason string, now metav1.Time) {
	if st.GlobalToken != token || st.GlobalHolderUID != types.UID(g.HolderUID) || st.FencingToken != token {
		st.Transitions++
		st.AcquireTime = &now
	}
	st.Phase = lockv1.PhaseHeld
	if releasing {
		st.Phase = lockv1.PhaseReleasing
	}
	st.Holder, st.HolderUID, st.GlobalHolderUID, st.GlobalCluster = g.Holder, "", types.UID(g.HolderUID), cluster
	st.FencingToken, st.MaxFencingToken = token, max(st.MaxFencingToken, token)
	st.GlobalRound, st.GlobalToken, st.GlobalLockDelaySeconds = round, token, g.DelaySeconds
	st.TermLeaseSeconds, st.LeaseID = leaseSeconds, fmt.Sprintf("%x", int64(leaseID))
	if releasing {
		setCondition(st, gen, lockv1.ConditionHeld, false, reason, fmt.Sprintf("global term of %s (token %d) is ending: %s", g.Holder, token, reason))
		return
	}
	setCondition(st, gen, lockv1.ConditionHeld, true, lockv1.ReasonHolderPublished, fmt.Sprintf("held by %s in this cluster (%s) with global token %d", g.Holder, cluster, token))
}

// publishElsewhere writes into st the term of K's grant held by another cluster (or by
// another lock object of this cluster): phase Held, no holder here, no globalHolderUID.
// The rounds stay as they are: they vouch for no token of this cluster's pods.
func publishElsewhere(st *lockv1.DistributedLockStatus, gen int64, v lease.GlobalView, reason string) {
	st.Phase = lockv1.PhaseHeld
	st.Holder, st.HolderUID, st.GlobalHolderUID, st.GlobalCluster = "", "", "", v.Grant.Cluster.Name
	st.FencingToken, st.MaxFencingToken = v.Token, max(st.MaxFencingToken, v.Token)
	st.TermLeaseSeconds, st.LeaseID, st.AcquireTime = 0, "", nil
	msg := fmt.Sprintf("held by cluster %s (pod %s) with global token %d", v.Grant.Cluster.Name, v.Grant.Holder, v.Token)
	if reason == ReasonDuplicateGlobalName {
		msg = "an older lock in this cluster has the same spec.globalName and contends for it; this one does not. " + msg
	}
	setCondition(st, gen, lockv1.ConditionHeld, false, reason, msg)
}

// publishFree writes into st that no global term is known: Pending (Suspended with
// spec.suspend), no holder, no cluster, no token (maxFencingToken keeps its maximum).
func publishFree(st *lockv1.DistributedLockStatus, gen int64, phase lockv1.Phase, reason, msg string) {
	st.Phase = phase
	st.Holder, st.HolderUID, st.GlobalHolderUID, st.GlobalCluster = "", "", "", ""
	st.FencingToken, st.TermLeaseSeconds, st.LeaseID, st.AcquireTime = 0, 0, "", nil
	setCondition(st, gen, lockv1.ConditionHeld, false, reason, msg)
}

// freeMessage explains a Held=False reason of a lock with no term.
func freeMessage(reason string) string {
	switch reason {
	case lockv1.ReasonSuspended:
		return "spec.suspend is true"
	case ReasonDuplicateGlobalName:
		return "an older lock in this cluster has the same spec.globalName and contends for it; this one does not"
	case lockv1.ReasonNoHolder:
		return "no eligible candidate in this cluster; the global grant is free"
	case ReasonGlobalWaiting:
		return "the global grant is free: this cluster waits the lock delay before it takes it"
	}
	return reason
}
