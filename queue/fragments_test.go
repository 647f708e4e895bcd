package queue

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPlaceFragments: a fragment is taken out of the text and put at each
// of its placeholders; a placeholder of no fragment, a fragment placed
// nowhere and one left open are errors.
func TestPlaceFragments(t *testing.T) {
	text := "a\n-- fragment: x\nX1\nX2\n-- end fragment\nb {fragment:x}\n{fragment:x}\nc\n"
	placed, err := placeFragments(text)
	require.NoError(t, err)
	require.Equal(t, "a\nb X1\nX2\nX1\nX2\nc\n", placed)

	for _, bad := range []string{
		"{fragment:y}\n",
		"-- fragment: x\nX\n-- end fragment\nno placeholder\n",
		"-- fragment: x\nX\n{fragment:x}\n",
		"-- fragment: x\nX\n-- end fragment\n-- fragment: x\nY\n-- end fragment\n{fragment:x}\n",
	} {
		_, err := placeFragments(bad)
		require.Error(t, err, "%q", bad)
	}
}
