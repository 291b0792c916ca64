package lease

import (
	"fmt"
	"net/url"
	"strings"
	"unicode/utf8"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// DefaultGlobalPrefix is the etcd key prefix of the global locks' keys in the shared etcd.
// It must stay apart from every Engine's prefix: an Engine's P/tombstones/ keys carry a
// lease, and a global tombstone on that path would expire (docs/global.md, finding F4).
const DefaultGlobalPrefix = "/lockwarden-global"

// Global is the shared-etcd side of global locks (docs/global.md): one grant key K per global
// name, whose CreateRevision is the fencing token, beside a tombstone T that every grant and
// every waiting manager writes, and the registrations of the clusters that contend. Each call
// is one guarded transaction (or one read, or one keepalive); nothing is tracked, no goroutine
// is started, and the decisions (when to wait, grant, confirm, renew, delete) are the
// caller's. It is safe for concurrent use.
//
// Key layout under the prefix G, for the global name n and the cluster named c:
//
//	G/clusters/c           the registration {uid, enginePrefix}: no lease, create-only
//	G/engines/<escaped p>  the cluster registered with engine prefix p, and
//	G/uids/<escaped u>     the cluster registered with cluster UID u: the same
//	                       value as c's, no lease, create-only, written with it
//	G/grants/n             K: the grant's record, on its own lease (TTL G); its
//	                       CreateRevision is the token
//	G/tombstones/n         T: the last grant's or waiting manager's record; never
//	                       has a lease and is never deleted
type Global struct {
	cli    *clientv3.Client
	prefix string
}

// NewGlobal returns the global locks' side of the shared etcd behind cli, with keys under
// prefix (DefaultGlobalPrefix if ""). The prefix must not end in "/". The client's lifetime
// is the caller's.
func NewGlobal(cli *clientv3.Client, prefix string) (*Global, error) {
	if cli == nil {
		return nil, invalidf("nil etcd client")
	}
	if prefix == "" {
		prefix = DefaultGlobalPrefix
	}
	if strings.HasSuffix(prefix, "/") || !strings.HasPrefix(prefix, "/") {
		return nil, invalidf("global prefix %q must start with / and not end in /: every cluster must name the same keys", prefix)
	}
	return &Global{cli: cli, prefix: prefix}, nil
}

// Prefix returns the global key prefix.
func (g *Global) Prefix() string { return g.prefix }

// GrantPath returns K, the grant key of the global name.
func (g *Global) GrantPath(name string) string { return g.prefix + "/grants/" + name }

// TombstonePath returns T, the tombstone key of the global name.
func (g *Global) TombstonePath(name string) string { return g.prefix + "/tombstones/" + name }

// ClusterPath returns the registration key of the cluster named cluster.
func (g *Global) ClusterPath(cluster string) string { return g.prefix + "/clusters/" + cluster }

// uidPath is the key naming the cluster registered with the cluster UID uid (escaped).
func (g *Global) uidPath(uid string) string { return g.prefix + "/uids/" + url.PathEscape(uid) }

// enginePath is the key naming the cluster registered with the engine prefix p; p is escaped
// as the engine's queue paths are, so that it contains no "/".
func (g *Global) enginePath(p string) string { return g.prefix + "/engines/" + url.PathEscape(p) }

// validateGlobalName checks a global name or a cluster name (what says which): one non-empty,
// printable path segment, so that its keys cannot reach another name's or another kind's.
func validateGlobalName(what, name string) error {
	switch {
	case name == "":
		return invalidf("%s is empty", what)
	case len(name) > maxKeyLen:
		return invalidf("%s is %d bytes, longer than %d", what, len(name), maxKeyLen)
	case !utf8.ValidString(name):
		return invalidf("%s %q is not valid UTF-8", what, name)
	case strings.Contains(name, "/"):
		return invalidf("%s %q contains /", what, name)
	case name == "." || name == "..":
		return invalidf("%s %q is a path step", what, name)
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f {
			return invalidf("%s %q contains a control character", what, name)
		}
	}
	return nil
}

// validateGuard checks that the caller passed a guard compare: every global transaction
// carries one (the election's IsOwner), and a zero Cmp would compare the empty key.
func validateGuard(guard clientv3.Cmp) error {
	if len(guard.KeyBytes()) == 0 {
		return invalidf("guard compare is empty: every global transaction needs the caller's guard")
	}
	return nil
}

// validateToken checks a token argument.
func validateToken(token int64) error {
	if token <= 0 {
		return invalidf("token %d is not positive", token)
	}
	return nil
}

// globalErr wraps err with the operation and the global name.
func globalErr(op, name string, err error) error {
	return fmt.Errorf("%s global %s: %w", op, name, err)
}
