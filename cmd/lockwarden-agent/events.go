package main

import "sync"

// event is one server-sent event of /watch.
type event struct {
	name string // leading, stopped or holder
	data []byte // JSON
}

// hub fans events out to /watch subscribers. A subscriber that does not keep up loses the
// oldest events it has not read (its channel holds subscriberBuffer), never blocks the
// callbacks, and is told by a gap event.
type hub struct {
	mu     sync.Mutex
	subs   map[chan event]struct{}
	closed bool
}

// subscriberBuffer is how many events a slow /watch client may lag behind.
const subscriberBuffer = 16

func newHub() *hub { return &hub{subs: map[chan event]struct{}{}} }

// subscribe returns a channel of events; it is closed by unsubscribe or close.
func (h *hub) subscribe() chan event {
	h.mu.Lock()
	defer h.mu.Unlock()
	ch := make(chan event, subscriberBuffer)
	if h.closed {
		close(ch)
		return ch
	}
	h.subs[ch] = struct{}{}
	return ch
}

// unsubscribe forgets ch and closes it.
func (h *hub) unsubscribe(ch chan event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.subs[ch]; ok {
		delete(h.subs, ch)
		close(ch)
	}
}

// publish sends ev to every subscriber without blocking: a full channel drops its oldest
// event for a gap marker.
func (h *hub) publish(ev event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.subs {
		select {
		case ch <- ev:
			continue
		default:
		}
		for range 2 { // the two oldest, to make room for the gap marker and ev
			select {
			case <-ch:
			default:
			}
		}
		select {
		case ch <- event{name: "gap", data: []byte(`{}`)}:
		default:
		}
		select {
		case ch <- ev:
		default:
		}
	}
}

// close closes every subscriber's channel; later subscribers get a closed channel.
func (h *hub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for ch := range h.subs {
		delete(h.subs, ch)
		close(ch)
	}
}
