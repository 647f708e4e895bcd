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
	fmt.Fprintf(e.stdout, "seed: %d\nscenario: %s\nfaults: %s\nfingerprint: %s\n", rec.Seed, rec.Scenario, rec.Faults, rec.Fingerprint)
	if rec.Pass {
		fmt.Fprintln(e.stdout, "verdict: pass")
		return
	}
	fmt.Fprintln(e.stdout, "verdict: fail")
	fmt.Fprintf(e.stdout, "broken: %s\n", rec.Summary)
	fmt.Fprintln(e.stdout, "events leading to it:")
	for _, line := range rec.Tail {
		fmt.Fprintf(e.stdout, "  %s\n", line)
	}
	fmt.Fprintf(e.stdout, "reproduce: %s\n", rec.Reproduce)
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
	var recs []seedRecord
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
			return recs, fmt.Errorf("line %d is not a record: %w", n, err)
		}
		if kind.Record != recordSeed {
			continue
		}
		var rec seedRecord
		if err := json.Unmarshal(line, &rec); err != nil {
			return recs, fmt.Errorf("line %d: %w", n, err)
		}
		recs = append(recs, rec)
	}
	return recs, sc.Err()
}
