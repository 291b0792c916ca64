// Package redistest runs real redis-server processes for tests and
// benchmarks, each on a free loopback port with its own temporary directory,
// stopped by PID, and a userspace TCP proxy that delays (with jitter),
// blackholes or drops the traffic between a client and a server.
//
// redis-server comes from the Debian package (`make redis-server` installs
// it when it is missing; .ci/run does the same). Nothing here uses a system
// Redis service.
package redistest
