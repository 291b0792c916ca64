// Package apiproxy is a TLS-terminating reverse proxy in front of a Kubernetes API server, for
// tests that must cut a client off from the API server or feed it an old watch event.
//
// A byte-level TCP proxy can delay or drop traffic but cannot see requests, hold one request
// or replay a watch event. This proxy terminates TLS with its own self-signed certificate on
// 127.0.0.1, forwards each request with rest.TransportFor(upstream) (so the upstream's
// credentials are added here, never by the client), and hands out a *rest.Config that trusts
// its certificate and carries no credentials.
//
// What it can do, and nothing more:
//
//   - SetMode(Pass): forward everything (the default).
//   - SetMode(Hold): an API server that has stopped answering. New requests wait at the proxy
//     without being forwarded, responses already on their way are not delivered, and open watch
//     streams deliver no frames. Everything resumes when the mode returns to Pass; a client that
//     gives up meanwhile (its context ends) is simply gone.
//   - SetMode(Refuse): an API server that resets connections. New and held requests fail at
//     once (the HTTP/2 stream is reset, or the HTTP/1 connection closed) and open watch streams
//     are cut.
//   - Frames and Replay: every frame of a JSON watch stream (one event per line, which is how
//     the API server streams custom resources, and built-in ones to clients that ask for JSON)
//     is captured; Replay writes a captured frame again, later, into the open watch streams of
//     the same resource and selectors, between two real frames. Protobuf and CBOR streams pass
//     through untouched and are neither captured nor replayable. Watch requests are forwarded
//     with Accept-Encoding: identity, since a gzipped stream has no frames to tell apart.
//   - Options.OnForward sees each request just before it goes upstream, so a test can count
//     requests or record when they were sent.
//
// The proxy is for tests and fault-injection harnesses on one machine; it is not hardened for
// anything else. Close stops it and waits for every goroutine it started.
package apiproxy
