package lease_test

import (
	"testing"
	"time"

	"github.com/lockwarden/lockwarden/pkg/lease"
)

// TestGlobalRecordLeaseSeconds: a grant's record carries the TTL it was granted with (the
// holder's round cadence follows it, not a lease duration changed later); a record without
// it, as an older manager wrote, still reads, with 0.
func TestGlobalRecordLeaseSeconds(t *testing.T) {
	e := newGlobalEnv(t)
	rec := record("east", "p", 30)
	rec.LeaseSeconds = 5
	e.first(t, "with", rec, 5*time.Second)
	v := e.observe(t, "with")
	if v.Grant.LeaseSeconds != 5 || v.Tomb.LeaseSeconds != 5 {
		t.Fatalf("K's record lease %d s, T's %d s, want 5 and 5", v.Grant.LeaseSeconds, v.Tomb.LeaseSeconds)
	}
	old := record("east", "p", 30)
	if _, err := e.cli.Put(ctx(t), e.g.TombstonePath("old"), `{"kind":"grant","cluster":{"name":"east","uid":"uid-east"},"object":"obj-east","holder":"p","holderUID":"pod-uid-p","delaySeconds":30}`); err != nil {
		t.Fatal(err)
	}
	v = e.observe(t, "old")
	old.Kind = lease.RecordGrant
	if v.Tomb != old {
		t.Fatalf("T's record without leaseSeconds reads %+v, want %+v", v.Tomb, old)
	}
	if _, err := e.cli.Put(ctx(t), e.g.TombstonePath("neg"), `{"kind":"grant","cluster":{"name":"east","uid":"uid-east"},"object":"obj-east","holder":"p","holderUID":"pod-uid-p","delaySeconds":30,"leaseSeconds":-1}`); err != nil {
		t.Fatal(err)
	}
	if _, err := e.g.Observe(ctx(t), "neg"); err == nil {
		t.Fatal("Observe of a record with lease -1 s = nil error, want one naming it")
	}
}
