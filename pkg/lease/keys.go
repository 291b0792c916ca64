package lease

import (
	"context"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// LockKeys returns the names of the locks whose name starts with prefix that have a lock
// key now, read linearizably in one range read (keys only). It reports the lock keys alone:
// not queue entries or tombstones. A controller uses it to find every key of a lock made of
// several keys (a lock's slots) without reading each one.
func (e *Engine) LockKeys(ctx context.Context, prefix string) ([]string, error) {
	if e.err != nil {
		return nil, e.err
	}
	if prefix == "" || strings.HasPrefix(prefix, "/") {
		return nil, invalidf("lock name prefix %q is empty or starts with /", prefix)
	}
	dir := e.Path("")
	resp, err := e.cli.Get(ctx, dir+prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, fmt.Errorf("list lock keys under %s: %w", prefix, err)
	}
	keys := make([]string, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		keys = append(keys, strings.TrimPrefix(string(kv.Key), dir))
	}
	return keys, nil
}
