package evidence

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/leasehold/leasehold/scenarios"
	"github.com/leasehold/leasehold/sim"
)

// Record kinds sim --json prints, one JSON object a line.
const (
	RecordSeed    = sim.SeedLineRecord // what a sweep process prints for each seed
	RecordSummary = "summary"
)

// SeedRecord is one seed's result as sim --json prints it, and as a sweep's
// parent reads it from its children.
type SeedRecord struct {
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
	Stats       sim.Stats    `json:"stats"`
	// Deterministic is set by --check-determinism: whether a second run
	// gave the same fingerprint.
	Deterministic *bool `json:"deterministic,omitempty"`
	// Shrunk is set by --shrink on a failed seed.
	Shrunk *ShrunkRecord `json:"shrunk,omitempty"`
	// Trace is every trace line, with --trace.
	Trace []string `json:"trace,omitempty"`
	// Timeline is the run's timeline, when the run recorded one (sim
	// --report records the timelines its report may draw).
	Timeline *TimelineRecord `json:"timeline,omitempty"`
}

// TimelineRecord is a run's timeline as a seed record carries it.
type TimelineRecord struct {
	Workers int                 `json:"workers"`
	Entries []sim.TimelineEntry `json:"entries"`
}

// ShrunkRecord is a failed seed's schedule shrunk to the fewest events that
// still break the same thing.
type ShrunkRecord struct {
	Broken string   `json:"broken"` // what the shrunk run still breaks
	Of     int      `json:"of"`     // the events of the whole schedule
	Keep   []int    `json:"keep"`   // the kept events' indices
	Events []string `json:"events"` // the kept events, as schedules print them
	Replay string   `json:"replay"` // the command that replays the shrunk run
	// Stopped: an interruption ended the shrink early; Keep is the
	// shortest schedule found by then, and still breaks Broken.
	Stopped bool `json:"stopped,omitempty"`
}

// SummaryRecord closes a scenario's records: the sweep's counts, its merged
// coverage and the declared cells no seed reached.
type SummaryRecord struct {
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
	// Interrupted: a signal stopped the sweep; Seeds counts the seeds
	// judged from From before it stopped, of the Requested.
	Interrupted bool `json:"interrupted,omitempty"`
	Requested   int  `json:"requested,omitempty"`
}

// SeedRecordOf turns a run's result into its record.
func SeedRecordOf(r sim.Result) SeedRecord {
	rec := SeedRecord{Record: RecordSeed, Scenario: r.Scenario, Seed: r.Seed, Faults: r.Mix.String(), Fingerprint: r.Fingerprint,
		Pass: r.Pass, Reproduce: r.Command(), Events: r.Events, Rounds: r.Rounds, SimulatedMs: r.Simulated.Milliseconds(),
		Coverage: r.Coverage, Stats: r.Stats}
	if !r.Pass {
		rec.Broken, rec.Summary, rec.Tail = r.Broken(), r.Summary(), r.Tail
	}
	if r.Timeline != nil {
		rec.Timeline = &TimelineRecord{Workers: r.Workers, Entries: r.Timeline}
	}
	return rec
}

// ReadRecords reads sim --json output: its seed records and its summary
// records, each in order. A line that is not a record is an error.
func ReadRecords(out []byte) ([]SeedRecord, []SummaryRecord, error) {
	var recs []SeedRecord
	var sums []SummaryRecord
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
		case RecordSeed:
			var rec SeedRecord
			err = json.Unmarshal(line, &rec)
			recs = append(recs, rec)
		case RecordSummary:
			var sum SummaryRecord
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
