package algorithm_test

import (
	"testing"

	"github.com/portero-rl/portero/algorithm"
)

// TestGrant: at least need, at most want, beyond need at most an eighth of
// what is left, nothing when fewer than need are left.
func TestGrant(t *testing.T) {
	for _, c := range []struct{ rem, need, want, grant int64 }{
		{800, 1, 50, 50},   // 800/8 = 100 > want
		{800, 1, 500, 100}, // an eighth
		{80, 20, 30, 20},   // 80/8 = 10 < need
		{7, 1, 9, 1},       // 7/8 = 0: the need
		{7, 7, 7, 7},       // all that is left
		{6, 7, 9, 0},       // fewer than need
		{0, 1, 1, 0},
	} {
		if g := algorithm.Grant(c.rem, c.need, c.want); g != c.grant {
			t.Errorf("Grant(%d, %d, %d) = %d, want %d", c.rem, c.need, c.want, g, c.grant)
		}
	}
}
