package main

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine running: the embedded etcd
// tests start and stop a whole etcd server in this process.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// klog's process-wide flush daemon, started by client-go's import
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*loggingT).flushDaemon"),
	)
}
