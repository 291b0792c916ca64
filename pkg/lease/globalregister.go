package lease

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// registerAttempts bounds how often Register sends its transaction: only a registration
// that changes between two of them (a cluster registering at the same moment, a key deleted
// by hand) needs another.
const registerAttempts = 3

// ClusterID is a cluster's identity in global records. Name is its --cluster-name, for
// display and for the registration key; UID is the kube-system namespace's UID, which two
// clusters cannot share (docs/global.md, finding F3). Records are compared by UID.
type ClusterID struct {
	Name string `json:"name"`
	UID  string `json:"uid"`
}

// registration is the value of a cluster's registration key and of its engine prefix's key.
type registration struct {
	Name         string `json:"name"`
	UID          string `json:"uid"`
	EnginePrefix string `json:"enginePrefix"`
}

// Register records the cluster's name with its UID and the prefix of the engine whose
// election fences its manager, create-only: G/clusters/<name>, G/engines/<prefix> and
// G/uids/<uid> are put in one transaction comparing them absent, without a lease, and are
// never overwritten (a key found missing beside the others, deleted by hand, is put back).
// Registering again with the same name, UID and engine prefix succeeds and writes nothing.
//
// Errors wrap ErrClusterNameTaken, naming both sides, when the name is registered under
// another UID or with another engine prefix (a second manager of one cluster on another
// election), when another cluster registered the engine prefix (two clusters on one
// engine prefix would share one election), or when the UID is registered under another
// name (one cluster under two names would contend as two). Renaming a cluster or moving
// its engine prefix means deleting its registration keys by hand, once its manager is
// stopped and no global lock is held by it. ErrInvalid for a bad name, an empty UID, or an
// engine prefix that is empty, ends in "/", or overlaps the global prefix (the engine's
// tombstones carry leases: finding F4).
func (g *Global) Register(ctx context.Context, id ClusterID, enginePrefix string) error {
	if err := g.register(ctx, id, enginePrefix); err != nil {
		return fmt.Errorf("register cluster %s: %w", id.Name, err)
	}
	return nil
}

func (g *Global) register(ctx context.Context, id ClusterID, enginePrefix string) error {
	if err := validateClusterID(id); err != nil {
		return err
	}
	if err := g.validateEnginePrefix(enginePrefix); err != nil {
		return err
	}
	want := registration{Name: id.Name, UID: id.UID, EnginePrefix: enginePrefix}
	b, err := json.Marshal(want)
	if err != nil {
		return fmt.Errorf("encode registration: %w", err) // strings only: cannot happen
	}
	keys := []string{g.ClusterPath(id.Name), g.enginePath(enginePrefix), g.uidPath(id.UID)}
	found := make([]*mvccpb.KeyValue, len(keys)) // nil: believed absent
	for attempt := 1; ; attempt++ {
		if err := checkRegistration(want, keys, found); err != nil {
			return err
		}
		var cmps []clientv3.Cmp
		var puts, gets []clientv3.Op
		for i, k := range keys {
			gets = append(gets, clientv3.OpGet(k))
			if found[i] != nil {
				cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(k), "=", found[i].ModRevision))
				continue
			}
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(k), "=", 0))
			puts = append(puts, clientv3.OpPut(k, string(b)))
		}
		if len(puts) == 0 {
			return nil // registered already, as wanted
		}
		resp, err := g.cli.Txn(ctx).If(cmps...).Then(puts...).Else(gets...).Commit()
		if err != nil {
			return writeErr(err)
		}
		if resp.Succeeded {
			return nil
		}
		if attempt == registerAttempts {
			return fmt.Errorf("registration keys %s changed during %d attempts", strings.Join(keys, ", "), attempt)
		}
		for i, r := range resp.Responses {
			found[i] = nil
			if kvs := r.GetResponseRange().Kvs; len(kvs) == 1 {
				found[i] = kvs[0]
			}
		}
	}
}

// checkRegistration refuses the registration want when a key found says another cluster
// holds the name or the engine prefix.
func checkRegistration(want registration, keys []string, found []*mvccpb.KeyValue) error {
	for i, kv := range found {
		if kv == nil {
			continue
		}
		var got registration
		if err := json.Unmarshal(kv.Value, &got); err != nil {
			return fmt.Errorf("registration %s does not parse: %w", keys[i], err)
		}
		// keys[0] is the name's key, keys[1] the engine prefix's, keys[2] the UID's.
		switch {
		case i == 0 && got.UID != want.UID:
			return fmt.Errorf("%w: %q is registered by cluster UID %q, not %q (%s)", ErrClusterNameTaken, want.Name, got.UID, want.UID, keys[i])
		case i == 0 && got.EnginePrefix != want.EnginePrefix:
			return fmt.Errorf("%w: %q (UID %q) is registered with engine prefix %q, not %q (%s)",
				ErrClusterNameTaken, want.Name, want.UID, got.EnginePrefix, want.EnginePrefix, keys[i])
		case i == 1 && (got.UID != want.UID || got.Name != want.Name):
			return fmt.Errorf("%w: engine prefix %q is registered by cluster %q (UID %q), not %q (UID %q) (%s)",
				ErrClusterNameTaken, want.EnginePrefix, got.Name, got.UID, want.Name, want.UID, keys[i])
		case i == 2 && got != want:
			return fmt.Errorf("%w: cluster UID %q is registered as %q with engine prefix %q, not %q with %q (%s)",
				ErrClusterNameTaken, want.UID, got.Name, got.EnginePrefix, want.Name, want.EnginePrefix, keys[i])
		}
	}
	return nil
}

// validateClusterID checks a cluster identity, as Register takes it and records carry it.
func validateClusterID(id ClusterID) error {
	if err := validateGlobalName("cluster name", id.Name); err != nil {
		return err
	}
	if id.UID == "" || !utf8.ValidString(id.UID) {
		return invalidf("cluster %q has UID %q: want a non-empty UTF-8 string", id.Name, id.UID)
	}
	return nil
}

// validateEnginePrefix checks a registered engine prefix: an Engine's valid prefix (WithPrefix)
// whose keys lie apart from the global keys.
func (g *Global) validateEnginePrefix(p string) error {
	if p == "" || strings.HasSuffix(p, "/") {
		return invalidf("engine prefix %q must be non-empty and must not end in /", p)
	}
	if strings.HasPrefix(p+"/", g.prefix+"/") || strings.HasPrefix(g.prefix+"/", p+"/") {
		return invalidf("engine prefix %q overlaps the global prefix %q", p, g.prefix)
	}
	return nil
}
