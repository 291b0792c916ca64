// Package etcdtest starts real etcd servers for tests: a single embedded
// member, a 3-member embedded cluster whose members can be killed and
// restarted, a TCP fault proxy between a client and a member, and a gRPC gate
// that counts or stalls chosen etcd calls of one client.
//
// It imports go.etcd.io/etcd/server/v3/embed, which pulls in Kubernetes
// libraries; only tests may import it (pkg/ must not, see DESIGN.md).
// Everything listens on free loopback ports and stores its data in a
// t.TempDir(); everything it starts is stopped by t.Cleanup.
package etcdtest
