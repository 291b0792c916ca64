package controllers

import (
	"strings"
	"testing"
	"time"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// TestDecideGlobalCtlFix: the rows around the rev-ctl fixes beyond the review's own (a
// deleted lock's wait after K is gone; token regression), on TestDecideGlobal's base.
func TestDecideGlobalCtlFix(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(in *globalInput)
		want   globalVerb
		check  func(t *testing.T, s globalStep)
	}{
		{"deleted, own K lapsed, first seen gone 5 s ago: wait the rest of D = 12 s", func(in *globalInput) {
			lapsedOwn(in)
			in.deleting, in.mem.freeAt = true, ts(95)
		}, gIdle, func(t *testing.T, s globalStep) {
			if s.after != 7*time.Second {
				t.Errorf("after %v; want 7s (95 s + 12 s - 100 s)", s.after)
			}
		}},
		{"deleted, own K lapsed, the published delay 30 s above the lock's 12 s: wait 30 s", func(in *globalInput) {
			lapsedOwn(in)
			in.deleting, in.mem.freeAt, in.pub.delay = true, ts(85), 30
		}, gIdle, nil},
		{"deleted, T carries 40 s: wait 40 s", func(in *globalInput) {
			lapsedOwn(in)
			in.deleting, in.mem.freeAt, in.view.Tomb.DelaySeconds = true, ts(65), 40
		}, gIdle, nil},
		{"deleted, own K lapsed, first seen gone 12 s ago: drop the finalizer", func(in *globalInput) {
			lapsedOwn(in)
			in.deleting, in.mem.freeAt = true, ts(88)
		}, gDropFinalizer, nil},
		{"deleted, this process deleted an older token, T at a newer one: no early drop", func(in *globalInput) {
			lapsedOwn(in)
			in.deleting, in.mem.deletedToken = true, gTok-10
		}, gIdle, nil},
		{"deleted, T never written, no round ever published: drop at once", func(in *globalInput) {
			in.deleting, in.pub.round = true, 0
		}, gDropFinalizer, nil},
		{"deleted, T never written but rounds published (a replaced etcd): wait D", func(in *globalInput) {
			in.deleting, in.pub.round, in.pub.delay, in.mem.freeAt = true, 4, 12, ts(99.9)
		}, gIdle, nil},

		{"own K at token 800 below the published maxFencingToken 900: publish TokenRegression, no round", func(in *globalInput) {
			ownHeld(in)
			in.view.Token, in.view.TMod, in.pub.maxToken = 800, 800, gTok
		}, gPublishFree, func(t *testing.T, s globalStep) {
			wantReason(lockv1.ReasonTokenRegression)(t, s)
			if !strings.Contains(s.msg, "800") || !strings.Contains(s.msg, "900") {
				t.Errorf("message %q; want both tokens named", s.msg)
			}
		}},
		{"regression already published: nothing, no grant", func(in *globalInput) {
			in.pub = publishedTerm{phase: lockv1.PhasePending, maxToken: 900, heldReason: lockv1.ReasonTokenRegression}
		}, gIdle, wantReason(lockv1.ReasonTokenRegression)},
		{"K absent, revision 40 at the published maximum 40: a first grant (its token is above 40), once the lock delay passed since the grant was seen free (T unwritten under a published term)", func(in *globalInput) {
			in.pub.maxToken = 40
			in.mem.freeAt = ts(50)
		}, gGrant, nil},
		{"own K with the published token, maxFencingToken higher than it: rounds go on", func(in *globalInput) {
			ownHeld(in)
			in.pub.maxToken = gTok + 50
		}, gIdle, func(t *testing.T, s globalStep) {
			if s.reason == lockv1.ReasonTokenRegression {
				t.Errorf("the published term itself is no regression: %s", s.why)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := baseGlobal()
			if tt.mutate != nil {
				tt.mutate(&in)
			}
			s := decideGlobal(in)
			if s.verb != tt.want {
				t.Fatalf("decideGlobal = %v (%s); want %v", s.verb, s.why, tt.want)
			}
			if tt.check != nil {
				tt.check(t, s)
			}
		})
	}
}
