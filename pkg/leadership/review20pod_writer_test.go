package leadership_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/lockwarden/lockwarden/internal/apiproxy"
	"github.com/lockwarden/lockwarden/pkg/fence"
)

// fencedWrite is one request to the review's fenced resource.
type fencedWrite struct {
	Writer string `json:"writer"`
	Token  int64  `json:"token"`
	Entry  string `json:"entry"`
	// Term is the OnStartedLeading call that sent it (1, 2, ...), for the test's check only:
	// the resource admits by Writer and Token.
	Term int `json:"term"`
}

// fencedDecision is what the resource did with one write, in order.
type fencedDecision struct {
	fencedWrite
	accepted bool
}

// fencedResource admits each write with fence.Monotonic under the same mutex as the write, as
// package fence requires.
type fencedResource struct {
	mu        sync.Mutex
	m         fence.Monotonic
	decisions []fencedDecision
}

func (r *fencedResource) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	var in fencedWrite
	if err := json.NewDecoder(req.Body).Decode(&in); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	err := r.m.Admit(in.Writer, in.Token)
	r.decisions = append(r.decisions, fencedDecision{fencedWrite: in, accepted: err == nil})
	r.mu.Unlock()
	if err != nil {
		http.Error(w, err.Error(), http.StatusConflict)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (r *fencedResource) history() []fencedDecision {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]fencedDecision(nil), r.decisions...)
}

// holdingProxy is a proxy that holds every request it receives until release is closed, then
// forwards it to the resource: a slow proxy, or the kernel sending a closed socket's data.
type holdingProxy struct {
	ln      net.Listener
	target  string
	release chan struct{}
	wg      sync.WaitGroup
}

func newHoldingProxy(t *testing.T, target string) *holdingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &holdingProxy{ln: ln, target: target, release: make(chan struct{})}
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Go(func() { p.forward(c) })
		}
	})
	t.Cleanup(func() {
		select {
		case <-p.release:
		default:
			close(p.release)
		}
		_ = ln.Close()
		p.wg.Wait()
	})
	return p
}

func (p *holdingProxy) forward(c net.Conn) {
	defer c.Close()
	req, err := http.ReadRequest(bufio.NewReader(c))
	if err != nil {
		return
	}
	body, _ := io.ReadAll(req.Body)
	<-p.release
	resp, err := http.Post(p.target+req.URL.Path, "application/json", bytes.NewReader(body))
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// TestReview20SameTokenLedAgainAdmitsLateWrite: the lost update of issue 20 item 3, inside one
// process. The pod leads token 7; its OnStartedLeading raises the fence at a resource that
// admits with fence.Monotonic, writes, and has one more write on its way (held by a proxy)
// when the term ends: the API server stopped answering, so the term's deadline passed. The
// callback returns. The API server answers again, a read confirms token 7, and the elector
// leads it again (a new OnStartedLeading call, as the package documents: "the pod may lead
// again when a read confirms the term"). The new call raises the fence before reading, as a
// new term's first act, and writes. Then the proxy delivers the first call's write.
//
// The second call's fence raise is meant to fence off everything sent before it under this
// pod's earlier work; it cannot, because both calls present the same Writer() (one
// incarnation per process), and the resource admits the late write after the second call's
// writes. lockwarden-agent draws a new writer for a child started again in the same term for
// exactly this reason; the Elector does not.
func TestReview20SameTokenLedAgainAdmitsLateWrite(t *testing.T) {
	h := newHarness(t, 6)
	const uid = types.UID("uid-relead")
	res := &fencedResource{}
	srv := httptest.NewServer(res)
	defer srv.Close()
	hp := newHoldingProxy(t, srv.URL)

	post := func(base, op string, w fencedWrite) (int, error) {
		body, _ := json.Marshal(w)
		resp, err := http.Post(base+"/"+op, "application/json", bytes.NewReader(body))
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	cfg := h.config("worker-0", uid)
	var (
		mu     sync.Mutex
		calls  int
		sent   = make(chan struct{})
		first  = make(chan struct{}) // the first call returned
		second = make(chan int, 1)   // the second call's fence raise status
	)
	var elector interface{ Writer() string }
	start := cfg.Callbacks.OnStartedLeading
	cfg.Callbacks.OnStartedLeading = func(ctx context.Context, token int64) {
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		w := fencedWrite{Writer: elector.Writer(), Token: token, Term: n}
		// A term's work starts only once its fence raise is admitted.
		code, err := post(srv.URL, "fence", w)
		if n == 2 {
			second <- code
		}
		if err != nil || code != http.StatusOK {
			start(ctx, token)
			return
		}
		w.Entry = fmt.Sprintf("term %d #1", n)
		if _, err := post(srv.URL, "append", w); err != nil {
			t.Errorf("append: %v", err)
		}
		if n == 1 {
			// One more write, sent before the term ended, still on its way.
			w.Entry = "term 1 late"
			body, _ := json.Marshal(w)
			conn, err := net.Dial("tcp", hp.ln.Addr().String())
			if err != nil {
				t.Errorf("dial proxy: %v", err)
			} else {
				req, _ := http.NewRequest(http.MethodPost, "http://"+hp.ln.Addr().String()+"/append", bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				if err := req.Write(conn); err != nil {
					t.Errorf("send: %v", err)
				}
				defer conn.Close() // the request is in the proxy's hands once Write returned
			}
			close(sent)
			defer close(first)
		}
		start(ctx, token)
	}
	e := h.run(t, cfg)
	elector = e

	setStatus(t, h.key, held("worker-0", uid, 7, 6))
	select {
	case <-sent:
	case <-time.After(15 * time.Second):
		t.Fatalf("the first term never wrote; callbacks %s", h.rec)
	}
	// The API server stops answering: the term ends at its deadline, the callback returns.
	h.proxy.SetMode(apiproxy.Hold)
	select {
	case <-first:
	case <-time.After(15 * time.Second):
		t.Fatalf("the first term did not end at its deadline; callbacks %s", h.rec)
	}
	h.proxy.SetMode(apiproxy.Pass)
	var raise int
	select {
	case raise = <-second:
	case <-time.After(15 * time.Second):
		t.Fatalf("token 7 was not led again after the API server answered again; callbacks %s", h.rec)
	}
	t.Logf("callbacks %s; the second term's fence raise with token 7 as %s: HTTP %d", h.rec, e.Writer(), raise)
	close(hp.release)
	eventually(t, 10*time.Second, func() bool {
		for _, d := range res.history() {
			if d.Entry == "term 1 late" {
				return true
			}
		}
		return false
	}, func() string {
		return fmt.Sprintf("the held write never reached the resource; history %+v", res.history())
	})

	secondWrote := -1
	for i, d := range res.history() {
		t.Logf("decision %d: %q of term %d as %q with token %d: accepted %v", i, d.Entry, d.Term, d.Writer, d.Token, d.accepted)
		switch {
		case d.accepted && d.Term == 2 && secondWrote < 0:
			secondWrote = i
		case d.accepted && d.Term == 1 && secondWrote >= 0:
			t.Errorf("lost update: decision %d admitted %q, sent by the first OnStartedLeading call of token %d before it returned, after decision %d admitted the second call's fence raise (both as writer %q)",
				i, d.Entry, d.Token, secondWrote, d.Writer)
		}
	}
}
