package leadership_test

import (
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
	"github.com/lockwarden/lockwarden/pkg/leadership"
)

// TestReview20FinalSecondElectorSameWriter: the final review of issue 20. Writer per term
// (writer.go) draws the process's incarnation for "the first term of this Elector", and a
// fresh one for every later term of the same Elector. But one process can run several
// Electors for one lock one after another: RunOrDie is client-go's, and client-go programs
// call it in a loop (a new Elector each call, SingleTerm). Each new Elector's first term
// presents writer.Of(uid) again: the same writer ID as the previous Elector's first term.
//
// The shape of TestReview20SameTokenLedAgainAdmitsLateWrite, with two Electors: the first
// leads token 7, raises the fence, writes, has one more write held in a proxy, and its term
// ends at its deadline (the API server stops answering); Run returns. The program calls
// RunOrDie again: the second Elector reads token 7 Held and leads it, raises the fence and
// writes, as the same writer. The first Elector's held write then lands and is admitted
// after the second's writes: a lost update under one token and one writer ID, which package
// writer and pkg/leadership's doc say the writer per term prevents ("One process can also
// lead one token twice ... it draws one each time a term starts").
func TestReview20FinalSecondElectorSameWriter(t *testing.T) {
	h := newHarness(t, 6)
	const uid = types.UID("uid-second-elector")
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
	var (
		mu     sync.Mutex
		calls  int
		sent   = make(chan struct{})
		first  = make(chan struct{}) // the first call returned
		second = make(chan int, 1)   // the second call's fence raise status
	)
	mk := func() leadership.Config {
		cfg := h.config("worker-0", uid)
		cfg.SingleTerm = true // what RunOrDie sets
		start := cfg.Callbacks.OnStartedLeading
		cfg.Callbacks.OnStartedLeading = func(ctx context.Context, token int64) {
			mu.Lock()
			calls++
			n := calls
			mu.Unlock()
			w := fencedWrite{Writer: leadership.WriterOf(ctx), Token: token, Term: n}
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
					defer conn.Close()
				}
				close(sent)
				defer close(first)
			}
			start(ctx, token)
		}
		return cfg
	}
	e1 := h.run(t, mk())

	setStatus(t, h.key, held("worker-0", uid, 7, 6))
	select {
	case <-sent:
	case <-time.After(15 * time.Second):
		t.Fatalf("the first term never wrote; callbacks %s", h.rec)
	}
	h.proxy.SetMode(apiproxy.Hold)
	select {
	case <-first:
	case <-time.After(15 * time.Second):
		t.Fatalf("the first term did not end at its deadline; callbacks %s", h.rec)
	}
	eventually(t, 10*time.Second, func() bool { return !e1.Valid() }, func() string { return "first elector still valid" })
	h.proxy.SetMode(apiproxy.Pass)
	// The program's loop calls RunOrDie again: a new Elector in the same process.
	e2 := h.run(t, mk())
	var raise int
	select {
	case raise = <-second:
	case <-time.After(15 * time.Second):
		t.Fatalf("the second Elector did not lead token 7; callbacks %s", h.rec)
	}
	t.Logf("second Elector's fence raise with token 7 as %s: HTTP %d", e2.Writer(), raise)
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
			t.Errorf("lost update: decision %d admitted %q, sent by the first Elector's term of token %d before it ended, after decision %d admitted the second Elector's fence raise (both as writer %q)",
				i, d.Entry, d.Token, secondWrote, d.Writer)
		}
	}
}
