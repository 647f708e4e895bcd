package cli

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/leasehold/leasehold/cmd/leasehold/internal/evidence"
)

// printRecord prints a seed's record as text, or as one JSON line.
func printRecord(e *env, rec evidence.SeedRecord, asJSON bool) {
	if asJSON {
		writeJSONLine(e.stdout, rec)
		return
	}
	printSeedText(e.stdout, rec, nil)
}

// printSeedText prints a seed's trace lines, if any, then its record as
// text, then what --check-determinism and --shrink found.
func printSeedText(w io.Writer, rec evidence.SeedRecord, trace []string) {
	for _, line := range trace {
		fmt.Fprintln(w, line)
	}
	fmt.Fprintf(w, "seed: %d\nscenario: %s\nfaults: %s\nfingerprint: %s\n", rec.Seed, rec.Scenario, rec.Faults, rec.Fingerprint)
	if rec.Pass {
		fmt.Fprintln(w, "verdict: pass")
	} else {
		fmt.Fprintln(w, "verdict: fail")
		fmt.Fprintf(w, "broken: %s\n", rec.Summary)
		fmt.Fprintln(w, "events leading to it:")
		for _, line := range rec.Tail {
			fmt.Fprintf(w, "  %s\n", line)
		}
		fmt.Fprintf(w, "reproduce: %s\n", rec.Reproduce)
	}
	switch {
	case rec.Deterministic == nil:
	case *rec.Deterministic:
		fmt.Fprintln(w, "determinism: same fingerprint twice")
	default:
		fmt.Fprintln(w, "determinism: FAILED: a second run gave another fingerprint")
	}
	if s := rec.Shrunk; s != nil {
		if s.Stopped {
			fmt.Fprintln(w, "shrink interrupted: the shortest schedule found so far")
		}
		fmt.Fprintf(w, "shrunk: %d of %d events still break %s\n", len(s.Keep), s.Of, s.Broken)
		for i, ev := range s.Events {
			fmt.Fprintf(w, "  %d %s\n", s.Keep[i], ev)
		}
		fmt.Fprintf(w, "replay: %s\n", s.Replay)
	}
}

// writeJSONLine writes v as one line of JSON.
func writeJSONLine(w io.Writer, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("sim: a record does not encode: %v", err)) // every field is a plain value
	}
	w.Write(append(b, '\n'))
}

// readSeedRecords reads the seed records of sim --json output, in order;
// summary records are skipped. A line that is not a record is an error.
func readSeedRecords(out []byte) ([]evidence.SeedRecord, error) {
	recs, _, err := evidence.ReadRecords(out)
	return recs, err
}
