package etcdtest

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"google.golang.org/grpc"
)

// Cluster is an embedded etcd cluster whose members can be killed and
// restarted.
type Cluster struct {
	members []*member
	mu      sync.Mutex
	etcds   []*embed.Etcd   // nil while a member is down
	closing []chan struct{} // closed when a killed member has shut down
}

// StartCluster starts an n-member cluster for the test and waits until it has
// a leader; it is stopped at cleanup.
func StartCluster(t testing.TB, n int, opts ...Option) *Cluster {
	t.Helper()
	cfg := newConfig(opts)
	ports := FreePorts(t, 2*n)
	c := &Cluster{members: make([]*member, n), etcds: make([]*embed.Etcd, n), closing: make([]chan struct{}, n)}
	peers := make([]string, n)
	for i := range n {
		m := &member{name: fmt.Sprintf("m%d", i), dir: t.TempDir(), clientPort: ports[2*i], peerPort: ports[2*i+1], opts: cfg}
		c.members[i] = m
		peers[i] = fmt.Sprintf("%s=%s", m.name, m.peerURL())
	}
	for _, m := range c.members {
		m.cluster = strings.Join(peers, ",")
	}
	t.Cleanup(c.close)
	// Members of a new cluster wait for each other: start them together.
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, m := range c.members {
		wg.Go(func() { c.etcds[i], errs[i] = m.start() })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	c.Leader(t)
	return c
}

// Endpoints returns the client URLs of all members.
func (c *Cluster) Endpoints() []string {
	eps := make([]string, len(c.members))
	for i, m := range c.members {
		eps[i] = m.clientURL()
	}
	return eps
}

// Endpoint returns the client URL of member i.
func (c *Cluster) Endpoint(i int) string { return c.members[i].clientURL() }

// Client returns a client of all members, closed at cleanup.
func (c *Cluster) Client(t testing.TB, dialOpts ...grpc.DialOption) *clientv3.Client {
	t.Helper()
	return NewClient(t, c.Endpoints(), dialOpts...)
}

// Leader waits (up to 30 s) until the running members agree on a leader
// among them, and returns its index.
func (c *Cluster) Leader(t testing.TB) int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if i, ok := c.leader(); ok {
			return i
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("cluster: no leader after 30s")
	return -1
}

func (c *Cluster) leader() (int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	index := make(map[uint64]int)
	for i, e := range c.etcds {
		if e != nil {
			index[uint64(e.Server.MemberID())] = i
		}
	}
	lead := -1
	for _, e := range c.etcds {
		if e == nil {
			continue
		}
		j, ok := index[uint64(e.Server.Leader())]
		if !ok || (lead >= 0 && lead != j) {
			return -1, false // no leader, a stale one, or disagreement
		}
		lead = j
	}
	return lead, lead >= 0
}

// Kill stops member i abruptly: raft stops at once, without a leadership
// transfer, and the member refuses new connections and tells clients to go
// away. Its remaining streams are cut in the background (etcd waits up to
// its request timeout for them), which Restart and cleanup wait for.
func (c *Cluster) Kill(i int) {
	c.mu.Lock()
	e := c.etcds[i]
	c.etcds[i] = nil
	c.mu.Unlock()
	if e == nil {
		return
	}
	e.Server.HardStop()
	done := make(chan struct{})
	c.mu.Lock()
	c.closing[i] = done
	c.mu.Unlock()
	go func() {
		defer close(done)
		e.Close()
	}()
}

// Restart starts a killed member again with its data and ports.
func (c *Cluster) Restart(t testing.TB, i int) {
	t.Helper()
	c.mu.Lock()
	running, closing := c.etcds[i] != nil, c.closing[i]
	c.mu.Unlock()
	if running {
		t.Fatalf("restart member %d: running", i)
	}
	if closing != nil {
		<-closing
	}
	e, err := c.members[i].start()
	if err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	c.etcds[i], c.closing[i] = e, nil
	c.mu.Unlock()
}

func (c *Cluster) close() {
	for i := range c.members {
		c.Kill(i)
	}
	for i := range c.members {
		c.mu.Lock()
		closing := c.closing[i]
		c.mu.Unlock()
		if closing != nil {
			<-closing
		}
	}
}
