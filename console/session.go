package console

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
)

// Session bounds.
const (
	sessionIDBytes = 32 // random bytes in a session ID and in a CSRF token
	// SessionsMax bounds the sessions held at once, signed in or not.
	SessionsMax = 10_000
	// DefaultIdle and DefaultLifetime are the expiries when Options
	// leaves them zero.
	DefaultIdle     = 30 * time.Minute
	DefaultLifetime = 12 * time.Hour
	// anonymousLifetime bounds a session made only to carry the sign-in
	// form's CSRF token.
	anonymousLifetime = 15 * time.Minute
)

// ErrTooManySessions is returned when SessionsMax sessions are live and
// none can be evicted.
var ErrTooManySessions = errors.New("too many sessions")

// session is one browser's state on the server. principal is nil until
// sign-in: an anonymous session only carries the sign-in form's CSRF
// token.
type session struct {
	principal *Principal
	csrf      string
	created   time.Time
	seen      time.Time
	flash     string // a message shown once, on the next page
	refusal   string // a refusal shown once, on the next page, after a redirect
}

// sessions holds every session, keyed by the SHA-256 of its ID, so that
// the ID itself is kept by the browser alone.
type sessions struct {
	mu       sync.Mutex
	clock    clockwork.Clock
	random   io.Reader
	idle     time.Duration
	lifetime time.Duration
	byKey    map[[32]byte]*session
}

func newSessions(clock clockwork.Clock, random io.Reader, idle, lifetime time.Duration) *sessions {
	return &sessions{clock: clock, random: random, idle: idle, lifetime: lifetime, byKey: map[[32]byte]*session{}}
}

// randomToken returns sessionIDBytes random bytes, URL-safe base64.
func (s *sessions) randomToken() (string, error) {
	b := make([]byte, sessionIDBytes)
	if _, err := io.ReadFull(s.random, b); err != nil {
		return "", fmt.Errorf("console: random source: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// create makes a fresh session (anonymous when p is nil) with a new ID
// and CSRF token, and returns its ID.
func (s *sessions) create(p *Principal) (string, *session, error) {
	id, err := s.randomToken()
	if err != nil {
		return "", nil, err
	}
	csrf, err := s.randomToken()
	if err != nil {
		return "", nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	if len(s.byKey) >= SessionsMax {
		s.evictLocked(now)
	}
	if len(s.byKey) >= SessionsMax {
		return "", nil, ErrTooManySessions
	}
	ses := &session{principal: p, csrf: csrf, created: now, seen: now}
	s.byKey[sha256.Sum256([]byte(id))] = ses
	return id, ses, nil
}

// evictLocked drops every expired session and, if still full, the
// anonymous session seen longest ago. Signed-in sessions are never
// evicted to make room: they end by expiry or sign-out.
func (s *sessions) evictLocked(now time.Time) {
	var oldestKey [32]byte
	var oldest *session
	for k, ses := range s.byKey {
		if s.expired(ses, now) {
			delete(s.byKey, k)
			continue
		}
		if ses.principal == nil && (oldest == nil || ses.seen.Before(oldest.seen)) {
			oldestKey, oldest = k, ses
		}
	}
	if len(s.byKey) >= SessionsMax && oldest != nil {
		delete(s.byKey, oldestKey)
	}
}

// expired reports whether ses has been idle too long or lived too long at
// now.
func (s *sessions) expired(ses *session, now time.Time) bool {
	lifetime := s.lifetime
	if ses.principal == nil {
		lifetime = min(lifetime, anonymousLifetime)
	}
	return !now.Before(ses.seen.Add(s.idle)) || !now.Before(ses.created.Add(lifetime))
}

// get returns the live session with ID id and marks it seen; an expired
// one is removed and not returned.
func (s *sessions) get(id string) (*session, bool) {
	if id == "" {
		return nil, false
	}
	key := sha256.Sum256([]byte(id))
	s.mu.Lock()
	defer s.mu.Unlock()
	ses, ok := s.byKey[key]
	if !ok {
		return nil, false
	}
	now := s.clock.Now()
	if s.expired(ses, now) {
		delete(s.byKey, key)
		return nil, false
	}
	ses.seen = now
	return ses, true
}

// revoke ends the session with ID id, if there is one.
func (s *sessions) revoke(id string) {
	key := sha256.Sum256([]byte(id))
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.byKey, key)
}

// setFlash and takeFlash keep a one-time message in a session;
// setRefusal and takeRefusal a one-time refusal, for the page an action
// that was refused redirects to.
func (s *sessions) setFlash(ses *session, msg string)   { s.set(&ses.flash, msg) }
func (s *sessions) takeFlash(ses *session) string       { return s.take(&ses.flash) }
func (s *sessions) setRefusal(ses *session, msg string) { s.set(&ses.refusal, msg) }
func (s *sessions) takeRefusal(ses *session) string     { return s.take(&ses.refusal) }

// set and take write and read-and-clear one of a session's one-time
// messages under the lock.
func (s *sessions) set(field *string, msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	*field = msg
}

func (s *sessions) take(field *string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	msg := *field
	*field = ""
	return msg
}

// count returns the number of sessions held (expired ones included until
// they are next looked at or evicted).
func (s *sessions) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byKey)
}
