package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/internal/apiproxy"
	"github.com/lockwarden/lockwarden/internal/testenv"
)

// answer is one /leader answer as the test saw it.
type answer struct {
	status int
	reply  leaderReply
	sent   int64 // CLOCK_MONOTONIC ns before the request was sent
	recv   int64 // CLOCK_MONOTONIC ns when the answer had arrived
}

// getLeader asks /leader once.
func getLeader(t *testing.T, base string) (answer, error) {
	t.Helper()
	sent := monoNow()
	resp, err := http.Get(base + "/leader")
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	var a answer
	if err := json.NewDecoder(resp.Body).Decode(&a.reply); err != nil {
		return answer{}, fmt.Errorf("decode /leader: %w", err)
	}
	a.status, a.sent, a.recv = resp.StatusCode, sent, monoNow()
	return a, nil
}

// sseEvents collects /watch's event names.
type sseEvents struct {
	mu    sync.Mutex
	names []string
}

func (s *sseEvents) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.names, " ")
}

// follow reads /watch until ctx ends or the stream closes.
func (s *sseEvents) follow(ctx context.Context, base string, done chan<- struct{}) {
	defer close(done)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/watch", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if name, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
			s.mu.Lock()
			s.names = append(s.names, name)
			s.mu.Unlock()
		}
	}
}

// TestSidecarLeaderNeverAfterValidUntil runs the sidecar for the holder, cuts it off from
// the API server and polls /leader every few milliseconds: no 200 answer arrives after the
// validity its last read could have given (and the 409s follow), the token file is emptied
// and /readyz fails; when the API server is back, the pod leads again with the same token.
// /watch streams the changes.
func TestSidecarLeaderNeverAfterValidUntil(t *testing.T) {
	f := newFixture(t)
	p := f.pod("worker-0")
	ports, err := testenv.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	tokenFile := filepath.Join(f.dir, "token")
	if err := os.WriteFile(tokenFile, []byte("999\n"), 0o644); err != nil { // an earlier run's
		t.Fatal(err)
	}
	a := f.startAgent(p, []string{"sidecar", "--listen", base[len("http://"):], "--token-file", tokenFile})

	var first answer
	eventually(t, 30*time.Second, func() bool {
		first, err = getLeader(t, base)
		return err == nil && first.status == http.StatusOK
	}, func() string { return fmt.Sprintf("/leader: %+v, %v; log:\n%s", first, err, a.out) })
	if first.reply.Holder != "worker-0" || first.reply.Token == 0 || first.reply.ValidUntilSeconds <= 0 ||
		first.reply.ValidUntilSeconds > validFor().Seconds() {
		t.Errorf("/leader = %+v, want holder worker-0, a token, 0 < validUntilSeconds <= %v", first.reply, validFor().Seconds())
	}
	if first.reply.Slot == nil || *first.reply.Slot != 0 {
		t.Errorf("/leader slot = %v, want 0 (a one-slot lock)", first.reply.Slot)
	}
	token := first.reply.Token
	if b, err := os.ReadFile(tokenFile); err != nil || string(b) != fmt.Sprintf("%d\n", token) {
		t.Errorf("token file = %q, %v; want %q", b, err, fmt.Sprintf("%d\n", token))
	}
	events := &sseEvents{}
	ctx, cancel := context.WithCancel(context.Background())
	followed := make(chan struct{})
	go events.follow(ctx, base, followed)
	defer func() {
		cancel()
		<-followed
	}()
	eventually(t, 5*time.Second, func() bool { return events.String() == "leading" },
		func() string { return fmt.Sprintf("/watch events %q, want %q", events, "leading") })

	a.proxy.SetMode(apiproxy.Hold)
	var answers []answer
	deadline := time.Now().Add(validFor() + 2*time.Second)
	for time.Now().Before(deadline) {
		ans, err := getLeader(t, base)
		if err != nil {
			t.Fatalf("/leader: %v", err)
		}
		answers = append(answers, ans)
		time.Sleep(3 * time.Millisecond)
	}
	oks, lastOK, conflicts := 0, answer{}, 0
	for _, ans := range answers {
		read := a.reads.lastBefore(ans.recv)
		bound := read + int64(validFor())
		switch ans.status {
		case http.StatusOK:
			oks++
			lastOK = ans
			if ans.recv >= bound {
				t.Errorf("/leader answered 200 (%+v), received %v after the validity bound", ans.reply, time.Duration(ans.recv-bound))
			}
			// A client may use the token until its send time plus validUntilSeconds: that
			// must not pass the validity either, and the answer must leave --min-validity.
			if use := ans.sent + int64(ans.reply.ValidUntilSeconds*float64(time.Second)); use > bound {
				t.Errorf("/leader answered 200 (%+v): send time + validUntilSeconds is %v after the validity bound", ans.reply, time.Duration(use-bound))
			}
			if ans.reply.ValidUntilSeconds < defaultMinValidity.Seconds() {
				t.Errorf("/leader answered 200 with validUntilSeconds %v, below --min-validity %v", ans.reply.ValidUntilSeconds, defaultMinValidity)
			}
			if conflicts > 0 {
				t.Errorf("/leader answered 200 after a 409 while cut off")
			}
		case http.StatusConflict:
			conflicts++
		default:
			t.Errorf("/leader status %d, want 200 or 409", ans.status)
		}
	}
	if oks == 0 || conflicts == 0 {
		t.Fatalf("while cut off: %d answers 200 and %d answers 409, want both", oks, conflicts)
	}
	t.Logf("cut off: %d answers 200, the last received %v before the validity bound; then %d answers 409", oks,
		time.Duration(a.reads.lastBefore(lastOK.recv)+int64(validFor())-lastOK.recv).Round(time.Millisecond), conflicts)
	eventually(t, 5*time.Second, func() bool { b, err := os.ReadFile(tokenFile); return err == nil && len(b) == 0 },
		func() string {
			b, _ := os.ReadFile(tokenFile)
			return fmt.Sprintf("token file %q after the term ended, want empty", b)
		})
	eventually(t, 10*time.Second, func() bool { return httpStatus(base+"/readyz") == http.StatusServiceUnavailable },
		func() string { return "/readyz did not fail while no read succeeds" })

	a.proxy.SetMode(apiproxy.Pass)
	var again answer
	eventually(t, 3*validFor(), func() bool {
		again, err = getLeader(t, base)
		return err == nil && again.status == http.StatusOK
	}, func() string { return fmt.Sprintf("/leader after the API server came back: %+v, %v", again, err) })
	if again.reply.Token != token {
		t.Errorf("token after the API server came back = %d, want %d", again.reply.Token, token)
	}
	if s := httpStatus(base + "/readyz"); s != http.StatusOK {
		t.Errorf("/readyz = %d, want 200", s)
	}
	eventually(t, 5*time.Second, func() bool { return events.String() == "leading stopped leading" },
		func() string { return fmt.Sprintf("/watch events %q, want %q", events, "leading stopped leading") })
	a.cancel()
	if code := a.wait(t, 10*time.Second); code != exitOK {
		t.Errorf("sidecar exit code = %d, want %d", code, exitOK)
	}
	if b, err := os.ReadFile(tokenFile); err != nil || len(b) != 0 {
		t.Errorf("token file after exit = %q, %v; want empty", b, err)
	}
}

// httpStatus is the status of a GET of url, or 0.
func httpStatus(url string) int {
	resp, err := http.Get(url)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// TestSidecarReleasesOnStop: a native sidecar (--native-sidecar) of a pod being deleted: the
// controller sees the deletion and ends the term (Releasing, HolderTerminating); /leader
// stops answering 200 and the token file is emptied; then the kubelet, once the workload's
// containers exited, stops the sidecar (SIGTERM), which releases the term: the controller
// ends it as HolderReleased and grants the other pod without the lock delay.
func TestSidecarReleasesOnStop(t *testing.T) {
	f := newFixture(t)
	p0, p1 := f.pod("worker-0"), f.pod("worker-1")
	ports, err := testenv.FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	start := func(p string, port int) (*agent, string, string) {
		base := fmt.Sprintf("127.0.0.1:%d", port)
		tokenFile := filepath.Join(f.dir, p+".token")
		pod := p0
		if p == "worker-1" {
			pod = p1
		}
		return f.startAgent(pod, []string{"sidecar", "--native-sidecar", "--listen", base, "--token-file", tokenFile}), "http://" + base, tokenFile
	}
	a0, base0, file0 := start("worker-0", ports[0])
	var first answer
	eventually(t, 30*time.Second, func() bool {
		first, err = getLeader(t, base0)
		return err == nil && first.status == http.StatusOK
	}, func() string { return fmt.Sprintf("worker-0's /leader: %+v, %v; log:\n%s", first, err, a0.out) })
	a1, base1, _ := start("worker-1", ports[1])
	if err := f.kubelet.Delete(context.Background(), p0); err != nil { // kubectl delete pod worker-0
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() bool { return httpStatus(base0+"/leader") == http.StatusConflict },
		func() string {
			return fmt.Sprintf("worker-0's /leader still answers 200 after its pod's deletion; log:\n%s", a0.out)
		})
	stopped := time.Now() // the workload's container has exited: the kubelet stops the sidecar
	a0.cancel()
	if code := a0.wait(t, 15*time.Second); code != exitOK {
		t.Errorf("worker-0's sidecar exited %d, want %d; log:\n%s", code, exitOK, a0.out)
	}
	if b, err := os.ReadFile(file0); err != nil || len(b) != 0 {
		t.Errorf("worker-0's token file after the stop = %q, %v; want empty", b, err)
	}
	var next answer
	eventually(t, 30*time.Second, func() bool {
		next, err = getLeader(t, base1)
		return err == nil && next.status == http.StatusOK
	}, func() string { return fmt.Sprintf("worker-1's /leader: %+v, %v; log:\n%s", next, err, a1.out) })
	took := time.Since(stopped)
	released := false
	for _, h := range f.get().Status.History {
		if string(h.HolderUID) == a0.uid && h.Token == first.reply.Token && h.Reason == lockv1.ReasonHolderReleased {
			released = true
		}
	}
	if !released {
		t.Errorf("history %+v: want worker-0's term of token %d ended %s; worker-0's log:\n%s", f.get().Status.History, first.reply.Token, lockv1.ReasonHolderReleased, a0.out)
	}
	t.Logf("worker-1 answered 200 with token %d %v after worker-0's sidecar was told to stop (lock delay %ds)", next.reply.Token, took.Round(time.Millisecond), leaseSeconds)
}

// TestSidecarNativeStoppedAloneKeepsTerm: a native sidecar stopped alone (its liveness probe
// failed: SIGTERM while its pod is not being deleted) cannot know that the workload stopped,
// so it sends no release, whatever --native-sidecar says: the lock still names the pod after
// the sidecar exited, and the controller would end the term the slow way.
func TestSidecarNativeStoppedAloneKeepsTerm(t *testing.T) {
	f := newFixture(t)
	p := f.pod("worker-0")
	ports, err := testenv.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("127.0.0.1:%d", ports[0])
	a := f.startAgent(p, []string{"sidecar", "--native-sidecar", "--listen", base, "--token-file", filepath.Join(f.dir, "token")})
	var first answer
	eventually(t, 30*time.Second, func() bool {
		first, err = getLeader(t, "http://"+base)
		return err == nil && first.status == http.StatusOK
	}, func() string { return fmt.Sprintf("/leader: %+v, %v; log:\n%s", first, err, a.out) })
	stopped := time.Now()
	a.cancel()
	if code := a.wait(t, 15*time.Second); code != exitOK {
		t.Errorf("sidecar exited %d; log:\n%s", code, a.out)
	}
	took := time.Since(stopped)
	l := f.get()
	if v := l.Annotations[lockv1.AnnotationHolderRelease]; v != "" || l.Status.HolderUID != p.UID || l.Status.FencingToken != first.reply.Token {
		t.Errorf("after the sidecar stopped alone: holder-release %q, holder %s token %d; want none, and the lock still %s's with token %d; log:\n%s",
			v, l.Status.HolderUID, l.Status.FencingToken, p.UID, first.reply.Token, a.out)
	}
	if !strings.Contains(a.out.String(), "release on stop not sent") {
		t.Errorf("the sidecar's log does not say why it sent no release; log:\n%s", a.out)
	}
	t.Logf("stopped in %v (it waits up to %v for the pod's deletion to show)", took.Round(time.Millisecond), releaseWait)
}
