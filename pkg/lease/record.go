package lease

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"unicode/utf8"
)

// value is what the engine stores under a lock key and a waiter key:
// the holder string and the caller's record, as JSON so that etcdctl shows
// it readably. The token is not stored: it is the key's CreateRevision.
type value struct {
	Holder string          `json:"holder"`
	Record json.RawMessage `json:"record,omitempty"`
	// Call is a random ID of the acquire call that wrote the value (not set
	// by Grant, Update or UpdateRecord). It tells a key or queue entry that
	// an interrupted call left from one a later call of the same session
	// wrote: clean-up deletes only the former, a new waiter never takes the
	// place of the former.
	Call string `json:"call,omitempty"`
	// Slots is the slot count of the semaphore whose slot key or queue
	// entry this is (AcquireSlot), 0 for any other key: a caller that
	// reads another count refuses (semaphore.go).
	Slots int `json:"slots,omitempty"`
}

// newCallID returns a random call ID: unique across calls, sessions and
// process restarts (a counter would restart with a resumed session).
func newCallID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b)
}

// encode returns the stored form of v.
func (v value) encode() string {
	b, err := json.Marshal(v)
	if err != nil {
		// Holder is valid UTF-8 and Record valid JSON (both checked on
		// input), so Marshal cannot fail.
		panic("lease: encode value: " + err.Error())
	}
	return string(b)
}

// decodeValue parses a stored value. A value the engine did not write (an
// operator's etcdctl put) is shown as the holder, so that it is visible
// rather than hidden.
func decodeValue(b []byte) value {
	var v value
	if err := json.Unmarshal(b, &v); err != nil || v.Holder == "" {
		if utf8.Valid(b) {
			return value{Holder: string(b)}
		}
		return value{Holder: "<binary value>"}
	}
	return v
}

// validateRecord checks a WithRecord argument.
func validateRecord(r json.RawMessage) error {
	if len(r) > 0 && !json.Valid(r) {
		return invalidf("record is not valid JSON")
	}
	return nil
}
