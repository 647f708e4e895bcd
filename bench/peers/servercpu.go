package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// serverCPU is the CPU that the PostgreSQL server processes on this
// machine have spent so far: each running process named postgres (the
// postmaster, its helpers and the backends of open connections), and the
// postmaster's waited-for children (backends of closed connections). It
// reads /proc, so it says nothing (false) where there is no /proc or no
// local server; a server elsewhere is not measured. Every process of the
// server counts, so a run's figure includes whatever else the server did
// meanwhile (on the bench's machine: nothing but the run).
func serverCPU() (time.Duration, bool) {
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil || len(stats) == 0 {
		return 0, false
	}
	var ticks int64
	found := false
	for _, p := range stats {
		data, err := os.ReadFile(p)
		if err != nil {
			continue // ended meanwhile
		}
		name, fields, ok := procStat(data)
		if !ok || name != "postgres" || len(fields) < 15 {
			continue
		}
		found = true
		// Fields after the name, from state (field 3): utime is field 14,
		// stime 15, cutime 16, cstime 17. Children are counted for the
		// postmaster alone (its parent is not a postgres process), so that
		// a helper's children are not counted twice.
		for _, i := range []int{14, 15} {
			ticks += atoi(fields[i-3])
		}
		if ppid := atoi(fields[1]); !isPostgres(ppid) {
			for _, i := range []int{16, 17} {
				ticks += atoi(fields[i-3])
			}
		}
	}
	if !found {
		return 0, false
	}
	return time.Duration(ticks) * time.Second / clockTicks, true
}

// clockTicks is the kernel's USER_HZ, the unit of /proc's CPU times: 100
// on every Linux this bench runs on.
const clockTicks = 100

// procStat splits /proc/PID/stat into the command name and the fields
// after it (the name is in parentheses and may hold spaces).
func procStat(data []byte) (string, [][]byte, bool) {
	open, end := bytes.IndexByte(data, '('), bytes.LastIndexByte(data, ')')
	if open < 0 || end < open {
		return "", nil, false
	}
	return string(data[open+1 : end]), bytes.Fields(data[end+1:]), true
}

func isPostgres(pid int64) bool {
	data, err := os.ReadFile("/proc/" + strconv.FormatInt(pid, 10) + "/stat")
	if err != nil {
		return false
	}
	name, _, ok := procStat(data)
	return ok && name == "postgres"
}

func atoi(b []byte) int64 {
	n, _ := strconv.ParseInt(string(b), 10, 64)
	return n
}
