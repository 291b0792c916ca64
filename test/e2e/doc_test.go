//go:build e2e

// Package e2e runs lockwarden on a real single-node Kubernetes (hack/node: kubelet,
// containerd, runc, kube-scheduler, kube-controller-manager, kube-apiserver) and checks the
// deploy path and the term-ending rules on real pods. It needs root and Linux and is built
// only with -tags e2e (`make e2e`), so `go test ./...` never runs it. See docs/e2e.md.
//
// The node lives in its own network and mount namespace. The test process stays outside:
// it reaches the node's API server, etcd and ledger through sockets opened inside the
// node's network namespace (netns_test.go), and runs kubectl and ctr through hack/node's
// wrappers.
package e2e
