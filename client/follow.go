package client

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// sseLineMax bounds one line of an event stream.
const sseLineMax = 1 << 20

// Follow streams the audit trail from the event after sequence number
// after, calling fn for each event in order, until ctx ends, fn returns
// an error, or the stream ends. It returns the sequence number of the
// last event fn was given (after, if none): calling Follow again from it
// resumes without a gap or a repeat. A stream the server ended (it shuts
// down, or a resume of the same token took its place at the token's cap)
// or a connection lost is ErrStreamEnded; ctx's end is ctx's error.
func (c *Client) Follow(ctx context.Context, after int64, fn func(Event) error) (int64, error) {
	last := after
	query := url.Values{"after": {strconv.FormatInt(after, 10)}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.endpoint("/v1/events", query), nil)
	if err != nil {
		return last, fmt.Errorf("client: events: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+c.secret)
	req.Header.Set("Accept", "text/event-stream")
	if after > 0 {
		// A resume: the server lets it take the slot of this token's
		// oldest stream (which may be this client's previous one, not yet
		// seen closed) rather than refuse it at the token's cap.
		req.Header.Set("Last-Event-ID", strconv.FormatInt(after, 10))
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return last, ctx.Err()
		}
		return last, fmt.Errorf("client: events: %w: %w", ErrStreamEnded, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return last, errorOf(resp)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), sseLineMax)
	var kind, data string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if data == "" {
				kind = ""
				continue
			}
			if kind == "end" {
				return last, fmt.Errorf("client: events: %w: %s", ErrStreamEnded, data)
			}
			var e Event
			if err := json.Unmarshal([]byte(data), &e); err != nil {
				return last, fmt.Errorf("client: events: decode event after %d: %w", last, err)
			}
			kind, data = "", ""
			if e.Seq <= last {
				return last, fmt.Errorf("client: events: event %d arrived after %d: the stream went back", e.Seq, last)
			}
			last = e.Seq // given to fn, whatever fn returns
			if err := fn(e); err != nil {
				return last, err
			}
		case strings.HasPrefix(line, ":"): // a comment: the server's ping
		case strings.HasPrefix(line, "event:"):
			kind = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		case strings.HasPrefix(line, "data:"):
			if data != "" {
				data += "\n"
			}
			data += strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " ")
		}
	}
	if ctx.Err() != nil {
		return last, ctx.Err()
	}
	if err := sc.Err(); err != nil {
		return last, fmt.Errorf("client: events: %w: %w", ErrStreamEnded, err)
	}
	return last, fmt.Errorf("client: events: %w: the connection closed", ErrStreamEnded)
}
