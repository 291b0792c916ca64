//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// stamp is one version of the stamped ConfigMap as this process received it.
type stamp struct {
	At     time.Time
	Writer string
	Token  int64
}

// stampWatch records every version of the stamped ConfigMap until the test ends.
type stampWatch struct {
	mu     sync.Mutex
	stamps []stamp
}

// watchStamps watches the ConfigMap stampedCM of stamperNS, started again from the last
// resourceVersion when the server ends the watch.
func watchStamps(t testing.TB, c *cluster) *stampWatch {
	t.Helper()
	w := &stampWatch{}
	ctx, cancel := context.WithCancel(context.Background())
	var done sync.WaitGroup
	done.Add(1)
	go func() {
		defer done.Done()
		rv := ""
		for ctx.Err() == nil {
			wi, err := c.n.kube.CoreV1().ConfigMaps(stamperNS).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + stampedCM, ResourceVersion: rv})
			if err != nil {
				select {
				case <-ctx.Done():
				case <-time.After(200 * time.Millisecond):
				}
				continue
			}
			for e := range wi.ResultChan() {
				at := time.Now()
				cm, ok := e.Object.(*corev1.ConfigMap)
				if e.Type == watch.Error || !ok {
					rv = ""
					break
				}
				rv = cm.ResourceVersion
				if writer := cm.Annotations[writerAnn]; writer != "" {
					tok, _ := strconv.ParseInt(cm.Annotations[tokenAnn], 10, 64)
					w.mu.Lock()
					w.stamps = append(w.stamps, stamp{At: at, Writer: writer, Token: tok})
					w.mu.Unlock()
				}
			}
			wi.Stop()
		}
	}()
	t.Cleanup(func() {
		cancel()
		done.Wait()
	})
	return w
}

// since returns the stamps recorded from index i on, and the next index.
func (w *stampWatch) since(i int) ([]stamp, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]stamp(nil), w.stamps[i:]...), len(w.stamps)
}

// waitStamp waits until some stamp recorded from index i on has writer and token.
func (w *stampWatch) waitStamp(t testing.TB, i int, writer string, token int64, timeout time.Duration) stamp {
	t.Helper()
	var found stamp
	if !poll(timeout, func() bool {
		ss, _ := w.since(i)
		for _, s := range ss {
			if s.Writer == writer && s.Token == token {
				found = s
				return true
			}
		}
		return false
	}) {
		ss, _ := w.since(0)
		t.Fatalf("no stamp by %s with token %d within %v; stamps: %+v", writer, token, timeout, ss)
	}
	return found
}

// checkStamps checks a run of stamps: the token never decreases, and once a stamp carries a
// token above old, no stamp by oldWriter follows, nor is one received after cutoff (the next
// holder's grant).
func checkStamps(ss []stamp, oldWriter string, old int64, cutoff time.Time) []string {
	var bad []string
	newer := false
	for i, s := range ss {
		if i > 0 && s.Token < ss[i-1].Token {
			bad = append(bad, fmt.Sprintf("stamp %d (%s, token %d) after token %d: the token went down", i, s.Writer, s.Token, ss[i-1].Token))
		}
		if s.Writer == oldWriter && (newer || s.At.After(cutoff)) {
			bad = append(bad, fmt.Sprintf("stamp %d by the old holder %s (token %d) received %v after the next grant (or after a newer token)", i, s.Writer, s.Token, s.At.Sub(cutoff).Round(time.Millisecond)))
		}
		if s.Token > old {
			newer = true
		}
	}
	return bad
}

// releaseSeen is the first recorded lock version carrying the holder-release annotation for
// token, or the zero Time.
func releaseSeen(locks []lockObs, token int64) time.Time {
	suffix := "/" + strconv.FormatInt(token, 10)
	for _, o := range locks {
		if strings.HasSuffix(o.Lock.Annotations[lockv1.AnnotationHolderRelease], suffix) {
			return o.At
		}
	}
	return time.Time{}
}

// lastLines is the last n lines of text.
func lastLines(text string, n int) string {
	lines := strings.Split(strings.TrimSpace(text), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}

func TestCheckStamps(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	for _, tc := range []struct {
		name   string
		ss     []stamp
		cutoff time.Time
		bad    int
	}{
		{"handoff", []stamp{{at(1), "a", 7}, {at(3), "b", 10}}, at(2), 0},
		{"token down", []stamp{{at(1), "b", 10}, {at(3), "c", 9}}, at(2), 1},
		{"old holder after the grant", []stamp{{at(1), "b", 10}, {at(3), "a", 7}}, at(2), 2},
		{"old holder after a newer token, before the cutoff", []stamp{{at(1), "b", 10}, {at(2), "a", 10}}, at(5), 1},
		{"old holder before the grant", []stamp{{at(1), "a", 7}, {at(2), "a", 7}, {at(4), "b", 10}}, at(3), 0},
		{"none", nil, at(0), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := checkStamps(tc.ss, "a", 7, tc.cutoff); len(got) != tc.bad {
				t.Errorf("checkStamps = %q, want %d findings", got, tc.bad)
			}
		})
	}
}
