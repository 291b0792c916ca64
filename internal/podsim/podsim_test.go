package podsim

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/lockwarden/lockwarden/internal/testenv"
)

var cs *kubernetes.Clientset

func TestMain(m *testing.M) {
	os.Exit(testenv.RunTests(m, true, func(env *testenv.Env) error {
		var err error
		cs, err = kubernetes.NewForConfig(env.Config)
		return err
	}))
}

// summary is one watch event as the recording summarises it (watch.py): type, phase,
// deletion timestamp set, and each container's state.
func summary(ev watch.Event) string {
	p, ok := ev.Object.(*corev1.Pod)
	if !ok {
		return string(ev.Type)
	}
	var cs []string
	for _, c := range p.Status.ContainerStatuses {
		state := "waiting"
		switch {
		case c.State.Running != nil:
			state = "running"
		case c.State.Terminated != nil:
			state = fmt.Sprintf("terminated(exit=%d,reason=%s)", c.State.Terminated.ExitCode, c.State.Terminated.Reason)
		}
		cs = append(cs, fmt.Sprintf("%s:%s restarts=%d ready=%v", c.Name, state, c.RestartCount, c.Ready))
	}
	ready := ""
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady || c.Type == corev1.DisruptionTarget {
			ready += fmt.Sprintf(" %s=%s", c.Type, c.Status)
		}
	}
	return fmt.Sprintf("%s phase=%s deleting=%v [%s]%s", ev.Type, p.Status.Phase, p.DeletionTimestamp != nil, strings.Join(cs, "; "), ready)
}

// record runs act on a new Ready pod and returns the watch events of that pod that follow.
func record(t *testing.T, k *Kubelet, name string, act func(context.Context, *corev1.Pod) error) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := k.CreateReadyPod(ctx, name, map[string]string{"app": name})
	if err != nil {
		t.Fatal(err)
	}
	w, err := cs.CoreV1().Pods(k.Namespace).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name, ResourceVersion: p.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if err := act(ctx, p); err != nil {
		t.Fatal(err)
	}
	var got []string
	quiet := time.NewTimer(time.Second)
	defer quiet.Stop()
	for {
		select {
		case ev := <-w.ResultChan():
			got = append(got, summary(ev))
			if ev.Type == watch.Deleted {
				return got
			}
			quiet.Reset(time.Second)
		case <-quiet.C:
			return got
		}
	}
}

func namespace(t *testing.T) string {
	t.Helper()
	ns := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if _, err := cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return ns
}

// The sequences the real kubelet 1.37.2 was recorded writing
// (../shared/reference/real-node/evidence/; NOTES.md), one container each.
func TestSequences(t *testing.T) {
	tests := []struct {
		name   string
		policy corev1.RestartPolicy
		act    func(k *Kubelet) func(context.Context, *corev1.Pod) error
		want   []string
	}{
		{"graceful delete", "", func(k *Kubelet) func(context.Context, *corev1.Pod) error {
			return func(ctx context.Context, p *corev1.Pod) error { return k.GracefulExit(ctx, p) }
		}, []string{
			"MODIFIED phase=Running deleting=true [app:running restarts=0 ready=true] Ready=True",
			"MODIFIED phase=Running deleting=true [app:running restarts=0 ready=false] Ready=False",
			"MODIFIED phase=Succeeded deleting=true [app:terminated(exit=0,reason=Completed) restarts=0 ready=false] Ready=False",
			"MODIFIED phase=Succeeded deleting=true [app:terminated(exit=0,reason=Completed) restarts=0 ready=false] Ready=False",
			"DELETED phase=Succeeded deleting=true [app:terminated(exit=0,reason=Completed) restarts=0 ready=false] Ready=False",
		}},
		{"crash under Always", "", func(k *Kubelet) func(context.Context, *corev1.Pod) error {
			return func(ctx context.Context, p *corev1.Pod) error {
				p, err := k.Exited(ctx, p, 137)
				if err != nil {
					return err
				}
				_, err = k.Restarted(ctx, p, false)
				return err
			}
		}, []string{
			"MODIFIED phase=Running deleting=false [app:terminated(exit=137,reason=Error) restarts=0 ready=false] Ready=False",
			"MODIFIED phase=Running deleting=false [app:running restarts=1 ready=false] Ready=False",
		}},
		{"exit under Never", corev1.RestartPolicyNever, func(k *Kubelet) func(context.Context, *corev1.Pod) error {
			return func(ctx context.Context, p *corev1.Pod) error { _, err := k.Exited(ctx, p, 1); return err }
		}, []string{
			"MODIFIED phase=Failed deleting=false [app:terminated(exit=1,reason=Error) restarts=0 ready=false] Ready=False",
		}},
		{"PodGC", "", func(k *Kubelet) func(context.Context, *corev1.Pod) error {
			return func(ctx context.Context, p *corev1.Pod) error { return k.PodGC(ctx, p) }
		}, []string{
			"MODIFIED phase=Failed deleting=false [app:running restarts=0 ready=true] Ready=True DisruptionTarget=True",
			"MODIFIED phase=Failed deleting=true [app:running restarts=0 ready=true] Ready=True DisruptionTarget=True",
			"DELETED phase=Failed deleting=true [app:running restarts=0 ready=true] Ready=True DisruptionTarget=True",
		}},
	}
	ns := namespace(t)
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := &Kubelet{Client: cs, Namespace: ns, RestartPolicy: tt.policy}
			got := record(t, k, fmt.Sprintf("p%d", i), tt.act(k))
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Fatalf("watch events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}
