package reports

import (
	"time"
)

// sampleReport builds a representative report with every section filled:
// checks with fixture and live results (one failing), sweeps, outcomes, a
// few series, a fixture and a live timeline, and the failed attempt with
// its violation. Generated is a fixed instant; stable zeroes it for
// golden comparisons, as it would the real generator's wall-clock time.
// sampleGenerated is when the sample report claims to have been written.
var sampleGenerated = time.Date(2026, 11, 2, 9, 30, 0, 0, time.UTC).Format(time.RFC3339)

func sampleReport() Report {
	fixtureCmd := "make sim SEED=1 SEEDS=2000 SCENARIO=portfolio"
	return Report{
		Title:     "leasehold evidence",
		Generated: sampleGenerated,
		Pass:      false,
		Versions: Versions{
			Module: "github.com/leasehold/leasehold",
			Commit: "643d030a5b2c9e1f7d8a4b6c3e2f1a0b9c8d7e6f",
			Go:     "go1.26.8",
			SQLite: "3.50.4 (modernc.org/sqlite v1.62.0)",
			Schema: 2,
		},
		Pragmas: []string{"busy_timeout(5000)", "journal_mode(WAL)", "synchronous(FULL)", "foreign_keys(1)"},
		Checks: []Check{
			{ID: "A1", Title: "A task never executes under two valid claims", Results: []Result{
				{Kind: Fixture, Inputs: "portfolio, seeds 1–2000, all fault mixes", Observed: "0 violations of single-valid-claim in 2000 seeds", Pass: true, Command: fixtureCmd},
				{Kind: Live, Inputs: "2 workers, w1 frozen past its 2s lease", Observed: "w1's late completion refused (stale fence 1 < 2); w2 completed under fence 2", Pass: true, Command: "make demo"},
			}},
			{ID: "A2", Title: "A customer-visible action is never repeated", Results: []Result{
				{Kind: Fixture, Inputs: "effects scenario, seeds 1–500, lost responses | duplicate deliveries", Observed: "every operation applied at most once; 37 uncertain effects routed to needs_review", Pass: true, Command: "make sim SEED=1 SEEDS=500 SCENARIO=effects"},
			}},
			{ID: "A3", Title: "Duplicate submission returns the original task", Results: []Result{
				{Kind: Live, Inputs: "submit with key k-1 twice, same payload", Observed: "task_id=t_12d970fe replay=true", Pass: true, Command: "make demo"},
			}},
			{ID: "A4", Title: "Queue wait is reported apart from run time", Results: []Result{
				{Kind: Live, Inputs: "portfolio demo, 24 tasks", Observed: "p95 queue wait 1840 ms; p95 run time 2310 ms; 1 sample missing from the run-time histogram", Pass: false, Command: "make demo"},
			}},
		},
		Fixture: Section{
			Kind: Fixture,
			About: []string{
				"The real SQLite queue under a fake clock starting at 2026-01-01T00:00:00Z, one connection, workers stepped one at a time.",
				"Each seed splits into scheduler, faults, workload and jitter sources; the trace's SHA-256 is the fingerprint.",
			},
			Sweeps: []Sweep{
				{Scenario: "portfolio", From: 1, Seeds: 2000, Passed: 2000, Failed: 0,
					Faults: "busy 2%, commit-lost 1%, crash 1%, stall 2%, duplicate 1%",
					Fingerprints: []Fingerprint{
						{Seed: 1, Fingerprint: "9f2c4e1ab37d5c8e0f1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f70"},
						{Seed: 2, Fingerprint: "03be7d9c1f2a4b6c8d0e1f2a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e"},
						{Seed: 3, Fingerprint: "c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b"},
					},
					Command: fixtureCmd},
				{Scenario: "effects", From: 1, Seeds: 500, Passed: 500, Failed: 0,
					Faults: "lost-response 5%, crash 2%",
					Fingerprints: []Fingerprint{
						{Seed: 1, Fingerprint: "5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d"},
					},
					Command: "make sim SEED=1 SEEDS=500 SCENARIO=effects"},
			},
			Timelines: []Timeline{crashTimeline()},
		},
		Live: Section{
			Kind: Live,
			About: []string{
				"Two worker processes (w1, w2) over a file-backed database in WAL mode, lease 2s, heartbeat 500ms.",
				"Machine: linux/amd64, 2 CPUs; started 2026-11-29T11:31:55Z, ran 25.3 s of wall time.",
			},
			Outcomes: []Outcome{
				{Name: "exact duplicate submission", Expected: "the original task ID with replay=true", Observed: "task_id=t_12d970fe replay=true", Pass: true, AtMs: 170},
				{Name: "crash and takeover", Expected: "w2 claims under fence 2 after w1's lease expires", Observed: "claimed at 4210 ms under fence 2; w1's write refused", Pass: true, AtMs: 4210},
				{Name: "approval pause", Expected: "waiting_for_approval, then resumes from its checkpoint", Observed: "resumed at step 3 after approve --version 4", Pass: true, AtMs: 9800},
			},
			Series:    liveSeries(),
			Timelines: []Timeline{liveTimeline()},
		},
		Failed: &Attempt{
			Title: "Completion that checked only the state let a zombie finish a re-claimed task",
			Story: []string{
				"The broken variant drops the fence from the completion's WHERE clause and keeps only state = 'running'.",
				"The simulator caught it on seed 41: w1 stalled past its lease, the reaper requeued the task, w2 claimed it under fence 2, and w1 woke and completed it under fence 1.",
				"The fix fences every worker write; the same 2000 seeds against the real queue pass.",
			},
			Variant:   "complete-ignores-fence",
			Scenario:  "portfolio",
			Seed:      41,
			SeedsRun:  41,
			Invariant: "single-valid-claim",
			Detail:    "task t_7f3a accepted a write under fence 1 after fence 2 was accepted",
			Shrunk: []string{
				"submit t_7f3a steps=2",
				"w1 claim -> fence 1",
				"w1 stall 2500ms",
				"reap -> queued (attempt 1 charged)",
				"w2 claim -> fence 2",
				"w1 complete fence=1 -> accepted (BUG)",
			},
			Replay:    "LEASEHOLD_BROKEN=complete-ignores-fence go test -tags leasehold_broken ./sim -run TestBrokenVariantsCaught/complete-ignores-fence -seed 41",
			FixedRun:  "make sim SEED=1 SEEDS=2000 SCENARIO=portfolio",
			FixedPass: true,
			Timeline:  failedTimeline(),
		},
		Commands: []Command{
			{What: "fixture sweeps (portfolio)", Command: fixtureCmd},
			{What: "fixture sweeps (effects)", Command: "make sim SEED=1 SEEDS=500 SCENARIO=effects"},
			{What: "live run, outcomes and series", Command: "make demo"},
			{What: "this report", Command: "make evidence"},
		},
	}
}

// crashTimeline is a fixture crash and takeover: w1 crashes holding the
// claim, its lease expires, w2 takes over under fence 2.
func crashTimeline() Timeline {
	return Timeline{
		Title: "Crash and takeover (portfolio, seed 7)", Kind: Fixture, Unit: "simulated ms",
		Start: 0, End: 9000, Lanes: []string{"w1", "w2"},
		Bars: []Bar{
			{Lane: "w1", Start: 200, End: 2600, TaskID: "t_1a2b", Attempt: 1, Fence: 1, Label: "t_1a2b f1", Detail: "crashed at 2600 ms"},
			{Lane: "w2", Start: 4700, End: 7900, TaskID: "t_1a2b", Attempt: 2, Fence: 2, Label: "t_1a2b f2", Detail: "completed"},
			{Lane: "w2", Start: 300, End: 1500, TaskID: "t_9c8d", Attempt: 1, Fence: 1, Label: "t_9c8d f1", Detail: "completed"},
		},
		Marks: []Mark{
			{Lane: "w1", At: 200, Kind: MarkState, Label: "queued→running", Detail: "task t_1a2b attempt 1 fence 1", TaskID: "t_1a2b"},
			{Lane: "w1", At: 700, Kind: MarkHeartbeat, Label: "heartbeat", Detail: "task t_1a2b fence 1", TaskID: "t_1a2b"},
			{Lane: "w1", At: 1200, Kind: MarkHeartbeat, Label: "heartbeat", Detail: "task t_1a2b fence 1", TaskID: "t_1a2b"},
			{Lane: "w1", At: 1700, Kind: MarkEffect, Label: "charge", Detail: "task t_1a2b fence 1 op t_1a2b/s1", TaskID: "t_1a2b"},
			{Lane: "w1", At: 2600, Kind: MarkFault, Label: "crash", Detail: "worker w1 crashed"},
			{Lane: "", At: 4500, Kind: MarkExpiry, Label: "lease expired", Detail: "task t_1a2b fence 1 attempt 1 charged"},
			{Lane: "w2", At: 4700, Kind: MarkState, Label: "queued→running", Detail: "task t_1a2b attempt 2 fence 2", TaskID: "t_1a2b"},
			{Lane: "w2", At: 5200, Kind: MarkHeartbeat, Label: "heartbeat", Detail: "task t_1a2b fence 2", TaskID: "t_1a2b"},
			{Lane: "w2", At: 7900, Kind: MarkState, Label: "running→completed", Detail: "task t_1a2b attempt 2 fence 2", TaskID: "t_1a2b"},
		},
		Shades:  []Shade{{Start: 2600, End: 4700, Label: "w1 crashed", Lane: "w1"}},
		Caption: "w1 crashes holding fence 1; the reaper expires its lease; w2 takes over under fence 2 and the charge is not repeated.",
	}
}

// liveTimeline is a live crash and takeover with an approval pause, on
// the wall clock.
func liveTimeline() Timeline {
	return Timeline{
		Title: "Live: freeze, expiry, takeover and an approval pause", Kind: Live, Unit: "wall ms",
		Start: 0, End: 12000, Lanes: []string{"w1", "w2"},
		Bars: []Bar{
			{Lane: "w1", Start: 150, End: 2100, TaskID: "t_12d9", Attempt: 1, Fence: 1, Label: "t_12d9 f1", Detail: "frozen by SIGSTOP at 1100 ms"},
			{Lane: "w2", Start: 4210, End: 6100, TaskID: "t_12d9", Attempt: 2, Fence: 2, Label: "t_12d9 f2", Detail: "completed"},
			{Lane: "w2", Start: 800, End: 3300, TaskID: "t_44aa", Attempt: 1, Fence: 3, Label: "t_44aa f3", Detail: "paused for approval"},
			{Lane: "w2", Start: 1400, End: 2900, TaskID: "t_5e01", Attempt: 1, Fence: 1, Label: "t_5e01 f1", Detail: "completed; w2 runs two claims at once"},
			{Lane: "w1", Start: 9800, End: 11400, TaskID: "t_44aa", Attempt: 1, Fence: 5, Label: "t_44aa f5", Detail: "resumed from checkpoint step 3"},
		},
		Marks: []Mark{
			{Lane: "w1", At: 600, Kind: MarkHeartbeat, Label: "heartbeat", Detail: "task t_12d9 fence 1"},
			{Lane: "w1", At: 1100, Kind: MarkHeartbeat, Label: "heartbeat", Detail: "task t_12d9 fence 1"},
			{Lane: "", At: 4100, Kind: MarkExpiry, Label: "lease expired", Detail: "task t_12d9 fence 1"},
			{Lane: "w1", At: 6400, Kind: MarkStale, Label: "late complete refused", Detail: "task t_12d9 attempt 1 fence 1 (current 2)"},
			{Lane: "w2", At: 3300, Kind: MarkState, Label: "running→waiting_for_approval", Detail: "task t_44aa version 4", TaskID: "t_44aa"},
			{Lane: "w2", At: 2000, Kind: MarkEffect, Label: "email", Detail: "task t_5e01 fence 1 op t_5e01/s2", TaskID: "t_5e01"},
			{Lane: "w2", At: 2900, Kind: MarkState, Label: "running→completed", Detail: "task t_5e01 fence 1", TaskID: "t_5e01"},
			{Lane: "", At: 9500, Kind: MarkState, Label: "approved v4", Detail: "task t_44aa approved by manager"},
			{Lane: "w1", At: 11400, Kind: MarkState, Label: "running→completed", Detail: "task t_44aa fence 5", TaskID: "t_44aa"},
		},
		Shades:  []Shade{{Start: 1100, End: 6300, Label: "w1 frozen (SIGSTOP)", Lane: "w1"}},
		Caption: "w1 is frozen past its lease; w2 takes over; w1's late write is refused. t_44aa pauses for approval and resumes.",
	}
}

// failedTimeline is the broken variant's run: the zombie's completion
// under fence 1 accepted after fence 2.
func failedTimeline() *Timeline {
	return &Timeline{
		Title: "Broken variant complete-ignores-fence, seed 41", Kind: Fixture, Unit: "simulated ms",
		Start: 0, End: 6000, Lanes: []string{"w1", "w2"},
		Bars: []Bar{
			{Lane: "w1", Start: 100, End: 5200, TaskID: "t_7f3a", Attempt: 1, Fence: 1, Label: "t_7f3a f1", Detail: "stalled 2500 ms, then completed (accepted: the bug)"},
			{Lane: "w2", Start: 3100, End: 5600, TaskID: "t_7f3a", Attempt: 2, Fence: 2, Label: "t_7f3a f2", Detail: "re-claimed after expiry"},
		},
		Marks: []Mark{
			{Lane: "w1", At: 100, Kind: MarkState, Label: "queued→running", Detail: "task t_7f3a attempt 1 fence 1"},
			{Lane: "w1", At: 600, Kind: MarkHeartbeat, Label: "heartbeat", Detail: "task t_7f3a fence 1"},
			{Lane: "", At: 2900, Kind: MarkExpiry, Label: "lease expired", Detail: "task t_7f3a fence 1"},
			{Lane: "w2", At: 3100, Kind: MarkState, Label: "queued→running", Detail: "task t_7f3a attempt 2 fence 2"},
			{Lane: "w2", At: 3400, Kind: MarkEffect, Label: "charge", Detail: "task t_7f3a fence 2 op t_7f3a/s1"},
		},
		Shades:    []Shade{{Start: 700, End: 3200, Label: "w1 stalled past its lease", Lane: "w1"}},
		Violation: &Mark{Lane: "w1", At: 5200, Kind: MarkViolation, Label: "single-valid-claim: fence 1 accepted after fence 2", Detail: "task t_7f3a attempt 1 fence 1 op complete"},
		Caption:   "the zombie w1 completes under fence 1 while w2 holds fence 2",
	}
}

// liveSeries is a few live series: depth by state in one chart, the
// oldest queued task's age, counters in one chart, queue wait and run
// time in charts of their own.
func liveSeries() []Series {
	const samples = 26
	depth := func(name string, at func(i int) float64) Series {
		s := Series{Name: name, Unit: "tasks", Chart: "Queue depth by state"}
		for i := range samples {
			s.Points = append(s.Points, Point{X: int64(i) * 1000, Y: at(i)})
		}
		return s
	}
	counter := func(name string, at func(i int) float64) Series {
		s := Series{Name: name, Unit: "tasks", Chart: "Completions, failures, retries, budget exhaustions"}
		for i := range samples {
			s.Points = append(s.Points, Point{X: int64(i) * 1000, Y: at(i)})
		}
		return s
	}
	oldest := Series{Name: "Age of the oldest queued task", Unit: "ms"}
	for i := range samples {
		oldest.Points = append(oldest.Points, Point{X: int64(i) * 1000, Y: float64(max(0, 1800-(i%9)*220))})
	}
	wait := Series{Name: "Queue wait (submitted → claimed)", Unit: "ms"}
	run := Series{Name: "Run time (claimed → settled)", Unit: "ms"}
	for i := range 24 {
		wait.Points = append(wait.Points, Point{X: int64(200 + i*1000), Y: float64(120 + (i*37)%900)})
		run.Points = append(run.Points, Point{X: int64(900 + i*1000), Y: float64(800+(i*53)%1600) + 0.5})
	}
	return []Series{
		depth("queued", func(i int) float64 { return float64(max(0, 24-i*2)) }),
		depth("running", func(i int) float64 { return float64(min(4, 24-min(24, i))) }),
		depth("waiting_for_approval", func(i int) float64 {
			if i >= 3 && i < 10 {
				return 1
			}
			return 0
		}),
		oldest,
		counter("completions", func(i int) float64 { return float64(min(22, i)) }),
		counter("failures", func(i int) float64 { return float64(min(1, i/12)) }),
		counter("retries", func(i int) float64 { return float64(min(3, i/5)) }),
		counter("budget exhaustions", func(i int) float64 { return float64(min(1, i/20)) }),
		wait,
		run,
	}
}
