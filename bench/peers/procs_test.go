package main

import (
	"net/url"
	"testing"
)

func TestCellNamesCarryTheirProcesses(t *testing.T) {
	for _, c := range []struct {
		cell cell
		want string
	}{
		{cell{kind: "work", sync: pgSync, workers: 10, procs: 1}, "work PostgreSQL 10 workers ×1 process"},
		{cell{kind: "work", sync: pgSync, workers: 10, procs: 4}, "work PostgreSQL 10 workers ×4 processes"},
		{cell{kind: "intake", sync: pgSync, bulk: true, procs: 2}, "intake PostgreSQL bulk ×2 processes"},
		{cell{kind: "intake", sync: pgSync, procs: 4}, "intake PostgreSQL one at a time ×4 processes"},
		// SQLite's cells keep their names.
		{cell{kind: "work", sync: "FULL", workers: 10}, "work FULL 10 workers"},
		{cell{kind: "intake", sync: "NORMAL", bulk: true}, "intake NORMAL bulk"},
	} {
		if got := c.cell.String(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.cell, got, c.want)
		}
	}
}

func TestPlanHasEachProcessCountOnPostgreSQL(t *testing.T) {
	cells := plan(config{postgres: "postgres://x", procs: []int{1, 2, 4}, only: "PostgreSQL"})
	seen := map[int]int{}
	for _, c := range cells {
		if c.sync != pgSync {
			t.Fatalf("cell %s in a PostgreSQL-only plan", c)
		}
		seen[c.procs]++
	}
	if len(cells) != 9 || seen[1] != 3 || seen[2] != 3 || seen[4] != 3 {
		t.Fatalf("cells by processes %v (%d in all), want 3 each of 1, 2 and 4", seen, len(cells))
	}
}

func TestSumSizesAddsHistogramsOfUnequalLength(t *testing.T) {
	got := sumSizes([]childEnd{{Sizes: []int64{0, 2, 1}}, {Sizes: []int64{0, 1, 0, 0, 5}}, {}})
	want := []int64{0, 3, 1, 0, 5}
	if len(got) != len(want) {
		t.Fatalf("%v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("%v, want %v", got, want)
		}
	}
}

func TestWithParamKeepsTheOthers(t *testing.T) {
	got, err := withParam("postgres://u@h/db?sslmode=disable&search_path=s1", "application_name", "s1")
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(got)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	if q.Get("application_name") != "s1" || q.Get("search_path") != "s1" || q.Get("sslmode") != "disable" {
		t.Fatalf("%s", got)
	}
}
