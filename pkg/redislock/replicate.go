package redislock

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// runAcquire sends the acquire script and, with WaitReplicas and a grant, a
// WAIT on the connection that wrote it. err is the script's own error; the
// WAIT's outcome (acked, waitErr) is reported apart, since the script may
// have granted even when the WAIT failed (an ACL that denies WAIT, a reply
// that did not come within the WAIT's read deadline).
func (c *Client) runAcquire(ctx context.Context, ks []string, args ...any) (res []any, acked int64, waitErr, err error) {
	if c.cfg.WaitReplicas == 0 {
		res, err = acquireScript.Run(ctx, c.rdb, ks, args...).Slice()
		return res, 0, nil, err
	}
	if cc, ok := c.rdb.(connector); ok {
		return c.runAcquireOnConn(ctx, cc.Conn(), ks, args...)
	}
	return c.runAcquirePipelined(ctx, ks, args...)
}

// connector is a redis client that can hand out one connection
// (*redis.Client, also for Sentinel): the WAIT then runs as a command of its
// own, which go-redis reads with WaitTimeout + 10 s, not ReadTimeout.
type connector interface{ Conn() *redis.Conn }

// runAcquireOnConn runs the script and, if it granted, WAIT on conn: WAIT
// counts the writes of its own connection.
func (c *Client) runAcquireOnConn(ctx context.Context, conn *redis.Conn, ks []string, args ...any) (res []any, acked int64, waitErr, err error) {
	defer func() { _ = conn.Close() }()
	if res, err = acquireScript.Run(ctx, conn, ks, args...).Slice(); err != nil {
		return nil, 0, nil, err
	}
	if !grants(res) {
		return res, 0, nil, nil // nothing to replicate
	}
	acked, waitErr = conn.Wait(ctx, c.cfg.WaitReplicas, c.cfg.WaitTimeout).Result()
	return res, acked, waitErr, nil
}

// runAcquirePipelined sends the script and WAIT in one pipeline, for
// clients without a single connection (Cluster, Ring). go-redis reads a
// pipeline with the client's ReadTimeout (New requires WaitTimeout below
// it), and when a later reply's read fails it sets that error on every
// command of the pipeline, also on the script whose reply was decoded: a
// decoded reply (cmd.Val() not nil, which go-redis only sets from a whole
// reply) means the script ran, and the error is the WAIT's.
func (c *Client) runAcquirePipelined(ctx context.Context, ks []string, args ...any) (res []any, acked int64, waitErr, err error) {
	pipe := c.rdb.Pipeline()
	cmd := acquireScript.Eval(ctx, pipe, ks, args...)
	wait := pipe.Do(ctx, "WAIT", c.cfg.WaitReplicas, c.cfg.WaitTimeout.Milliseconds())
	_, _ = pipe.Exec(ctx) // its error is the first command's; each is read below
	if res, err = cmd.Slice(); err != nil {
		decoded, ok := cmd.Val().([]any)
		if !ok {
			return nil, 0, nil, err
		}
		res = decoded
	}
	acked, waitErr = wait.Int64()
	return res, acked, waitErr, nil
}

// renewReplicated confirms a grant that another client's script wrote to
// this waiter (a handoff): WAIT counts the writes of its own connection,
// which wrote nothing of the grant, so it renews the key (a write after
// the grant in the replication stream) and WAITs on the renewal's
// connection (in one pipeline on a Cluster or Ring client). renewed is
// false when the key is no longer this nonce's; err is an
// ErrNotReplicated when fewer than WaitReplicas replicas confirmed, or the
// renewal's own error.
func (c *Client) renewReplicated(ctx context.Context, key, nonce string) (renewed bool, err error) {
	cctx, cancel := context.WithTimeout(ctx, c.stepTimeout())
	defer cancel()
	ks, args := []string{newKeys(c.cfg.Prefix, key).lock}, []any{nonce, c.ttlMillis()}
	var n, acked int64
	var waitErr error
	if cc, ok := c.rdb.(connector); ok {
		conn := cc.Conn()
		defer func() { _ = conn.Close() }()
		if n, err = renewScript.Eval(cctx, conn, ks, args...).Int64(); err != nil || n != 1 {
			return false, err
		}
		acked, waitErr = conn.Wait(cctx, c.cfg.WaitReplicas, c.cfg.WaitTimeout).Result()
	} else {
		pipe := c.rdb.Pipeline()
		cmd := renewScript.Eval(cctx, pipe, ks, args...)
		wait := pipe.Do(cctx, "WAIT", c.cfg.WaitReplicas, c.cfg.WaitTimeout.Milliseconds())
		_, _ = pipe.Exec(cctx)
		if n, err = cmd.Int64(); err != nil {
			decoded, ok := cmd.Val().(int64) // the WAIT's error, stamped on the decoded reply too
			if !ok {
				return false, err
			}
			n = decoded
		}
		if n != 1 {
			return false, nil
		}
		acked, waitErr = wait.Int64()
	}
	return true, replicated(c.cfg.WaitReplicas, acked, waitErr, c.cfg.WaitTimeout)
}

// grants reports whether an acquire script reply is a grant (without
// decoding the rest: grab does that).
func grants(res []any) bool {
	return len(res) > 0 && res[0] == int64(stateGranted)
}

// pipelineReadTimeout returns the read timeout go-redis applies to a
// pipeline of rdb when rdb has no single connection and reports its
// options; ok is false otherwise (New cannot check WaitTimeout then).
func pipelineReadTimeout(rdb redis.UniversalClient) (d time.Duration, ok bool) {
	if _, single := rdb.(connector); single {
		return 0, false
	}
	switch r := rdb.(type) {
	case *redis.ClusterClient:
		return r.Options().ReadTimeout, true
	case *redis.Ring:
		return ringReadTimeout(r.Options().ReadTimeout), true
	}
	return 0, false
}

// ringReadTimeout is the read deadline a Ring's shard clients use for a RingOptions
// ReadTimeout: go-redis leaves a Ring's options as set, and each shard's client turns 0
// into its 5 s default and -1 into none (go-redis Options.init); a ClusterClient's Options()
// already holds the effective value.
func ringReadTimeout(set time.Duration) time.Duration {
	switch {
	case set == 0:
		return 5 * time.Second
	case set < 0:
		return 0
	}
	return set
}

// checkWaitTimeout reports an ErrInvalid when the WAIT would be read with a
// deadline (read, a pipeline's ReadTimeout; not positive: none) that is not
// above WaitTimeout: its reply could never arrive in time.
func checkWaitTimeout(cfg Config, read time.Duration) error {
	if cfg.WaitReplicas > 0 && read > 0 && cfg.WaitTimeout >= read {
		return invalidf("wait timeout %v must be below the redis client's read timeout %v "+
			"(a pipeline's WAIT reply is read within it)", cfg.WaitTimeout, read)
	}
	return nil
}

// replicated decides whether an acquire's WAIT confirmed its grant: nil when
// no replicas are wanted or at least want acknowledged it; otherwise an
// ErrNotReplicated saying why (the WAIT's own error, or how many
// acknowledged within timeout).
func replicated(want int, acked int64, waitErr error, timeout time.Duration) error {
	switch {
	case want <= 0:
		return nil
	case waitErr != nil:
		return fmt.Errorf("%w: wait for %d replicas: %w", ErrNotReplicated, want, waitErr)
	case acked < int64(want):
		return fmt.Errorf("%w: %d of %d replicas confirmed within %v", ErrNotReplicated, acked, want, timeout)
	}
	return nil
}

// stepTimeout is the deadline of one step of a blocking Acquire: a call,
// and with WaitReplicas the WAIT after it.
func (c *Client) stepTimeout() time.Duration {
	if c.cfg.WaitReplicas > 0 {
		return c.cfg.CallTimeout + c.cfg.WaitTimeout
	}
	return c.cfg.CallTimeout
}
