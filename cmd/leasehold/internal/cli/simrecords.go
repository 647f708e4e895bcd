package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"

	"github.com/leasehold/leasehold/scenarios"
	"github.com/leasehold/leasehold/sim"
)

// Record kinds sim --json prints, one JSON object a line.
const (
	recordSeed    = "seed"
	recordSummary = "summary"
)

// seedRecord is one seed's result as sim --json prints it, and as a sweep's
// parent reads it from its children.
type seedRecord struct {
	Record      string       `json:"record"`
	Scenario    string       `json:"scenario"`
	Seed        uint64       `json:"seed"`
	Faults      string       `json:"faults"`
	Fingerprint string       `json:"fingerprint"`
	Pass        bool         `json:"pass"`
	Broken      string       `json:"broken,omitempty"`  // what broke: an invariant, liveness, expectation or anomaly
	Summary     string       `json:"summary,omitempty"` // the failure on one line
	Tail        []string     `json:"tail,omitempty"`    // the trace lines leading to the failure
	Reproduce   string       `json:"reproduce"`
	Events      int          `json:"events"`
	Rounds      int          `json:"rounds"`
	SimulatedMs int64        `json:"simulated_ms"`
	Coverage    sim.Coverage `json:"coverage"`
	// Deterministic is set by --check-determinism: whether a second run
	// gave the same fingerprint.
	Deterministic *bool `json:"deterministic,omitempty"`
	// Shrunk is set by --shrink on a failed seed.
	Shrunk *shrunkRecord `json:"shrunk,omitempty"`
	// Trace is every trace line, with --trace.
	Trace []string `json:"trace,omitempty"`
}

// shrunkRecord is a failed seed's schedule shrunk to the fewest events that
// still break the same thing.
type shrunkRecord struct {
	Broken string   `json:"broken"` // what the shrunk run still breaks
	Of     int      `json:"of"`     // the events of the whole schedule
	Keep   []int    `json:"keep"`   // the kept events' indices
	Events []string `json:"events"` // the kept events, as schedules print them
	Replay string   `json:"replay"` // the command that replays the shrunk run
}

// summaryRecord closes a scenario's records: the sweep's counts, its merged
// coverage and the declared cells no seed reached.
type summaryRecord struct {
	Record      string `json:"record"`
	Scenario    string `json:"scenario"`
	From        uint64 `json:"from"`
	Seeds       int    `json:"seeds"`
	Passed      int    `json:"passed"`
	Failed      int    `json:"failed"`
	FirstFailed uint64 `json:"first_failed,omitempty"`
	// CoverageEnforced: the sweep is long enough that a declared cell no
	// seed reached fails it; Unreached lists those cells either way.
	CoverageEnforced bool             `json:"coverage_enforced"`
	Unreached        []scenarios.Cell `json:"unreached"`
	Coverage         sim.Coverage     `json:"coverage"`
	Pass             bool             `json:"pass"`
}

// seedRecordOf turns a run's result into its record.
func seedRecordOf(r sim.Result) seedRecord {
	rec := seedRecord{Record: recordSeed, Scenario: r.Scenario, Seed: r.Seed, Faults: r.Mix.String(), Fingerprint: r.Fingerprint,
		Pass: r.Pass, Reproduce: r.Command(), Events: r.Events, Rounds: r.Rounds, SimulatedMs: r.Simulated.Milliseconds(),
		Coverage: r.Coverage}
	if !r.Pass {
		rec.Broken, rec.Summary, rec.Tail = r.Broken(), r.Summary(), r.Tail
	}
	return rec
}

// printRecord prints a seed's record as text, or as one JSON line.
func printRecord(e *env, rec seedRecord, asJSON bool) {
	if asJSON {
		writeJSONLine(e.stdout, rec)
		return
	}
	printSeedText(e.stdout, rec, nil)
}

// printSeedText prints a seed's trace lines, if any, then its record as
// text, then what --check-determinism and --shrink found.
func printSeedText(w io.Writer, rec seedRecord, trace []string) {
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
func readSeedRecords(out []byte) ([]seedRecord, error) {
	recs, _, err := readRecords(out)
	return recs, err
}

// readRecords reads sim --json output: its seed records and its summary
// records, each in order. A line that is not a record is an error.
func readRecords(out []byte) ([]seedRecord, []summaryRecord, error) {
	var recs []seedRecord
	var sums []summaryRecord
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Bytes()
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var kind struct {
			Record string `json:"record"`
		}
		if err := json.Unmarshal(line, &kind); err != nil {
			return recs, sums, fmt.Errorf("line %d is not a record: %w", n, err)
		}
		var err error
		switch kind.Record {
		case recordSeed:
			var rec seedRecord
			err = json.Unmarshal(line, &rec)
			recs = append(recs, rec)
		case recordSummary:
			var sum summaryRecord
			err = json.Unmarshal(line, &sum)
			sums = append(sums, sum)
		default:
			err = fmt.Errorf("unknown record %q", kind.Record)
		}
		if err != nil {
			return recs, sums, fmt.Errorf("line %d: %w", n, err)
		}
	}
	return recs, sums, sc.Err()
}
