//go:build e2e

package e2e

import (
	"bufio"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// runtimeExit is one /tasks/exit event of containerd: the runtime reporting that a
// container's init (ID == ContainerID) or one of its exec'd processes exited. The kubelet
// learns of the exit from the runtime, so this is the earliest report anyone above the
// shim gets.
type runtimeExit struct {
	Published time.Time // the event's timestamp: when it was published
	Received  time.Time // when this process read it from `ctr events`
	ExitedAt  time.Time // when the shim saw the process exit (it had reaped it)
	ID        string    // the process: the container ID for the init, else the exec ID
	PID       int
	Status    int
}

// runtimeEvents streams `ctr events` from the node's containerd until the test ends and
// keeps every /tasks/exit event by container ID.
type runtimeEvents struct {
	mu    sync.Mutex
	exits map[string][]runtimeExit
	bad   []string // lines that did not parse
}

func watchRuntimeEvents(t *testing.T, n *node) *runtimeEvents {
	t.Helper()
	r := &runtimeEvents{exits: map[string][]runtimeExit{}}
	cmd := exec.Command(filepath.Join(n.root, "hack", "node", "ctr"), "events")
	cmd.Env = n.environ(nil)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("ctr events: %v", err)
	}
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			r.note(time.Now(), sc.Text())
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // by its PID: hack/node/ctr execs nsenter, which execs ctr
		<-read
		_ = cmd.Wait()
	})
	return r
}

// note parses one line of `ctr events`: "<timestamp> <namespace> <topic> <json>", the
// timestamp in Go's time.Time String form ("2006-01-02 15:04:05.999999999 -0700 MST").
func (r *runtimeEvents) note(at time.Time, line string) {
	f := strings.SplitN(line, " ", 7)
	if len(f) < 7 || f[5] != "/tasks/exit" {
		return
	}
	var e struct {
		ContainerID string    `json:"container_id"`
		ID          string    `json:"id"`
		PID         int       `json:"pid"`
		ExitStatus  int       `json:"exit_status"`
		ExitedAt    time.Time `json:"exited_at"`
	}
	published, err := time.Parse("2006-01-02 15:04:05.999999999 -0700 MST", strings.Join(f[:4], " "))
	if err == nil {
		err = json.Unmarshal([]byte(f[6]), &e)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.bad = append(r.bad, line+": "+err.Error())
		return
	}
	r.exits[e.ContainerID] = append(r.exits[e.ContainerID], runtimeExit{
		Published: published, Received: at, ExitedAt: e.ExitedAt, ID: e.ID, PID: e.PID, Status: e.ExitStatus,
	})
}

// of returns the exit events of the container id ("containerd://..." or bare).
func (r *runtimeEvents) of(id string) []runtimeExit {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]runtimeExit(nil), r.exits[strings.TrimPrefix(id, "containerd://")]...)
}

// initExit is the exit event of the container's init, if one came.
func (r *runtimeEvents) initExit(id string) (runtimeExit, bool) {
	bare := strings.TrimPrefix(id, "containerd://")
	for _, e := range r.of(bare) {
		if e.ID == bare {
			return e, true
		}
	}
	return runtimeExit{}, false
}

// unparsed returns the /tasks/exit lines that could not be read.
func (r *runtimeEvents) unparsed() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.bad...)
}
