package view

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDuration: durations as people read them, at a precision that
// suits their size.
func TestDuration(t *testing.T) {
	for ms, want := range map[int64]string{
		0:          "0s",
		850:        "850ms",
		12_345:     "12.3s",
		59_960:     "1m0s",
		1_075_041:  "17m55s",
		7_500_400:  "2h5m0s",
		90_061_000: "25h1m1s",
		-1_500:     "-1.5s",
	} {
		require.Equal(t, want, DurationMs(ms), "%d ms", ms)
		require.Equal(t, want, Duration(time.Duration(ms)*time.Millisecond))
	}
}
