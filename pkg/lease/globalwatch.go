package lease

import (
	"context"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Watch watches the grant and tombstone keys of every global name with ONE etcd watch of
// the global prefix (from the current revision, WithRequireLeader) and calls changed(name)
// for each put or delete of a K or a T (registrations are not reported), until ctx ends;
// then it returns ctx's error. As WatchLocks does, it calls resync() each time a watch is
// confirmed by etcd (the first included) and after a watch fails or is compacted, then
// watches again after a short pause; the caller re-reads (Observe) on resync. changed and
// resync run in the caller's goroutine. A watch event is no basis for a decision: its age is
// unknown, so the caller Observes (docs/global.md, L5).
func (g *Global) Watch(ctx context.Context, changed func(name string), resync func()) error {
	if changed == nil || resync == nil {
		return fmt.Errorf("watch global locks: %w", invalidf("nil callback"))
	}
	grants, tombs := g.GrantPath(""), g.TombstonePath("")
	return watchLoop(ctx, g.cli, g.prefix+"/", func(_ string, ev *clientv3.Event) {
		k := string(ev.Kv.Key)
		switch {
		case strings.HasPrefix(k, grants):
			changed(strings.TrimPrefix(k, grants))
		case strings.HasPrefix(k, tombs):
			changed(strings.TrimPrefix(k, tombs))
		}
	}, resync)
}
