package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
	"github.com/leasehold/leasehold/wire"
)

// Event stream bounds.
const (
	// StreamsPerTokenDefault bounds the event streams one token holds
	// open at once.
	StreamsPerTokenDefault = 4
	// PingInterval is how long an idle stream goes before a ping comment,
	// so that proxies and clients see it alive.
	PingInterval = 15 * time.Second
	// streamBatchMax bounds the events read and written at once.
	streamBatchMax = 100
	// retryMs is the reconnection delay the stream suggests to clients.
	retryMs = 2000
)

// liftWriteDeadline clears the server's write timeout for this response:
// a long-poll or a stream writes later than it allows.
func liftWriteDeadline(w http.ResponseWriter) {
	_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
}

// errStreamReplaced ends a stream whose slot a resume of the same token
// took.
var errStreamReplaced = errors.New("replaced by a resumed stream of the same token")

// streamSlot is one open stream of a token: end stops it.
type streamSlot struct{ end context.CancelCauseFunc }

// openStream counts a stream of the principal against its cap, oldest
// first. A token at its cap is refused a new stream, unless the stream is
// a resume (it carries Last-Event-ID): a client reconnecting, whose
// earlier stream the server may not have seen end yet (the connection
// half-open, or its close not yet read), so the resume takes the slot of
// the token's oldest stream, which ends. The cap holds either way.
func (s *Server) openStream(p Principal, resume bool, slot *streamSlot) (release func(), err error) {
	s.streamsMu.Lock()
	defer s.streamsMu.Unlock()
	open := s.streams[p.Name]
	if len(open) >= s.streamsMax {
		if !resume || len(open) == 0 {
			return nil, fmt.Errorf("token %s already holds %d event streams: %w", p.Name, s.streamsMax, errTooManyStreams)
		}
		oldest := open[0]
		open = open[1:]
		oldest.end(errStreamReplaced)
		s.log.Warn("event stream replaced by a resume of the same token", "actor", p.Name, "streams", s.streamsMax)
	}
	s.streams[p.Name] = append(open, slot)
	return func() {
		s.streamsMu.Lock()
		defer s.streamsMu.Unlock()
		open := s.streams[p.Name]
		for i, o := range open {
			if o == slot {
				open = append(open[:i:i], open[i+1:]...)
				break
			}
		}
		if len(open) == 0 {
			delete(s.streams, p.Name)
		} else {
			s.streams[p.Name] = open
		}
	}, nil
}

// streamStart reads where a stream starts: Last-Event-ID (sent by a
// client reconnecting) over ?after=, 0 if neither.
func streamStart(r *http.Request) (int64, error) {
	query, err := queryOf(r, "after")
	if err != nil {
		return 0, err
	}
	field, text := "after", query.Get("after")
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		field, text = "Last-Event-ID", id
	}
	if text == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(text, 10, 64)
	if err != nil || n < 0 {
		return 0, &model.ValidationError{Field: field, Problem: fmt.Sprintf("%s is not an event sequence number", model.Quote(text, 32))}
	}
	return n, nil
}

// followEvents is GET /v1/events: the audit trail from after the start
// as Server-Sent Events, each event once, in sequence order ("id: SEQ",
// "event: event", "data: JSON"), ": ping" comments while idle, and
// "event: end" when the server shuts down (or a resume of the same token
// took this stream's slot: see openStream). A token bound to some users
// sees only their tasks' events.
//
// In SQLite one transaction writes at a time, so sequence order is
// commit order: once the stream has sent event n, no event below n can
// still commit, and resuming after n misses nothing and repeats nothing.
func (s *Server) followEvents(w http.ResponseWriter, r *http.Request, p Principal) error {
	if _, err := authorize(r.Context(), p, anyScope); err != nil {
		return err
	}
	after, err := streamStart(r)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	release, err := s.openStream(p, r.Header.Get("Last-Event-ID") != "", &streamSlot{end: cancel})
	if err != nil {
		return err
	}
	defer release()
	defer context.AfterFunc(s.closing, func() { cancel(nil) })()

	liftWriteDeadline(w)
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if _, err := fmt.Fprintf(w, "retry: %d\n\n", retryMs); err != nil {
		return nil
	}
	_ = rc.Flush()
	filter := queue.EventFilter{Users: p.visible(), After: after, Limit: streamBatchMax}
	for {
		wait, stop := withTimeout(ctx, s.clock, PingInterval)
		events, through, err := s.q.WaitEventsThrough(wait, filter)
		idle := errors.Is(context.Cause(wait), context.DeadlineExceeded)
		stop()
		switch {
		case ctx.Err() != nil:
			switch {
			case s.closing.Err() != nil:
				fmt.Fprint(w, "event: end\ndata: {\"reason\":\"shutdown\"}\n\n")
				_ = rc.Flush()
			case errors.Is(context.Cause(ctx), errStreamReplaced):
				fmt.Fprint(w, "event: end\ndata: {\"reason\":\"replaced by a resumed stream of this token\"}\n\n")
				_ = rc.Flush()
			}
			return nil
		case err != nil && idle:
			if _, err := fmt.Fprint(w, ": ping\n\n"); err != nil {
				return nil
			}
		case err != nil:
			s.log.Warn("event stream failed in storage", "actor", p.Name, "after", filter.After, "error", oneLine(err.Error()))
			fmt.Fprint(w, "event: end\ndata: {\"reason\":\"storage unavailable; resume with Last-Event-ID\"}\n\n")
			_ = rc.Flush()
			return nil
		}
		for _, e := range events {
			data, err := json.Marshal(wire.EventOf(e.Event, e.User, e.TaskKind))
			if err != nil {
				return nil
			}
			if _, err := fmt.Fprintf(w, "id: %d\nevent: event\ndata: %s\n\n", e.Seq, data); err != nil {
				return nil // the client went away
			}
			filter.After = e.Seq
		}
		// Past the other users' events it looked through too (a token
		// bound to some users): the next wait starts there.
		filter.After = max(filter.After, through)
		if err := rc.Flush(); err != nil {
			return nil
		}
	}
}
