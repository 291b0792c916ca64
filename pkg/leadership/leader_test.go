package leadership_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/pkg/leadership"
)

// TestGetLeader follows GetLeader, GetLeaderUID and IsLeader through another pod's grant,
// this pod's grant, Releasing and the lock's deletion, while another goroutine reads them all
// the time (the race detector checks that reads from any goroutine are safe).
func TestGetLeader(t *testing.T) {
	h := newHarness(t, 30)
	el, err := leadership.New(h.config("pod-a", "uid-a"))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if got, uid := el.GetLeader(), el.GetLeaderUID(); got != "" || uid != "" || el.IsLeader() {
		t.Errorf("before Run: GetLeader() = %q, GetLeaderUID() = %q, IsLeader() = %v; want empty, empty, false", got, uid, el.IsLeader())
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			_, _, _ = el.GetLeader(), el.GetLeaderUID(), el.IsLeader()
			time.Sleep(time.Millisecond)
		}
	})
	defer wg.Wait()
	defer close(stop)
	r := startRun(t, h, el.Run)
	h.waitReads(t, 1)

	waitLeader := func(name string, uid types.UID, leader bool) {
		t.Helper()
		eventually(t, 10*time.Second, func() bool {
			return el.GetLeader() == name && el.GetLeaderUID() == uid && el.IsLeader() == leader && el.IsLeader() == el.Valid()
		}, func() string {
			return fmt.Sprintf("GetLeader() = %q, GetLeaderUID() = %q, IsLeader() = %v; want %q, %q, %v",
				el.GetLeader(), el.GetLeaderUID(), el.IsLeader(), name, uid, leader)
		})
	}
	waitLeader("", "", false) // a lock without status
	setStatus(t, h.key, held("pod-b", "uid-b", 10, 30))
	waitLeader("pod-b", "uid-b", false)
	setStatus(t, h.key, held("pod-a", "uid-a", 11, 30))
	waitLeader("pod-a", "uid-a", true)
	setStatus(t, h.key, releasing)
	waitLeader("", "", false)
	setStatus(t, h.key, held("pod-c", "uid-c", 12, 30))
	waitLeader("pod-c", "uid-c", false)
	lock := &lockv1.DistributedLock{ObjectMeta: metav1.ObjectMeta{Namespace: h.key.Namespace, Name: h.key.Name}}
	if err := k8s.Delete(t.Context(), lock); err != nil {
		t.Fatalf("delete lock: %v", err)
	}
	waitLeader("", "", false)
	if r.returned() {
		t.Errorf("Run returned before its context ended")
	}
}
