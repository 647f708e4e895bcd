package main

import (
	"bufio"
	"bytes"
	"os"
	"runtime"
	"strconv"
	"strings"
)

// hostLine names the machine the run is on: its name, its processor and
// how many cores it has. Two processes of a cell on a two-core machine
// measure contention for the server, not scale-out; the report says so
// by stating the cores.
func hostLine() string {
	name, _ := os.Hostname()
	model := "unknown processor"
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	return "host " + name + ", " + model + ", " + strconv.Itoa(runtime.NumCPU()) + " cores"
}

// loadLine is the machine's load averages (1, 5 and 15 minutes), which
// say how much else ran beside the bench.
func loadLine() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "load unknown"
	}
	f := bytes.Fields(data)
	if len(f) < 3 {
		return "load unknown"
	}
	return "load averages " + string(f[0]) + " " + string(f[1]) + " " + string(f[2])
}
