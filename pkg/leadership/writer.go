package leadership

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/lockwarden/lockwarden/pkg/fence/writer"
)

// Every term has a writer of its own. A token can be led twice by one process: its term ends
// when its deadline passes without a confirming read, and a later read confirms the same
// token again. The first OnStartedLeading call has returned by then, but a write it sent
// before it returned may still be on its way (held by a proxy, buffered in the kernel). If
// both calls presented one writer, the second call's fence raise could not fence that write
// off: the resource admits an equal token from the writer that presented it first, and would
// admit the late write after the second call's writes, a lost update under one token. So a
// new incarnation is drawn each time a term starts (package writer): the first term of a
// process presents the process's incarnation (writer.Of), every later one a fresh one. This is
// stricter than one incarnation per process, which DESIGN.md states as the minimum. A token
// led again is then refused at a resource the earlier call fenced (another writer presented
// it first), and the callback Abandons it: the controller ends the term and grants a new
// token.

// termWriterKey is the context key of a term's writer ID on OnStartedLeading's context.
type termWriterKey struct{}

// Writer returns the writer ID to present with the token to fenced resources
// (fence.Monotonic, the SQL form of package fence): "<Identity>/<incarnation>", with an
// incarnation drawn for each term (see package writer). It is the writer of the term whose
// OnStartedLeading was called last; before the first call, the writer the first term will
// present (the process's for the first Elector of the pod in this process, a fresh one for
// any later Elector). Read it inside OnStartedLeading, once at its start, and hand it to everything the
// term's work runs: after the callback returns, a later term may have started, and Writer()
// is then that term's. WriterOf(ctx) gives the same value from the term's context.
func (e *Elector) Writer() string { return *e.writer.Load() }

// WriterOf returns the writer ID of the term whose OnStartedLeading received ctx (or a
// context derived from it), or "" for any other context. Unlike Elector.Writer it never
// changes under a term's work when a later term starts, so a goroutine the callback started
// may read it at any time.
func WriterOf(ctx context.Context) string {
	w, _ := ctx.Value(termWriterKey{}).(string)
	return w
}

// withWriter is a term's context carrying its writer ID.
func withWriter(ctx context.Context, w string) context.Context {
	return context.WithValue(ctx, termWriterKey{}, w)
}

// drawWriter draws the writer ID of a term that starts now: the first one this Elector (or
// ResourceLock) was made with (firstWriter), a fresh incarnation for every later term.
func (e *Elector) drawWriter() string {
	if e.draws.Add(1) == 1 {
		return *e.first
	}
	return writer.ID(string(e.cfg.Identity), writer.NewIncarnation())
}

// processWriters are the identities whose process writer (writer.Of) an Elector of this
// process was made with already.
var processWriters sync.Map

// firstWriter is the writer of a new Elector's first term: the process's own (writer.Of) for
// the first Elector of identity in this process, a fresh incarnation for every later one. A
// program that makes a second Elector for the same pod (client-go's RunOrDie in a loop) may
// lead a token again that its first Elector led; with the process writer twice, a late write
// of the first Elector's term would be admitted after the second's fence raise (final review
// of issue 20, TestReview20FinalSecondElectorSameWriter).
func firstWriter(identity types.UID) string {
	if _, taken := processWriters.LoadOrStore(identity, true); !taken {
		return processWriter(identity)
	}
	return writer.ID(string(identity), writer.NewIncarnation())
}

// setWriter makes w what Writer() returns.
func (e *Elector) setWriter(w string) { e.writer.Store(&w) }

// processWriter is the writer ID of this process for identity: its first term's.
func processWriter(identity types.UID) string { return writer.Of(string(identity)) }
