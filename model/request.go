package model

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Intake bounds. Every field of a request has one.
const (
	UserLengthMax   = 64
	KeyLengthMax    = 128
	PayloadBytesMax = 64 << 10
	CostBudgetMax   = 1_000_000_000
	StepsMaxLimit   = 10_000
	PriorityMin     = -100
	PriorityMax     = 100
	KindLengthMax   = 64
)

// PayloadValidator checks a payload of one kind, given in canonical JSON,
// before anything is stored. A refusal names the path inside the payload
// (a *ValidationError whose Field is steps[2].fail) and the rule, never a
// value: its message may reach a caller, a log or an event.
type PayloadValidator func(payload json.RawMessage) error

// KindSynthetic is the kind of a request that names none: the synthetic
// payload the demo, the simulator and the chaos workload run.
const KindSynthetic = "synthetic"

// timeMin and timeMax bound run_at and deadline, both included: a time
// outside them is almost certainly a unit mistake (seconds for
// milliseconds, or a zero date).
var (
	timeMin = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	timeMax = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)
)

// SubmitRequest is a caller's request to run a task.
type SubmitRequest struct {
	User string
	Key  string // idempotency key, unique per user
	// Kind names the handler that runs the task (CheckKind); empty is
	// KindSynthetic.
	Kind       string
	Payload    string // a JSON object
	CostBudget int64
	StepsMax   int
	Priority   int
	RunAt      time.Time // zero: as soon as possible
	Deadline   time.Time // zero: none
	// ScheduleID and ScheduleRun are set only by the queue's scheduler.
	ScheduleID  string
	ScheduleRun int64
}

// SubmitResult is the outcome of an accepted submit.
type SubmitResult struct {
	TaskID string
	// Replay is true when the request repeated an earlier one exactly and
	// the original task's ID was returned; nothing was written.
	Replay bool
}

// Normalized is a validated request in canonical form, its kind's
// defaults applied (NormalizeWith).
type Normalized struct {
	SubmitRequest
	// Hash is the hex SHA-256 of the canonical request as sent: before
	// any default filled a field it left zero.
	Hash string
}

// RequestDefaults are what a kind gives a request that names no cost
// budget or step limit of its own (a kinds file's defaults): a field left
// zero in the request takes the default's, when the default is set. They
// are applied after the request is hashed, so that the hash is the
// request's as sent (see NormalizeWith).
type RequestDefaults struct {
	CostBudget int64
	StepsMax   int
}

// fill returns r with its cost budget and step limit taken from d where r
// names none (zero) and d has one.
func (d RequestDefaults) fill(r SubmitRequest) SubmitRequest {
	if r.CostBudget == 0 && d.CostBudget != 0 {
		r.CostBudget = d.CostBudget
	}
	if r.StepsMax == 0 && d.StepsMax != 0 {
		r.StepsMax = d.StepsMax
	}
	return r
}

// Normalize validates every field of r and returns it in canonical form:
// the payload canonical JSON, the times UTC at millisecond precision, and
// the SHA-256 of the canonical request. It does not depend on the clock, so
// a replay is recognised whenever it arrives; time-relative checks (a
// deadline already passed) belong to CheckTimely. It is NormalizeWith
// with no defaults.
func Normalize(r SubmitRequest) (Normalized, error) { return NormalizeWith(r, nil) }

// NormalizeWith is Normalize for an intake whose kinds have defaults
// (by kind): the request is put in canonical form and hashed as sent,
// then its kind's defaults fill the cost budget and step limit it names
// none of, and only then are those bounds checked. So a request hashes
// the same whatever defaults the intake has, a replay of it as sent is
// recognised after the defaults change, and a request that names its
// budget is never touched by a default.
func NormalizeWith(r SubmitRequest, defaults map[string]RequestDefaults) (Normalized, error) {
	if err := CheckName("user", r.User); err != nil {
		return Normalized{}, err
	}
	if err := checkName("key", r.Key, KeyLengthMax, isKeyByte); err != nil {
		return Normalized{}, err
	}
	kind, err := NormalizeKind("kind", r.Kind)
	if err != nil {
		return Normalized{}, err
	}
	payload, err := normalizePayload(r.Payload)
	if err != nil {
		return Normalized{}, err
	}
	filled := defaults[kind].fill(r)
	if filled.CostBudget < 1 || filled.CostBudget > CostBudgetMax {
		return Normalized{}, invalid("cost_budget", "must be between 1 and %d, got %d", CostBudgetMax, filled.CostBudget)
	}
	if filled.StepsMax < 1 || filled.StepsMax > StepsMaxLimit {
		return Normalized{}, invalid("steps_max", "must be between 1 and %d, got %d", StepsMaxLimit, filled.StepsMax)
	}
	if r.Priority < PriorityMin || r.Priority > PriorityMax {
		return Normalized{}, invalid("priority", "must be between %d and %d, got %d", PriorityMin, PriorityMax, r.Priority)
	}
	runAt, err := normalizeTime("run_at", r.RunAt)
	if err != nil {
		return Normalized{}, err
	}
	deadline, err := normalizeTime("deadline", r.Deadline)
	if err != nil {
		return Normalized{}, err
	}
	if !deadline.IsZero() && !runAt.IsZero() && !deadline.After(runAt) {
		return Normalized{}, invalid("deadline", "must be after run_at")
	}
	sent := r
	sent.Kind, sent.Payload, sent.RunAt, sent.Deadline = kind, payload, runAt, deadline
	n := Normalized{SubmitRequest: sent, Hash: requestHash(sent)}
	n.CostBudget, n.StepsMax = filled.CostBudget, filled.StepsMax
	return n, nil
}

// CheckTimely refuses a new request whose deadline has already passed at
// now (truncated to the stored millisecond), by the rule Task.PastDeadline
// states: a deadline equal to now has not passed, so such a task is
// accepted and claimable at once. It is not applied to exact replays.
func (n Normalized) CheckTimely(now time.Time) error {
	if deadlinePassed(n.Deadline, Truncate(now)) {
		return invalid("deadline", "%s has already passed", n.Deadline.Format(time.RFC3339Nano))
	}
	return nil
}

func checkName(field, value string, lengthMax int, allowed func(byte) bool) error {
	if value == "" {
		return invalid(field, "required")
	}
	if len(value) > lengthMax {
		return invalid(field, "longer than %d bytes", lengthMax)
	}
	for i := 0; i < len(value); i++ {
		if !allowed(value[i]) {
			return invalid(field, "%s at offset %d is not allowed", describeChar(value[i:]), i)
		}
	}
	return nil
}

// describeChar names the character s starts with as it reads: a printable
// one quoted as itself ('ü', not the first byte of its encoding), any
// other by its code point, and a byte that starts no valid UTF-8 by its
// value.
func describeChar(s string) string {
	r, size := utf8.DecodeRuneInString(s)
	switch {
	case r == utf8.RuneError && size <= 1:
		return fmt.Sprintf("byte 0x%02X (not UTF-8)", s[0])
	case unicode.IsPrint(r):
		return fmt.Sprintf("character %q", r)
	}
	return fmt.Sprintf("character %U", r)
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func isUserByte(c byte) bool { return isAlnum(c) || c == '.' || c == '_' || c == '-' || c == '@' }

func isKeyByte(c byte) bool {
	return isAlnum(c) || c == '.' || c == '_' || c == '-' || c == ':' || c == '/'
}

// NormalizeKind returns a request's kind: KindSynthetic when empty, else
// the name itself once CheckKind passes it.
func NormalizeKind(field, kind string) (string, error) {
	if kind == "" {
		return KindSynthetic, nil
	}
	if err := CheckKind(field, kind); err != nil {
		return "", err
	}
	return kind, nil
}

// CheckKind validates a kind's name: 1 to 64 bytes, a lower-case letter
// first, then lower-case letters, digits and ._- (a name that is safe in
// a URL's query, a metric label and a file name). The error names field.
func CheckKind(field, kind string) error {
	if err := checkName(field, kind, KindLengthMax, isKindByte); err != nil {
		return err
	}
	if kind[0] < 'a' || kind[0] > 'z' {
		return invalid(field, "must start with a lower-case letter")
	}
	return nil
}

func isKindByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
}

// CheckName validates a user, actor or worker name: 1 to 64 bytes of
// letters, digits and ._-@, and neither "." nor "..", which are path
// segments of their own (a URL holding a user's name would name another
// resource: /v1/limits/users/.. is /v1/limits). The error names field.
func CheckName(field, value string) error {
	if err := checkName(field, value, UserLengthMax, isUserByte); err != nil {
		return err
	}
	if IsDotSegment(value) {
		return invalid(field, "%q is a path segment of its own (. and .. are not names)", value)
	}
	return nil
}

// IsDotSegment reports whether s is "." or "..": a path segment that
// names the segment itself or its parent, never a resource of its own.
func IsDotSegment(s string) bool { return s == "." || s == ".." }

func normalizePayload(p string) (string, error) {
	if p == "" {
		return "", invalid("payload", "required")
	}
	if len(p) > PayloadBytesMax {
		return "", invalid("payload", "larger than %d bytes (%d)", PayloadBytesMax, len(p))
	}
	if !utf8.ValidString(p) {
		return "", invalid("payload", "not valid UTF-8")
	}
	trimmed := strings.TrimLeft(p, " \t\r\n")
	if !strings.HasPrefix(trimmed, "{") {
		return "", invalid("payload", "must be a JSON object")
	}
	canon, err := CanonicalJSON([]byte(p))
	if err != nil {
		return "", invalid("payload", "%v", err)
	}
	return canon, nil
}

func normalizeTime(field string, t time.Time) (time.Time, error) {
	if t.IsZero() {
		return t, nil
	}
	if err := CheckTimeRange(field, t); err != nil {
		return time.Time{}, err
	}
	return Truncate(t), nil
}

// CheckTimeRange refuses a time outside the bounds of run_at, deadline and
// a schedule's origin (2000-01-01T00:00:00Z to 9999-12-31T00:00:00Z, both
// included). The zero time is outside them: a parser that reads a time
// written as 0001-01-01T00:00:00Z refuses it here rather than pass it on
// as "not set".
func CheckTimeRange(field string, t time.Time) error {
	if t.Before(timeMin) || t.After(timeMax) {
		return invalid(field, "must be from %s to %s inclusive, got %s", timeMin.Format(time.RFC3339),
			timeMax.Format(time.RFC3339), t.UTC().Format(time.RFC3339Nano))
	}
	return nil
}

// requestHash hashes the canonical request: every field, in a fixed order,
// each length-prefixed so that no two requests share an encoding. The
// kind is hashed only when it is not KindSynthetic, after the other
// fields under a tag of its own: a synthetic request, whether it names
// its kind or not, hashes as every request did before tasks had kinds,
// so the hashes stored before then (tombstones keep only hashes) still
// recognise their replays.
func requestHash(r SubmitRequest) string {
	h := sha256.New()
	field := func(s string) {
		h.Write([]byte(strconv.Itoa(len(s))))
		h.Write([]byte{':'})
		h.Write([]byte(s))
	}
	field("leasehold.submit.v1")
	field(r.User)
	field(r.Key)
	field(r.Payload)
	field(strconv.FormatInt(r.CostBudget, 10))
	field(strconv.Itoa(r.StepsMax))
	field(strconv.Itoa(r.Priority))
	field(strconv.FormatInt(Millis(r.RunAt), 10))
	field(strconv.FormatInt(Millis(r.Deadline), 10))
	field(r.ScheduleID)
	field(strconv.FormatInt(r.ScheduleRun, 10))
	if r.Kind != KindSynthetic && r.Kind != "" {
		field("kind")
		field(r.Kind)
	}
	return hex.EncodeToString(h.Sum(nil))
}
