package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/internal/testenv"
)

// TestAgentSlots: on a lock of spec.slots 3 granted by the controller, exec's child gets its
// slot's token with LOCKWARDEN_SLOT, and the sidecar's /leader answers its slot's token with
// "slot", its token file the token and its slot file the slot. The oldest pod takes slot 0
// (OldestReady per free slot), so both agents lead a slot above 0.
func TestAgentSlots(t *testing.T) {
	f := newFixture(t)
	patch := []byte(`{"spec":{"slots":3}}`)
	if err := k8s.Patch(context.Background(), &lockv1.DistributedLock{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: f.lock}},
		client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatalf("set spec.slots: %v", err)
	}
	f.pod("worker-oldest")
	time.Sleep(1100 * time.Millisecond) // creation times a second apart: the oldest is known
	pe := f.pod("worker-exec")
	time.Sleep(1100 * time.Millisecond)
	ps := f.pod("worker-sidecar")

	ports, err := testenv.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	tokenFile, slotFile := filepath.Join(f.dir, "token"), filepath.Join(f.dir, "slot")
	ae := f.startAgent(pe, execArgs(t))
	as := f.startAgent(ps, []string{"sidecar", "--listen", base[len("http://"):], "--token-file", tokenFile, "--slot-file", slotFile})

	var l *lockv1.DistributedLock
	eventually(t, 30*time.Second, func() bool {
		l = f.get()
		return l.Status.SlotsHeld == "3/3"
	}, func() string { return fmt.Sprintf("slotsHeld %q, want 3/3", l.Status.SlotsHeld) })
	se, ss := l.Status.HeldSlot(pe.UID), l.Status.HeldSlot(ps.UID)
	if se <= 0 || ss <= 0 {
		t.Fatalf("exec's pod holds slot %d, the sidecar's %d: want both above 0 (the oldest pod in slot 0)", se, ss)
	}
	te, ts := l.Status.SlotView(se).FencingToken, l.Status.SlotView(ss).FencingToken

	eventually(t, 20*time.Second, func() bool {
		for _, r := range ae.started("start") {
			if r.token == te && r.slot == int(se) {
				return true
			}
		}
		return false
	}, func() string {
		return fmt.Sprintf("exec's child records %+v, want a start with token %d and LOCKWARDEN_SLOT %d; log:\n%s", ae.records(), te, se, ae.out)
	})

	var a answer
	eventually(t, 20*time.Second, func() bool {
		a, err = getLeader(t, base)
		return err == nil && a.status == http.StatusOK
	}, func() string { return fmt.Sprintf("/leader: %+v, %v; log:\n%s", a, err, as.out) })
	if a.reply.Token != ts || a.reply.Slot == nil || *a.reply.Slot != int(ss) {
		t.Errorf("/leader = %+v (slot %v), want token %d, slot %d", a.reply, a.reply.Slot, ts, ss)
	}
	if b, err := os.ReadFile(tokenFile); err != nil || string(b) != fmt.Sprintf("%d\n", ts) {
		t.Errorf("token file = %q, %v; want %q", b, err, fmt.Sprintf("%d\n", ts))
	}
	if b, err := os.ReadFile(slotFile); err != nil || string(b) != fmt.Sprintf("%d\n", ss) {
		t.Errorf("slot file = %q, %v; want %q", b, err, fmt.Sprintf("%d\n", ss))
	}
	as.cancel()
	if code := as.wait(t, 20*time.Second); code != exitOK {
		t.Errorf("sidecar exited %d, want %d", code, exitOK)
	}
	for _, path := range []string{tokenFile, slotFile} {
		if b, err := os.ReadFile(path); err != nil || len(b) != 0 {
			t.Errorf("%s after the sidecar exited = %q, %v; want empty", filepath.Base(path), b, err)
		}
	}
}
