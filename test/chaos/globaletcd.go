package chaos

import "fmt"

// GlobalEvent is one change of a global name's keys in the shared etcd, as the harness's
// watch of the run's global prefix saw it: K (the grant) or T (the tombstone) put or deleted
// at revision Rev.
type GlobalEvent struct {
	Mono      int64  `json:"mono"` // CLOCK_MONOTONIC ns when the harness received it
	Rev       int64  `json:"rev"`
	Key       string `json:"key"` // KeyGrant or KeyTombstone
	Deleted   bool   `json:"deleted,omitempty"`
	CreateRev int64  `json:"createRev,omitempty"` // of K: the grant's token
	// The record put (empty for a delete): its kind ("grant", "waiting"), the cluster's name,
	// the holder pod and the carried delay.
	Kind      string `json:"kind,omitempty"`
	Cluster   string `json:"cluster,omitempty"`
	Holder    string `json:"holder,omitempty"`
	HolderUID string `json:"holderUID,omitempty"`
	Delay     int32  `json:"delay,omitempty"`
}

// The keys of a global name a GlobalEvent can be about.
const (
	KeyGrant     = "grant"
	KeyTombstone = "tombstone"
)

// Grant returns the grant the event creates (K put as a new key: CreateRev == Rev), ok
// false for any other event.
func (e GlobalEvent) Grant() (token int64, ok bool) {
	if e.Key != KeyGrant || e.Deleted || e.CreateRev != e.Rev {
		return 0, false
	}
	return e.CreateRev, true
}

// CheckGrantsTombstoned checks R6 on the shared etcd's history: every grant (K created at
// revision t) put T in the same transaction, so a T put at revision t with a grant record of
// the same cluster and holder; and T is never deleted.
func CheckGrantsTombstoned(evs []GlobalEvent) []Violation {
	tombs := map[int64]GlobalEvent{}
	var vs []Violation
	for _, e := range evs {
		if e.Key != KeyTombstone {
			continue
		}
		if e.Deleted {
			vs = append(vs, Violation{Checker: "global-etcd", Detail: fmt.Sprintf("the tombstone was deleted at revision %d", e.Rev)})
			continue
		}
		tombs[e.Rev] = e
	}
	for _, e := range evs {
		tok, ok := e.Grant()
		if !ok {
			continue
		}
		t, ok := tombs[tok]
		switch {
		case !ok:
			vs = append(vs, Violation{Checker: "global-etcd", Detail: fmt.Sprintf("grant %d to %s/%s put no tombstone at its revision", tok, e.Cluster, e.Holder)})
		case t.Kind != "grant" || t.Cluster != e.Cluster || t.HolderUID != e.HolderUID:
			vs = append(vs, Violation{Checker: "global-etcd", Detail: fmt.Sprintf("grant %d to %s/%s put a tombstone of kind %q for %s/%s", tok, e.Cluster, e.Holder, t.Kind, t.Cluster, t.Holder)})
		}
	}
	return vs
}

// CheckClaimsGranted checks each cluster's published claims against the shared etcd: a
// status that names a holder (globalHolderUID) for token t in cluster c shows a grant that
// etcd made, at revision t, to that cluster and that pod.
func CheckClaimsGranted(evs []GlobalEvent, clusters ...[]GlobalObs) []Violation {
	grants := map[int64]GlobalEvent{}
	for _, e := range evs {
		if tok, ok := e.Grant(); ok {
			grants[tok] = e
		}
	}
	var vs []Violation
	for _, obs := range clusters {
		for _, t := range GlobalTerms(obs) {
			g, ok := grants[t.Token]
			switch {
			case !ok:
				vs = append(vs, Violation{Checker: "global-claims", Detail: fmt.Sprintf("%s claims token %d for %s (%s); the shared etcd made no grant at that revision", t.Cluster, t.Token, t.Holder, t.UID)})
			case g.Cluster != t.Cluster || g.HolderUID != t.UID:
				vs = append(vs, Violation{Checker: "global-claims", Detail: fmt.Sprintf("%s claims token %d for %s (%s); the shared etcd granted it to %s/%s (%s)", t.Cluster, t.Token, t.Holder, t.UID, g.Cluster, g.Holder, g.HolderUID)})
			}
		}
	}
	return vs
}
