package model

import "strconv"

// Quote quotes s for an error message: printable characters, whatever
// their script, as themselves; others escaped; at most n characters, the
// rest elided. Only a value the caller gave as a name, a path or a flag
// is quoted this way, never a payload's value or a secret.
func Quote(s string, n int) string { return strconv.Quote(TruncateRunes(s, n)) }

// TruncateRunes cuts s to at most n characters, marking a cut with "...".
func TruncateRunes(s string, n int) string {
	count := 0
	for i := range s {
		if count == n {
			return s[:i] + "..."
		}
		count++
	}
	return s
}
