package fence_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockwarden/lockwarden/internal/etcdtest"
	"github.com/lockwarden/lockwarden/pkg/fence"
	"github.com/lockwarden/lockwarden/pkg/fence/writer"
)

// The processes of TestLateWriteOfDeadIncarnation are this test binary started again with
// incarnationEnv set: init runs their part and exits before any test (or TestMain's etcd)
// starts.
const (
	incarnationEnv = "FENCE_TEST_INCARNATION" // "old" or "new"
	podEnv         = "FENCE_TEST_POD"
	tokenEnv       = "FENCE_TEST_TOKEN"
	directEnv      = "FENCE_TEST_DIRECT" // the resource's URL
	heldEnv        = "FENCE_TEST_HELD"   // host:port of the proxy in front of it
)

func init() {
	if role := os.Getenv(incarnationEnv); role != "" {
		os.Exit(incarnation(role))
	}
}

// presentedWriter is the writer ID a process of pod presents with its token: the rule every
// writer in this project follows (pkg/leadership's Writer, lockwarden-agent's
// LOCKWARDEN_WRITER). Before issue 20 it was the pod UID alone, and this test failed: the
// resource admitted "old late" after "new #1".
func presentedWriter(pod string) string { return writer.Of(pod) }

// fenceWrite is one request to the test's resource.
type fenceWrite struct {
	Writer string `json:"writer"`
	Token  int64  `json:"token"`
	Entry  string `json:"entry,omitempty"`
	// From is the process that sent it ("old" or "new"), for the test's check only: the
	// resource admits by Writer and Token.
	From string `json:"from"`
}

// decision is what the resource did with one write, in order.
type decision struct {
	fenceWrite
	op       string
	accepted bool
}

// resource is a fenced resource server: Monotonic admits each write under the same mutex as
// the write, as its documentation requires.
type resource struct {
	mu        sync.Mutex
	m         fence.Monotonic
	decisions []decision
}

func (r *resource) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	var in fenceWrite
	if err := json.NewDecoder(req.Body).Decode(&in); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	err := r.m.Admit(in.Writer, in.Token)
	r.decisions = append(r.decisions, decision{fenceWrite: in, op: strings.TrimPrefix(req.URL.Path, "/"), accepted: err == nil})
	r.mu.Unlock()
	if err != nil {
		http.Error(w, err.Error(), http.StatusConflict)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (r *resource) history() []decision {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]decision(nil), r.decisions...)
}

// TestLateWriteOfDeadIncarnation is the lost update of two incarnations of one pod under one
// token (issue 20). Process "old" of pod P leads token 7: it raises the fence at a resource
// that admits with fence.Monotonic, writes, and sends one more write that a proxy holds; then
// it is killed (SIGKILL). P's restarted process "new" is granted the same token (the grant
// outlived the restart), raises the fence and writes. Then the proxy delivers the dead
// process's write, as a kernel sending a closed socket's buffered data or a slow proxy would.
// The resource must never admit a write of old after one of new: each process presents the
// writer ID the project's rule gives it, and under one token only one of them may write.
func TestLateWriteOfDeadIncarnation(t *testing.T) {
	res := &resource{}
	srv := httptest.NewServer(res)
	defer srv.Close()
	proxy := etcdtest.NewProxy(t, srv.URL)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), podEnv+"=pod-uid-1", tokenEnv+"=7", directEnv+"="+srv.URL, heldEnv+"="+proxy.Host())

	old := exec.Command(self)
	old.Env = append(append([]string(nil), env...), incarnationEnv+"=old")
	stdin, err := old.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := old.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	old.Stderr = os.Stderr
	if err := old.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = old.Process.Kill(); _ = old.Wait() }()
	lines := bufio.NewScanner(stdout)
	expect := func(prefix string) string {
		t.Helper()
		if !lines.Scan() || !strings.HasPrefix(lines.Text(), prefix) {
			t.Fatalf("old incarnation said %q (%v), want a line starting %q", lines.Text(), lines.Err(), prefix)
		}
		return strings.TrimPrefix(lines.Text(), prefix)
	}
	oldWriter := expect("wrote as ")
	proxy.PauseTx()
	fmt.Fprintln(stdin, "send the late write")
	expect("sent")
	if err := old.Process.Kill(); err != nil { // SIGKILL: its write is in the proxy
		t.Fatal(err)
	}
	_ = old.Wait()

	restarted := exec.Command(self)
	restarted.Env = append(append([]string(nil), env...), incarnationEnv+"=new")
	restarted.Stderr = os.Stderr
	out, err := restarted.Output()
	if err != nil {
		t.Fatalf("new incarnation: %v: %s", err, out)
	}
	t.Logf("old incarnation wrote as %q; new incarnation %s", oldWriter, strings.TrimSpace(string(out)))

	proxy.UnpauseTx()
	late := func() (decision, bool) {
		for _, d := range res.history() {
			if d.Entry == "old late" {
				return d, true
			}
		}
		return decision{}, false
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, ok := late(); !ok; _, ok = late() {
		if time.Now().After(deadline) {
			t.Fatalf("the held write never reached the resource; history %+v", res.history())
		}
		time.Sleep(10 * time.Millisecond)
	}

	newWrote := -1
	for i, d := range res.history() {
		t.Logf("decision %d: %s %q from %s as %q with token %d: accepted %v", i, d.op, d.Entry, d.From, d.Writer, d.Token, d.accepted)
		switch {
		case d.accepted && d.From == "new" && newWrote < 0:
			newWrote = i
		case d.accepted && d.From == "old" && newWrote >= 0:
			t.Errorf("lost update: decision %d admitted %s %q of the dead incarnation (writer %q, token %d) after decision %d admitted the new incarnation's",
				i, d.op, d.Entry, d.Writer, d.Token, newWrote)
		}
	}
}

// incarnation is one process of the pod: "old" raises the fence and writes directly, then
// on a line from stdin sends one more write through the proxy and waits to be killed; "new"
// raises the fence and, if admitted, writes. Each says which writer ID it presented.
func incarnation(role string) int {
	pod, direct, held := os.Getenv(podEnv), os.Getenv(directEnv), os.Getenv(heldEnv)
	var token int64
	if _, err := fmt.Sscan(os.Getenv(tokenEnv), &token); err != nil {
		fmt.Fprintln(os.Stderr, "token:", err)
		return 2
	}
	w := presentedWriter(pod)
	post := func(op, entry string) (int, error) {
		body, _ := json.Marshal(fenceWrite{Writer: w, Token: token, Entry: entry, From: role})
		resp, err := http.Post(direct+"/"+op, "application/json", bytes.NewReader(body))
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	// A term's work starts only after its fence raise is admitted.
	code, err := post("fence", "")
	if err != nil {
		fmt.Fprintln(os.Stderr, "fence:", err)
		return 2
	}
	if code != http.StatusOK {
		fmt.Printf("as %s: fence refused (%d): the term is over for this process\n", w, code)
		return 0
	}
	if code, err = post("append", role+" #1"); err != nil || code != http.StatusOK {
		fmt.Fprintln(os.Stderr, "append:", code, err)
		return 2
	}
	if role == "new" {
		fmt.Printf("as %s: fence raised, wrote %q\n", w, role+" #1")
		return 0
	}
	fmt.Printf("wrote as %s\n", w)
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return 2
	}
	conn, err := net.Dial("tcp", held)
	if err != nil {
		fmt.Fprintln(os.Stderr, "dial proxy:", err)
		return 2
	}
	body, _ := json.Marshal(fenceWrite{Writer: w, Token: token, Entry: "old late", From: role})
	req, _ := http.NewRequest(http.MethodPost, "http://"+held+"/append", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if err := req.Write(conn); err != nil { // in the kernel's hands once Write returns
		fmt.Fprintln(os.Stderr, "send:", err)
		return 2
	}
	fmt.Println("sent")
	select {} // until killed
}
