package lease

import (
	"context"
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockwarden/lockwarden/pkg/clock"
)

// RecordKind says what wrote a GlobalRecord.
type RecordKind string

// The kinds of GlobalRecord.
const (
	// RecordGrant is a grant's record: K's value, and T's from the same transaction.
	RecordGrant RecordKind = "grant"
	// RecordWaiting is a waiting manager's record in T (docs/global.md, R7.2).
	RecordWaiting RecordKind = "waiting"
)

// GlobalRecord is the JSON value of K and of T. The engine stores what the caller gives and
// checks only that it is complete; what the fields mean (R6's carried delay, F2's object UID)
// is the caller's rule.
type GlobalRecord struct {
	// Kind is RecordGrant or RecordWaiting; Grant and Wait set it.
	Kind RecordKind `json:"kind"`
	// Cluster is the registered identity of the cluster that wrote the record.
	Cluster ClusterID `json:"cluster"`
	// Object is the UID of the DistributedLock the record is for.
	Object string `json:"object"`
	// Holder and HolderUID name the pod granted (K, and a grant's T); empty in a waiting record.
	Holder    string `json:"holder,omitempty"`
	HolderUID string `json:"holderUID,omitempty"`
	// DelaySeconds is the delay the record carries (R6, R7.1), positive.
	DelaySeconds int32 `json:"delaySeconds"`
	// LeaseSeconds is G, the TTL of the lease a grant's K was put on, in seconds (Grant
	// checks it against the TTL): the holder's round cadence P0 = G/3 and its keepalives follow the grant, not a
	// lease duration changed later. 0 in a waiting record and in a grant's record written
	// before the field existed (the caller then falls back to what it published).
	LeaseSeconds int32 `json:"leaseSeconds,omitempty"`
}

// GlobalView is one linearizable read of K and T at one revision (one Txn with two Gets).
type GlobalView struct {
	// Name is the global name read, and Prefix the global prefix it was read under: Wait
	// refuses a basis of another name or prefix (review rev-eng).
	Name, Prefix string
	// Rev is the header revision of the read: the state shown existed at Rev.
	Rev int64
	// ReceivedAt is clock.Now() taken right after the answer arrived, never before (L5):
	// only the reception is known to come after the state at Rev existed.
	ReceivedAt clock.Instant
	// Held is true when K exists.
	Held bool
	// Token is K's CreateRevision (0 when absent); Lease is K's lease.
	Token int64
	Lease clientv3.LeaseID
	// Grant is K's record (zero when absent).
	Grant GlobalRecord
	// TCreate is T's CreateRevision (0: T was never written), TMod its ModRevision.
	TCreate int64
	TMod    int64
	// Tomb is T's record (zero when absent).
	Tomb GlobalRecord
}

// Observe reads K and T of the global name in ONE transaction, so at one revision, and
// linearizably. A record that does not parse, or whose kind is neither grant nor waiting, is
// an error naming its key: never a zero record.
func (g *Global) Observe(ctx context.Context, name string) (GlobalView, error) {
	v, err := g.observe(ctx, name)
	if err != nil {
		return GlobalView{}, globalErr("observe", name, err)
	}
	return v, nil
}

func (g *Global) observe(ctx context.Context, name string) (GlobalView, error) {
	if err := validateGlobalName("global name", name); err != nil {
		return GlobalView{}, err
	}
	kPath, tPath := g.GrantPath(name), g.TombstonePath(name)
	resp, err := g.cli.Txn(ctx).Then(clientv3.OpGet(kPath), clientv3.OpGet(tPath)).Commit()
	received := now()
	if err != nil {
		return GlobalView{}, err
	}
	v := GlobalView{Name: name, Prefix: g.prefix, Rev: resp.Header.Revision, ReceivedAt: received}
	if k := onlyKV(resp.Responses[0].GetResponseRange().Kvs); k != nil {
		if v.Grant, err = decodeGlobalRecord(kPath, k.Value); err != nil {
			return GlobalView{}, err
		}
		if v.Grant.Kind != RecordGrant {
			return GlobalView{}, fmt.Errorf("record of %s has kind %q: a grant key holds a %q record only", kPath, v.Grant.Kind, RecordGrant)
		}
		v.Held, v.Token, v.Lease = true, k.CreateRevision, clientv3.LeaseID(k.Lease)
	}
	if t := onlyKV(resp.Responses[1].GetResponseRange().Kvs); t != nil {
		if v.Tomb, err = decodeGlobalRecord(tPath, t.Value); err != nil {
			return GlobalView{}, err
		}
		v.TCreate, v.TMod = t.CreateRevision, t.ModRevision
	}
	return v, nil
}

// onlyKV returns the one key a Get of one key found, or nil.
func onlyKV(kvs []*mvccpb.KeyValue) *mvccpb.KeyValue {
	if len(kvs) == 1 {
		return kvs[0]
	}
	return nil
}

// decodeGlobalRecord parses the record stored under key, and checks it as a write is
// checked: a record written by another version or by hand that lacks its delay, cluster or
// object is an error, never a record that reads as a zero delay (review rev-eng).
func decodeGlobalRecord(key string, b []byte) (GlobalRecord, error) {
	var r GlobalRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return GlobalRecord{}, fmt.Errorf("record of %s does not parse: %w", key, err)
	}
	if r.Kind != RecordGrant && r.Kind != RecordWaiting {
		return GlobalRecord{}, fmt.Errorf("record of %s has kind %q, want %q or %q", key, r.Kind, RecordGrant, RecordWaiting)
	}
	if err := r.validate(); err != nil {
		return GlobalRecord{}, fmt.Errorf("record of %s is incomplete: %w", key, err)
	}
	return r, nil
}

// encode returns the stored form of r.
func (r GlobalRecord) encode() string {
	b, err := json.Marshal(r)
	if err != nil {
		// Strings and an integer only: Marshal cannot fail.
		panic("lease: encode global record: " + err.Error())
	}
	return string(b)
}

// validate checks a record the caller asks to write, once its kind is set.
func (r GlobalRecord) validate() error {
	if err := validateClusterID(r.Cluster); err != nil {
		return fmt.Errorf("record: %w", err)
	}
	if r.Object == "" {
		return invalidf("record has no object UID")
	}
	if r.Kind == RecordGrant && (r.Holder == "" || r.HolderUID == "") {
		return invalidf("grant record has holder %q with UID %q: want both", r.Holder, r.HolderUID)
	}
	for _, s := range []string{r.Object, r.Holder, r.HolderUID} {
		if !utf8.ValidString(s) {
			return invalidf("record field %q is not valid UTF-8", s)
		}
	}
	if r.DelaySeconds <= 0 {
		return invalidf("record carries delay %d s: want a positive delay", r.DelaySeconds)
	}
	if r.LeaseSeconds < 0 {
		return invalidf("record carries lease %d s: want a positive lease, or none", r.LeaseSeconds)
	}
	return nil
}
