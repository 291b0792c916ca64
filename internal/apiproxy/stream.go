package apiproxy

import (
	"bufio"
	"context"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// maxFrames bounds how many captured frames the proxy keeps (the oldest go first).
const maxFrames = 1024

// replayBuffer is how many replayed frames may wait in one stream; more are not delivered.
const replayBuffer = 64

// Frame is one watch event as it crossed the proxy: a JSON object followed by a newline.
type Frame struct {
	// Stream names the watch it came from: the URL path and its label and field selectors,
	// for example "/apis/lockwarden.io/v1alpha1/namespaces/ns/distributedlocks?fieldSelector=metadata.name%3Dx".
	Stream string
	// Data is the frame exactly as the API server sent it.
	Data []byte
	// At is when the proxy read it from the API server.
	At time.Time
}

// Frames returns the frames captured so far, oldest first (at most the last 1024).
func (p *Proxy) Frames() []Frame {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]Frame, len(p.frames))
	for i, f := range p.frames {
		out[i] = Frame{Stream: f.Stream, Data: append([]byte(nil), f.Data...), At: f.At}
	}
	return out
}

// Replay writes f.Data into every open watch stream whose Stream equals f.Stream, after the
// frame the stream is delivering now and before the next one from the API server, even while
// the API server sends nothing. It returns how many streams took it. The frame is delivered
// as it is: its resourceVersion is whatever it was when captured.
func (p *Proxy) Replay(f Frame) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for s := range p.streams {
		if s.key != f.Stream {
			continue
		}
		select {
		case s.replay <- append([]byte(nil), f.Data...):
			n++
		default: // that stream is not reading; a test that floods it learns from the count
		}
	}
	return n
}

// capture records a frame read from the API server.
func (p *Proxy) capture(key string, data []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.frames) == maxFrames {
		p.frames = append(p.frames[:0], p.frames[1:]...)
	}
	p.frames = append(p.frames, Frame{Stream: key, Data: append([]byte(nil), data...), At: time.Now()})
}

// stream is the body of one JSON watch response as the proxy delivers it. Its pump goroutine
// reads whole frames from the API server; Read hands out frames and replayed frames, one
// at a time and whole, and stops handing them out while the proxy holds.
type stream struct {
	p        *Proxy
	key      string
	ctx      context.Context // the client's request; ends when it goes away
	upstream io.ReadCloser
	frames   chan []byte // from pump; closed when the upstream body ends
	replay   chan []byte
	done     chan struct{} // closed by Close; stops pump
	pending  []byte        // the rest of the frame being delivered; Read only
	err      error         // why pump ended; read only after frames is closed
	close    sync.Once
}

// newStream wraps body and starts its pump; false means the proxy is closed.
func (p *Proxy) newStream(ctx context.Context, u *url.URL, body io.ReadCloser) (*stream, bool) {
	s := &stream{
		p:        p,
		key:      streamKey(u),
		ctx:      ctx,
		upstream: body,
		frames:   make(chan []byte),
		replay:   make(chan []byte, replayBuffer),
		done:     make(chan struct{}),
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, false
	}
	p.streams[s] = struct{}{}
	p.active.Add(1)
	go func() {
		defer p.active.Done()
		s.pump()
	}()
	return s, true
}

// pump reads frames until the upstream body ends or the stream is closed.
func (s *stream) pump() {
	defer close(s.frames)
	r := bufio.NewReader(s.upstream)
	for {
		line, err := r.ReadBytes('\n')
		if len(line) > 0 {
			s.p.capture(s.key, line)
			select {
			case s.frames <- line:
			case <-s.done:
				s.err = io.ErrClosedPipe
				return
			}
		}
		if err != nil {
			s.err = err
			return
		}
	}
}

// Read delivers the next bytes of the current frame, or waits for the next frame.
func (s *stream) Read(b []byte) (int, error) {
	for len(s.pending) == 0 {
		mode, changed, err := s.p.gate(s.ctx)
		if err != nil {
			return 0, err
		}
		if mode == Refuse {
			return 0, errRefused
		}
		// A replayed frame goes before any frame read from the API server after Replay
		// returned, so a test can order a real event after it.
		select {
		case f := <-s.replay:
			s.pending = f
			continue
		default:
		}
		select {
		case f := <-s.replay:
			s.pending = f
		case f, ok := <-s.frames:
			if !ok {
				return 0, s.err
			}
			s.pending = f
		case <-changed:
			// Re-check the mode: Hold must stop delivery even while no frame is ready.
		case <-s.ctx.Done():
			return 0, s.ctx.Err()
		}
	}
	n := copy(b, s.pending)
	s.pending = s.pending[n:]
	return n, nil
}

// Close closes the upstream body, which ends pump, and forgets the stream.
func (s *stream) Close() error {
	var err error
	s.close.Do(func() {
		close(s.done)
		err = s.upstream.Close()
		s.p.mu.Lock()
		delete(s.p.streams, s)
		s.p.mu.Unlock()
	})
	return err
}

// streamKey names a watch by its path and selectors, which is what makes two watches carry
// the same kind of events.
func streamKey(u *url.URL) string {
	q := u.Query()
	keep := url.Values{}
	for _, k := range []string{"fieldSelector", "labelSelector"} {
		if v := q.Get(k); v != "" {
			keep.Set(k, v)
		}
	}
	if len(keep) == 0 {
		return u.Path
	}
	return u.Path + "?" + keep.Encode()
}

// isWatch reports whether r asks for a watch stream.
func isWatch(r *http.Request) bool {
	switch r.URL.Query().Get("watch") {
	case "true", "1":
		return true
	}
	return strings.Contains(r.URL.Path, "/watch/")
}

// isJSON reports whether a Content-Type is JSON (the API server streams JSON watch events as
// one object per line).
func isJSON(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && mt == "application/json"
}
