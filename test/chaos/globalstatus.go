package chaos

import (
	"fmt"
	"sort"
)

// GlobalObs is one observed version of a scope Global lock's status in one cluster, in that
// cluster's resourceVersion order (the global contract's fields; docs/global.md "Status").
type GlobalObs struct {
	Cluster string `json:"cluster"` // whose API server it was read from
	RV      uint64 `json:"rv"`
	Phase   string `json:"phase"`
	Holder  string `json:"holder,omitempty"`
	// HolderUID is status.holderUID, which a Global lock never sets (F5: an older pod-side
	// library must never lead a global term).
	HolderUID       string `json:"holderUID,omitempty"`
	GlobalCluster   string `json:"globalCluster,omitempty"`
	GlobalHolderUID string `json:"globalHolderUID,omitempty"`
	Round           int64  `json:"round,omitempty"`
	GlobalToken     int64  `json:"globalToken,omitempty"`
	Delay           int32  `json:"delay,omitempty"` // status.globalLockDelaySeconds
	Token           int64  `json:"token"`           // status.fencingToken
	MaxToken        int64  `json:"maxToken"`
	// Mono is when the harness saw it (CLOCK_MONOTONIC ns).
	Mono int64 `json:"mono"`
}

// claim is the term the observation says its own cluster holds: the holder pod's UID and the
// grant's token; ok false when it claims none.
func (o GlobalObs) claim() (uid string, token int64, ok bool) {
	if o.GlobalHolderUID == "" {
		return "", 0, false
	}
	token = o.Token
	if token == 0 {
		token = o.GlobalToken
	}
	return o.GlobalHolderUID, token, true
}

// CheckGlobalTokens checks one cluster's observed statuses of its Global lock: tokens only
// grow (fencingToken, maxFencingToken, globalToken, and every new grant this cluster claims
// is above the previous claim), the round never goes back, globalToken changes only with a
// round step and globalLockDelaySeconds only with globalToken (the CRD rules, as the harness
// sees them: a skipped version makes a step larger, never zero), holderUID stays empty, and
// globalHolderUID is set only while globalCluster names this cluster.
func CheckGlobalTokens(obs []GlobalObs) []Violation {
	var vs []Violation
	bad := func(o GlobalObs, format string, args ...any) {
		vs = append(vs, Violation{Checker: "global-tokens", Detail: fmt.Sprintf("%s rv %d: ", o.Cluster, o.RV) + fmt.Sprintf(format, args...)})
	}
	var prev GlobalObs
	var highest int64 // the highest non-zero fencingToken seen
	var last struct {
		uid   string
		token int64
	}
	for i, o := range obs {
		if i > 0 {
			if o.RV <= prev.RV {
				bad(o, "after rv %d: observations out of order", prev.RV)
			}
			if o.MaxToken < prev.MaxToken {
				bad(o, "maxFencingToken went back from %d to %d", prev.MaxToken, o.MaxToken)
			}
			if o.Round < prev.Round {
				bad(o, "globalRound went back from %d to %d", prev.Round, o.Round)
			}
			if o.GlobalToken != prev.GlobalToken {
				if o.GlobalToken < prev.GlobalToken {
					bad(o, "globalToken went back from %d to %d", prev.GlobalToken, o.GlobalToken)
				}
				if o.Round <= prev.Round {
					bad(o, "globalToken changed from %d to %d without a round step (round %d, before %d)", prev.GlobalToken, o.GlobalToken, o.Round, prev.Round)
				}
			} else if o.Delay != prev.Delay {
				bad(o, "globalLockDelaySeconds changed from %d to %d with globalToken %d unchanged", prev.Delay, o.Delay, o.GlobalToken)
			}
		}
		if o.Token != 0 {
			if o.Token < highest {
				bad(o, "fencingToken went back from %d to %d", highest, o.Token)
			}
			highest = max(highest, o.Token)
		}
		if o.Token > o.MaxToken {
			bad(o, "fencingToken %d above maxFencingToken %d", o.Token, o.MaxToken)
		}
		if o.HolderUID != "" {
			bad(o, "holderUID %s set on a Global lock", o.HolderUID)
		}
		if uid, tok, ok := o.claim(); ok {
			if o.GlobalCluster != o.Cluster {
				bad(o, "globalHolderUID %s set while globalCluster is %q", uid, o.GlobalCluster)
			}
			if uid != last.uid || tok != last.token {
				switch {
				case tok < last.token:
					bad(o, "grant of token %d to %s after a grant of token %d", tok, uid, last.token)
				case tok == last.token:
					bad(o, "token %d granted to %s and before to another pod (%s)", tok, uid, last.uid)
				}
				last.uid, last.token = uid, tok
			}
		}
		prev = o
	}
	return vs
}

// CheckGlobalClaims checks the clusters' statuses against each other: no token is claimed
// (globalHolderUID set) by two clusters.
func CheckGlobalClaims(clusters ...[]GlobalObs) []Violation {
	type claimant struct {
		cluster string
		rv      uint64
	}
	first := map[int64]claimant{}
	reported := map[int64]bool{}
	var vs []Violation
	for _, obs := range clusters {
		for _, o := range obs {
			_, tok, ok := o.claim()
			if !ok || tok == 0 {
				continue
			}
			c, seen := first[tok]
			switch {
			case !seen:
				first[tok] = claimant{o.Cluster, o.RV}
			case c.cluster != o.Cluster && !reported[tok]:
				reported[tok] = true
				vs = append(vs, Violation{Checker: "global-claims", Detail: fmt.Sprintf("token %d claimed by %s (rv %d) and by %s (rv %d)", tok, c.cluster, c.rv, o.Cluster, o.RV)})
			}
		}
	}
	sort.Slice(vs, func(i, j int) bool { return vs[i].Detail < vs[j].Detail })
	return vs
}

// GlobalTerms lists the terms one cluster's statuses claim, in order: (token, holder UID,
// when first seen), for the run's timeline and report.
func GlobalTerms(obs []GlobalObs) []GlobalTerm {
	var out []GlobalTerm
	for _, o := range obs {
		uid, tok, ok := o.claim()
		if !ok {
			continue
		}
		if n := len(out); n > 0 && out[n-1].Token == tok && out[n-1].UID == uid {
			continue
		}
		out = append(out, GlobalTerm{Cluster: o.Cluster, Token: tok, UID: uid, Holder: o.Holder, Seen: o.Mono})
	}
	return out
}

// GlobalTerm is one term a cluster's status claimed.
type GlobalTerm struct {
	Cluster string `json:"cluster"`
	Token   int64  `json:"token"`
	UID     string `json:"uid"`
	Holder  string `json:"holder,omitempty"`
	Seen    int64  `json:"seen"` // CLOCK_MONOTONIC ns of the first observation
}
