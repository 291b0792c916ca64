package redislock

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// nonceLen is the length of a grant's nonce in hex characters (128 bits).
const nonceLen = 32

// value is what a lock key holds: "<nonce> <token> <holder>". The nonce is
// random per acquire call, so comparing it tells "this grant" from any other,
// even one with a repeated token after a restart without persistence; the
// token and holder are there for others to read.
type value struct {
	nonce  string
	token  int64
	holder string
}

// newNonce returns a fresh random nonce.
func newNonce() string {
	var b [nonceLen / 2]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

// parseValue decodes a lock key's value.
func parseValue(s string) (value, error) {
	parts := strings.SplitN(s, " ", 3)
	if len(parts) != 3 || len(parts[0]) != nonceLen {
		return value{}, fmt.Errorf("parse lock value %q: not \"<nonce> <token> <holder>\"", s)
	}
	t, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil || t <= 0 {
		return value{}, fmt.Errorf("parse lock value %q: token %q is not a positive integer", s, parts[1])
	}
	return value{nonce: parts[0], token: t, holder: parts[2]}, nil
}

// keys are the Redis keys of one lock, all in the hash slot of its name.
type keys struct {
	lock    string // the lock: "<nonce> <token> <holder>", PX TTL
	token   string // INCR counter, never expires: the fencing token
	queue   string // list of waiter IDs, FIFO
	waiter  string // prefix of a waiter's liveness key (+ waiter ID), PX TTL
	channel string // prefix of a client's wake channel (+ client ID)
	gone    string // prefix of a nonce's tombstone (+ nonce), PX TTL + margin
}

func newKeys(prefix, key string) keys {
	base := prefix + ":{" + key + "}"
	return keys{
		lock: base + ":lock", token: base + ":token", queue: base + ":queue",
		waiter: base + ":w:", channel: prefix + ":wake:", gone: base + ":gone:",
	}
}
