// Package randomid is the production IDSource: identifiers drawn from the
// operating system's cryptographic randomness, so that processes sharing
// one database never collide and an ID tells nothing of its neighbours.
//
// It is the one place outside cmd/ that reads crypto randomness. Every
// other package takes its identifiers from an injected model.IDSource
// (the simulator's derive from its seed), which keeps their behaviour a
// function of their inputs; a program hands this source to the queue:
//
//	q, err := queue.Open(ctx, queue.Options{Path: "leasehold.db", Clock: clockwork.NewRealClock(), IDs: randomid.Source{}})
package randomid

import (
	"crypto/rand"
	"encoding/hex"
	"io"

	"github.com/leasehold/leasehold/model"
)

// DigitsLen is how many hex digits follow an ID's prefix: 16, the same
// shape as the simulator's seeded IDs (64 random bits).
const DigitsLen = 16

// Source hands out identifiers of a prefix followed by DigitsLen random
// lowercase hex digits: with model.TaskIDPrefix, a valid task ID
// (model.CheckTaskID). It is safe for concurrent use; its zero value is
// ready.
type Source struct{}

var _ model.IDSource = Source{}

// Reader is the operating system's cryptographic randomness, for a
// program's secrets that are not IDs (the console's session IDs and CSRF
// tokens): a package that needs such bytes takes an io.Reader and
// defaults to this one, so that this stays the one place that reads it.
var Reader io.Reader = rand.Reader

// NewID returns prefix followed by DigitsLen random hex digits. It panics
// if the operating system has no randomness to give, which crypto/rand
// documents as irrecoverable.
func (Source) NewID(prefix string) string {
	var b [DigitsLen / 2]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("randomid: no randomness for IDs: " + err.Error())
	}
	return prefix + hex.EncodeToString(b[:])
}
