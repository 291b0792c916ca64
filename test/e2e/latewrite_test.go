//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/examples/fenced-worker/ledger"
)

// heldWrites sits in front of the ledger and can hold one append from a chosen pod IP: the
// request is read whole (as a proxy or a closed socket's buffered data would carry it) and
// applied only when released, whatever happened to its sender meanwhile.
type heldWrites struct {
	led *ledger.Server
	mu  sync.Mutex
	ip  string        // hold the next append from this IP ("": hold nothing)
	req *ledger.Write // the held append, once held
	got chan struct{}
}

func newHeldWrites(led *ledger.Server) *heldWrites { return &heldWrites{led: led} }

// ServeHTTP passes everything to the ledger except the one append it was armed to hold.
func (h *heldWrites) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	host, _, _ := net.SplitHostPort(r.RemoteAddr)
	h.mu.Lock()
	hold := r.Method == http.MethodPost && r.URL.Path == "/append" && h.ip != "" && host == h.ip && h.req == nil
	h.mu.Unlock()
	if !hold {
		h.led.Handler().ServeHTTP(w, r)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	var req ledger.Write
	if err != nil || json.NewDecoder(bytes.NewReader(body)).Decode(&req) != nil {
		http.Error(w, "unreadable append", http.StatusBadRequest)
		return
	}
	h.mu.Lock()
	h.req = &req
	close(h.got)
	h.mu.Unlock()
	// The sender waits for an answer that never comes: it times out, or dies first.
	<-r.Context().Done()
}

// arm holds the next append from ip; held is closed once it arrived.
func (h *heldWrites) arm(ip string) (held <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ip, h.req, h.got = ip, nil, make(chan struct{})
	return h.got
}

// deliver applies the held append now, as a late arrival, and returns the ledger's reply.
func (h *heldWrites) deliver() (ledger.Write, ledger.Reply) {
	h.mu.Lock()
	req := *h.req
	h.ip = ""
	h.mu.Unlock()
	rep, _ := h.led.Apply("append", req)
	return req, rep
}

// scenarioLateWriteOfDeadProcess (issue 20 item 3): a write the holder's process sent just
// before it was killed arrives after the restarted process of the same pod tried to lead with
// the same token. The controller is stopped meanwhile (both manager replicas scaled to 0), so
// the lock still says Held with that token: exactly the window in which the restarted process
// reads Held before anything ends the term. Before writer IDs carried the process's
// incarnation, the ledger took both processes for one writer: it admitted the restarted
// process's fence and writes under the token, then the dead process's late write after them
// (a lost update under one term). Now at most one process writes under a token: here the
// dead one, which raised the fence first; the restarted process is refused and abandons the
// term.
func scenarioLateWriteOfDeadProcess(t *testing.T, c *cluster, r *e2eReport) {
	l := c.steady(t)
	holder, uid, tok := l.Status.Holder, string(l.Status.HolderUID), l.Status.FencingToken
	pod := c.getPod(t, workerNS, holder)
	// Stop the controller first: nothing may end the term before the restarted process reads
	// it. The holder's own reads keep confirming Held meanwhile.
	c.scaleManager(t, 0)
	defer c.scaleManager(t, 2)
	held := c.held.arm(pod.Status.PodIP)
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatalf("no append from the holder %s (%s) within 30 s", holder, pod.Status.PodIP)
	}
	// Kill it while that append waits for its answer: its write loop is blocked on it, so no
	// other write of the old process is in flight, and every write under the token from now on
	// until the delivery is the restarted process's.
	pid := c.containerPID(t, pod)
	t0 := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill the holder's process %d: %v", pid, err)
	}
	restarts := pod.Status.ContainerStatuses[0].RestartCount
	eventually(t, time.Minute, "the holder's container restarted", func() bool {
		p := c.getPod(t, workerNS, holder)
		return len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].RestartCount > restarts &&
			p.Status.ContainerStatuses[0].State.Running != nil
	})
	// The restarted process reads Held with the old token and tries to lead it: its fence
	// raise (and, if admitted, a write every 500 ms).
	restarted := func() (tries, accepted int) {
		for _, o := range c.outcomes(t) {
			if o.At.After(t0) && o.Token == tok && writerOf(o.Writer, uid) {
				tries++
				if o.Accepted {
					accepted++
				}
			}
		}
		return tries, accepted
	}
	if !poll(20*time.Second, func() bool { n, _ := restarted(); return n > 0 }) {
		t.Fatalf("the restarted process of %s never presented token %d (it should read Held with the manager stopped)", holder, tok)
	}
	time.Sleep(2 * time.Second) // a few more of its writes, if it leads
	tries, acceptedNew := restarted()
	req, rep := c.held.deliver()
	if rep.Accepted && acceptedNew > 0 {
		t.Errorf("lost update under token %d: the ledger admitted %d fence raises and writes of the restarted process, then the dead process's late write %q (writer %q)",
			tok, acceptedNew, req.Entry, req.Writer)
	}
	c.scaleManager(t, 2)
	next := c.rec.waitLock(t, lockName, 2*time.Minute, "a new term after the restart", func(l *lockv1.DistributedLock) bool {
		return isHeld(l) && l.Status.FencingToken > tok
	})
	r.add("late-write-of-dead-process: the holder's append (token %d) held, its process killed with the manager stopped; the restarted process's requests under token %d: %d, accepted %d; the late write then %s; next term token %d to %s",
		tok, tok, tries, acceptedNew, verdict(rep.Accepted), next.Status.FencingToken, next.Status.Holder)
}

func verdict(accepted bool) string {
	if accepted {
		return "accepted"
	}
	return "refused"
}

// scaleManager sets the manager Deployment's replicas and waits until that many are Ready
// (for 0: until no manager pod is left, so that nothing reconciles).
func (c *cluster) scaleManager(t testing.TB, n int32) {
	t.Helper()
	ctx := ctxFor(t, 3*time.Minute)
	sc, err := c.n.kube.AppsV1().Deployments(managerNS).GetScale(ctx, "lockwarden-manager", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get the manager's scale: %v", err)
	}
	if sc.Spec.Replicas != n {
		sc.Spec.Replicas = n
		if _, err := c.n.kube.AppsV1().Deployments(managerNS).UpdateScale(ctx, "lockwarden-manager", sc, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("scale the manager to %d: %v", n, err)
		}
	}
	eventually(t, 3*time.Minute, "the manager at the scale asked", func() bool {
		all, err := c.n.kube.CoreV1().Pods(managerNS).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=lockwarden"})
		if err != nil {
			return false
		}
		ready := 0
		for i := range all.Items {
			if podReady(&all.Items[i]) && all.Items[i].DeletionTimestamp == nil {
				ready++
			}
		}
		if n == 0 {
			return len(all.Items) == 0
		}
		return ready == int(n)
	})
}
