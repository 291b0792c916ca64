package apiproxy_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/lockwarden/lockwarden/internal/apiproxy"
	"github.com/lockwarden/lockwarden/internal/testenv"
)

// env is one real control plane for every test here; admin reaches it directly.
var (
	env   *testenv.Env
	admin kubernetes.Interface
)

func TestMain(m *testing.M) {
	os.Exit(testenv.RunTests(m, true, func(e *testenv.Env) (err error) {
		env = e
		admin, err = kubernetes.NewForConfig(e.Config)
		return err
	}))
}

// start starts a proxy counting the requests it forwards; cleanup closes it.
func start(t *testing.T) (*apiproxy.Proxy, *atomic.Int64) {
	t.Helper()
	var forwarded atomic.Int64
	p, err := apiproxy.Start(env.Config, apiproxy.Options{OnForward: func(*http.Request) { forwarded.Add(1) }})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close() = %v, want nil", err)
		}
		if err := p.Close(); err != nil {
			t.Errorf("second Close() = %v, want nil", err)
		}
	})
	return p, &forwarded
}

// TestPassHoldRefuse checks the three modes on plain requests through a client that has no
// credentials of its own.
func TestPassHoldRefuse(t *testing.T) {
	p, forwarded := start(t)
	cs, err := kubernetes.NewForConfig(p.Config())
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	get := func(timeout time.Duration) error {
		ctx, cancel := context.WithTimeout(t.Context(), timeout)
		defer cancel()
		_, err := cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
		return err
	}

	if err := get(10 * time.Second); err != nil {
		t.Fatalf("Pass: GET = %v, want nil", err)
	}
	if got := forwarded.Load(); got != 1 {
		t.Errorf("Pass: requests forwarded = %d, want 1", got)
	}

	p.SetMode(apiproxy.Hold)
	if got := p.Mode(); got != apiproxy.Hold {
		t.Errorf("Mode() = %v, want Hold", got)
	}
	if err := get(300 * time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Hold: GET with a 300ms timeout = %v, want %v", err, context.DeadlineExceeded)
	}
	held := make(chan error, 1)
	go func() { held <- get(10 * time.Second) }()
	select {
	case err := <-held:
		t.Fatalf("Hold: GET returned %v within 500ms, want it held", err)
	case <-time.After(500 * time.Millisecond):
	}
	if got := forwarded.Load(); got != 1 {
		t.Errorf("Hold: requests forwarded = %d, want still 1", got)
	}
	p.SetMode(apiproxy.Pass)
	if err := <-held; err != nil {
		t.Errorf("GET held, then released by Pass = %v, want nil", err)
	}

	p.SetMode(apiproxy.Refuse)
	begin := time.Now()
	err = get(10 * time.Second)
	if err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Refuse: GET = %v, want a prompt connection error", err)
	}
	if took := time.Since(begin); took > 5*time.Second {
		t.Errorf("Refuse: GET took %v, want it refused at once", took)
	}
	p.SetMode(apiproxy.Pass)
	if err := get(10 * time.Second); err != nil {
		t.Errorf("Pass again: GET = %v, want nil", err)
	}
}

// TestWatchFrames captures the frames of a JSON watch, holds the stream, replays an old frame
// into it, and cuts it with Refuse.
func TestWatchFrames(t *testing.T) {
	p, _ := start(t)
	ctx := t.Context()
	ns, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "proxy-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	cms := admin.CoreV1().ConfigMaps(ns.Name)
	cm, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm"}, Data: map[string]string{"v": "1"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create configmap: %v", err)
	}
	update := func(v string) string {
		t.Helper()
		cm.Data["v"] = v
		cm, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
		if err != nil {
			t.Fatalf("update configmap: %v", err)
		}
		return cm.ResourceVersion
	}

	dyn, err := dynamic.NewForConfig(p.Config()) // JSON, as for any custom resource
	if err != nil {
		t.Fatalf("dynamic client: %v", err)
	}
	w, err := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}).Namespace(ns.Name).
		Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=cm", ResourceVersion: cm.ResourceVersion})
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	defer w.Stop()
	next := func(within time.Duration) (watch.Event, bool) {
		select {
		case ev, ok := <-w.ResultChan():
			return ev, ok
		case <-time.After(within):
			return watch.Event{}, false
		}
	}
	expect := func(what, typ, v, rv string) {
		t.Helper()
		ev, ok := next(10 * time.Second)
		if !ok {
			t.Fatalf("%s: no event, want %s v=%s", what, typ, v)
		}
		u, isU := ev.Object.(*unstructured.Unstructured)
		if !isU {
			t.Fatalf("%s: event object %T, want *unstructured.Unstructured", what, ev.Object)
		}
		gotV, _, _ := unstructured.NestedString(u.Object, "data", "v")
		if string(ev.Type) != typ || gotV != v || u.GetResourceVersion() != rv {
			t.Fatalf("%s: got %s v=%s rv=%s, want %s v=%s rv=%s", what, ev.Type, gotV, u.GetResourceVersion(), typ, v, rv)
		}
	}

	rv2 := update("2")
	expect("Pass", "MODIFIED", "2", rv2)
	stream := "/api/v1/namespaces/" + ns.Name + "/configmaps?fieldSelector=metadata.name%3Dcm"
	var frame2 apiproxy.Frame
	for _, f := range p.Frames() {
		var ev struct {
			Type   string `json:"type"`
			Object struct {
				Metadata struct {
					ResourceVersion string `json:"resourceVersion"`
				} `json:"metadata"`
			} `json:"object"`
		}
		if f.Stream == stream && json.Unmarshal(f.Data, &ev) == nil && ev.Type == "MODIFIED" && ev.Object.Metadata.ResourceVersion == rv2 {
			frame2 = f
		}
	}
	if frame2.Data == nil {
		t.Fatalf("Frames(): no MODIFIED frame of rv %s on stream %q", rv2, stream)
	}
	if !strings.HasSuffix(string(frame2.Data), "}\n") {
		t.Errorf("captured frame %q, want one JSON object and a newline", frame2.Data)
	}

	p.SetMode(apiproxy.Hold)
	rv3 := update("3")
	if ev, ok := next(500 * time.Millisecond); ok {
		t.Fatalf("Hold: got event %s, want none delivered", ev.Type)
	}
	p.SetMode(apiproxy.Pass)
	expect("released by Pass", "MODIFIED", "3", rv3)

	if n := p.Replay(frame2); n != 1 {
		t.Fatalf("Replay() reached %d streams, want 1", n)
	}
	expect("replayed", "MODIFIED", "2", rv2)
	if n := p.Replay(apiproxy.Frame{Stream: "/api/v1/namespaces/" + ns.Name + "/secrets", Data: frame2.Data}); n != 0 {
		t.Errorf("Replay() to a stream nobody watches reached %d streams, want 0", n)
	}

	// A cut stream ends the watch; client-go may first report the broken stream as an ERROR.
	p.SetMode(apiproxy.Refuse)
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return
			}
			if ev.Type != watch.Error {
				t.Fatalf("Refuse: got event %s, want the stream cut", ev.Type)
			}
		case <-deadline:
			t.Fatalf("Refuse: watch still open after 10s, want it cut")
		}
	}
}
