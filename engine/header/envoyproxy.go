package header

import (
	"math"
	"time"

	"github.com/portero-rl/portero/engine"
)

// EnvoyproxyNames are the default names of envoyproxy/ratelimit's three
// fields (its LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER and
// LIMIT_RESET_HEADER).
var EnvoyproxyNames = [3]string{"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"}

// AppendEnvoyproxy appends the fields envoyproxy/ratelimit writes with
// LIMIT_RESPONSE_HEADERS_ENABLED, named names: the limit, the remaining
// and the whole seconds until the reset (engine.Result.UntilReset) of the
// hit with the least remaining that the store decided (the first of
// equals), or of the last refusing hit that is not a quota one. None when
// v has no such hit.
func AppendEnvoyproxy(fields []Field, buf []byte, v *engine.Verdict, names *[3]string, now time.Time) ([]Field, []byte) {
	pick := -1
	least := int64(math.MaxUint32)
	for i := range v.Results {
		res := &v.Results[i]
		if remaining := max(res.Decision.Remaining, 0); res.Failure == "" && remaining < least {
			pick, least = i, remaining
		}
		if (res.Outcome == engine.Refused || res.Outcome == engine.CanNeverPass) && !res.Rule.Shadow && !res.Rule.QuotaMode {
			pick, least = i, 0
		}
	}
	if pick < 0 {
		return fields, buf
	}
	res := &v.Results[pick]
	for k, n := range []int64{res.Rule.Limit.Count, max(res.Decision.Remaining, 0), CeilSeconds(res.UntilReset(now))} {
		fields, buf = AppendInt(fields, buf, names[k], names[k], n)
	}
	return fields, buf
}

// WholeSeconds rounds d up to whole seconds, as envoyproxy/ratelimit
// tells a duration_until_reset (0 for a negative d).
func WholeSeconds(d time.Duration) time.Duration {
	return time.Duration(CeilSeconds(d)) * time.Second
}
