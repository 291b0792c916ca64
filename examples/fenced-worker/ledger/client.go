package ledger

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
)

// Errors of Client calls.
var (
	// ErrStale is wrapped by the error of every Client call the ledger refused for its token:
	// a lower token than the highest accepted, or an equal one from another writer.
	ErrStale = errors.New("ledger refused the write")
	// ErrOtherWriter is wrapped too when the refused token is the ledger's highest, admitted
	// from another writer first (this pod's previous process, or a copy): the term is over for
	// the caller's process (pkg/leadership's Elector.Abandon).
	ErrOtherWriter = errors.New("another writer presented this token first")
)

// Client writes to a ledger over HTTP.
type Client struct {
	// URL is the ledger's base URL, e.g. http://127.0.0.1:8090.
	URL string
	// HTTP is the client to use; nil means http.DefaultClient.
	HTTP *http.Client
	// Name is the writer's name (the pod name) sent with each write, for the ledger's
	// messages; optional.
	Name string
}

// Fence raises the fence to token for writer (its writer ID): the first act of a new term,
// before any other write under token.
func (c *Client) Fence(ctx context.Context, writer string, token int64) error {
	return c.post(ctx, "/fence", Write{Writer: writer, Name: c.Name, Token: token})
}

// Append appends entry with token for writer.
func (c *Client) Append(ctx context.Context, writer string, token int64, entry string) error {
	return c.post(ctx, "/append", Write{Writer: writer, Name: c.Name, Token: token, Entry: entry})
}

func (c *Client) post(ctx context.Context, path string, w Write) error {
	body, err := json.Marshal(w)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("ledger %s: %w", path, err)
	}
	defer resp.Body.Close()
	var rep Reply
	if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil {
		return fmt.Errorf("ledger %s: status %d: %w", path, resp.StatusCode, err)
	}
	switch resp.StatusCode {
	case http.StatusOK:
		return nil
	case http.StatusConflict:
		if rep.Highest == w.Token {
			return fmt.Errorf("%w: %s (%w)", ErrStale, rep.Error, ErrOtherWriter)
		}
		return fmt.Errorf("%w: %s", ErrStale, rep.Error)
	}
	return fmt.Errorf("ledger %s: status %d: %s", path, resp.StatusCode, rep.Error)
}
