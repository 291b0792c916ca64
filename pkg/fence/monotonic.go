package fence

import (
	"fmt"
	"sync"
)

// Monotonic is the admit check of a resource server: it accepts a token
// only if it is above the highest seen, or equal to it and presented by the
// writer that first presented it. Two processes holding one token (a holder
// and its restarted twin, a write the dead process sent before it died, or a
// copy that should not exist) therefore cannot both write: the first one in
// wins the token. That holds only if writer names a process, not a pod: use
// the writer IDs of package writer ("<pod UID>/<incarnation>"), which is what
// pkg/leadership's Writer and lockwarden-agent's $LOCKWARDEN_WRITER are. A
// writer refused for an equal token has lost the term: it must stop acting
// under that token.
//
// Admit and the write it admits must be atomic together: call Admit under
// the same mutex (or in the same transaction) as the write, or a stale
// writer admitted just before a newer one can still land after it. A
// resource that survives restarts must persist Highest with its data and
// feed it back through Admit when it starts.
//
// The zero value accepts any positive token. It is safe for concurrent use.
type Monotonic struct {
	mu      sync.Mutex
	highest int64
	writer  string
}

// Admit raises the fence to token for writer, or returns a *StaleError
// (ErrStale) naming the highest token if token is lower, or equal but first
// presented by another writer.
func (m *Monotonic) Admit(writer string, token int64) error {
	if writer == "" {
		return fmt.Errorf("admit token %d: %w: empty writer", token, ErrInvalid)
	}
	if token <= 0 {
		return fmt.Errorf("admit token %d: %w: token is not positive", token, ErrInvalid)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case token > m.highest:
		m.highest, m.writer = token, writer
		return nil
	case token == m.highest && writer == m.writer:
		return nil
	}
	return &StaleError{Token: token, Current: m.highest}
}

// Highest returns the highest admitted token and the writer that first
// presented it.
func (m *Monotonic) Highest() (token int64, writer string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.highest, m.writer
}
