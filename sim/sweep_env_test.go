package sim

import (
	"os/exec"
	"slices"
	"testing"
)

// TestSweepProcessEnv checks that a sweep process gets one core, SQLite
// single-threaded and the sweep's collector target, that a GOGC the caller set is kept, and that
// the values it sets are the ones os/exec passes on.
func TestSweepProcessEnv(t *testing.T) {
	env := SweepProcessEnv([]string{"HOME=/h", "GOMAXPROCS=2"})
	if got := lastValue(env, "GOMAXPROCS"); got != "1" {
		t.Errorf("GOMAXPROCS = %q, want 1", got)
	}
	if got := lastValue(env, "GOGC"); got != "400" {
		t.Errorf("GOGC = %q, want 400", got)
	}
	if got := lastValue(env, SerialSQLiteEnv); got != "1" {
		t.Errorf("%s = %q, want 1", SerialSQLiteEnv, got)
	}
	if got := lastValue(env, "HOME"); got != "/h" {
		t.Errorf("HOME = %q, want /h (the parent's environment is kept)", got)
	}
	kept := SweepProcessEnv([]string{"GOGC=50"})
	if got := lastValue(kept, "GOGC"); got != "50" {
		t.Errorf("GOGC set by the caller = %q, want 50", got)
	}
	// os/exec passes the last value of a repeated key: the child sees ours.
	cmd := exec.Command("true")
	cmd.Env = env
	if !slices.Contains(cmd.Environ(), "GOMAXPROCS=1") || slices.Contains(cmd.Environ(), "GOMAXPROCS=2") {
		t.Errorf("child environment %v: want GOMAXPROCS=1 only", cmd.Environ())
	}
}

// lastValue is the value of key as a process started with env sees it.
func lastValue(env []string, key string) string {
	v := ""
	for _, kv := range env {
		if len(kv) > len(key) && kv[:len(key)+1] == key+"=" {
			v = kv[len(key)+1:]
		}
	}
	return v
}
