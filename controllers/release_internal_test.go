package controllers

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

func TestReadReleases(t *testing.T) {
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		want        releases
		wantErr     bool
	}{
		{name: "none", annotations: nil},
		{name: "holder release", annotations: map[string]string{lockv1.AnnotationHolderRelease: "uid-a-0/100"},
			want: releases{holderUID: "uid-a-0", holderToken: 100}},
		{name: "malformed holder release is no release", annotations: map[string]string{lockv1.AnnotationHolderRelease: "uid-a-0"}},
		{name: "request with reason", annotations: map[string]string{lockv1.AnnotationReleaseRequest: "100", lockv1.AnnotationReleaseReason: " drain node-3 "},
			want: releases{request: 100, requestRaw: "100", reason: "drain node-3"}},
		{name: "malformed request", annotations: map[string]string{lockv1.AnnotationReleaseRequest: "latest"},
			want: releases{requestRaw: "latest"}, wantErr: true},
		{name: "a reason alone asks nothing", annotations: map[string]string{lockv1.AnnotationReleaseReason: "drain"}},
	} {
		got := readReleases(tc.annotations)
		if (got.requestErr != nil) != tc.wantErr {
			t.Errorf("%s: readReleases error = %v, want error %v", tc.name, got.requestErr, tc.wantErr)
		}
		got.requestErr = nil
		if got != tc.want {
			t.Errorf("%s: readReleases = %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestRequestIgnored(t *testing.T) {
	ended := metav1.NewTime(time.Unix(1000, 0))
	for _, tc := range []struct {
		name  string
		scene *scene
		want  string // a substring of the reason; "" for not ignored
	}{
		{"no request", newScene(), ""},
		{"request for the current term", newScene().request(tok), ""},
		{"request for the current term while Releasing", newScene().releasing(time.Second).request(tok), ""},
		{"request for an older token", newScene().request(tok - 1), "token 99 ignored: the current term is a-0's, token 100"},
		{"request with no term open", newScene().noHolderPublished().request(tok + 1), "token 101 ignored: no term is open"},
		{"request served in an earlier term", newScene().request(tok - 7).do(func(in *input) {
			in.status.History = append(in.status.History, lockv1.Term{Holder: "a-1", Token: tok - 7, Ended: &ended, Reason: lockv1.ReasonOperatorRelease})
		}), ""},
		{"request whose Releasing the holder's own release ended", newScene().request(tok - 7).do(func(in *input) {
			in.release.reason = "drain node-3"
			in.status.History = append(in.status.History, lockv1.Term{Holder: "a-1", Token: tok - 7, Ended: &ended, Reason: lockv1.ReasonHolderReleased, Message: "drain node-3"})
		}), ""},
		{"request for a term that ended otherwise", newScene().request(tok - 7).do(func(in *input) {
			in.status.History = append(in.status.History, lockv1.Term{Holder: "a-1", Token: tok - 7, Ended: &ended, Reason: lockv1.ReasonHolderGone})
		}), "token 93 ignored"},
		{"malformed request", newScene().do(func(in *input) { in.release = readReleases(map[string]string{lockv1.AnnotationReleaseRequest: "-1"}) }),
			"release request ignored: invalid release annotation"},
	} {
		got := requestIgnored(&tc.scene.in)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: requestIgnored = %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestRequestWarnedOnce: an ignored request value is reported once per lock incarnation.
func TestRequestWarnedOnce(t *testing.T) {
	m := newMemory()
	if m.requestWarned("ns/l", "u1", "99") {
		t.Fatal("requestWarned before any warning = true, want false")
	}
	m.requestWarnedNow("ns/l", "u1", "99")
	for _, tc := range []struct {
		uid  string
		raw  string
		want bool
	}{{"u1", "99", true}, {"u1", "98", false}, {"u2", "99", false}} {
		if got := m.requestWarned("ns/l", types.UID(tc.uid), tc.raw); got != tc.want {
			t.Errorf("requestWarned(%s, %s) = %v, want %v", tc.uid, tc.raw, got, tc.want)
		}
	}
}

// TestReleaseAnnotationIsReconciled: the watch predicate that drops the event of this
// replica's own write keeps the event of a release annotation written by someone else (the
// holder's patch has its own resourceVersion), even when nothing else changed.
func TestReleaseAnnotationIsReconciled(t *testing.T) {
	r := &Reconciler{}
	r.init()
	own := &lockv1.DistributedLock{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "l", UID: "u1", ResourceVersion: "5"}}
	r.mem.wrote(lockKey("ns", "l"), own.UID, own.ResourceVersion)
	released := own.DeepCopy()
	released.ResourceVersion = "6"
	released.Annotations = map[string]string{lockv1.AnnotationHolderRelease: "uid-a-0/100"}
	for _, tc := range []struct {
		name string
		obj  *lockv1.DistributedLock
		want bool
	}{
		{"own status write", own, false},
		{"holder's release patch", released, true},
	} {
		if got := r.notOwnWrite(event.TypedUpdateEvent[*lockv1.DistributedLock]{ObjectOld: own, ObjectNew: tc.obj}); got != tc.want {
			t.Errorf("%s: notOwnWrite = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestPreferredReturns: an operator's release of the preferred holder says in its Event that
// the lock comes back to that pod; of any other holder, or with another strategy, nothing.
func TestPreferredReturns(t *testing.T) {
	for _, tc := range []struct {
		name     string
		strategy lockv1.Strategy
		pref     string
		holder   string
		want     bool
	}{
		{"preferred holder", lockv1.StrategyPreferred, "web-0", "web-0", true},
		{"another pod preferred", lockv1.StrategyPreferred, "web-1", "web-0", false},
		{"OldestReady", lockv1.StrategyOldestReady, "", "web-0", false},
	} {
		got := preferredReturns(&lockv1.DistributedLockSpec{Strategy: tc.strategy, PreferredHolder: tc.pref}, tc.holder)
		if tc.want != strings.Contains(got, "the lock returns to "+tc.holder) {
			t.Errorf("%s: preferredReturns = %q, want a note: %v", tc.name, got, tc.want)
		}
	}
}
