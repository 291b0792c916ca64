// Package global holds the two-cluster envtest tests of Global locks (no code of its own):
// TestGlobalTwoClusters (east and west control planes, each with a manager, sharing one etcd;
// a pod's view of both statuses checked by rule R5 at every poll) and TestReviewSysGlobal (the
// same two clusters with real pkg/leadership Electors behind proxies whose links are cut,
// paused or delayed). They wait out lock delays for minutes, so they are a package apart from
// controllers and `go test ./...` runs them beside it.
package global
