// Package envoyconf reads envoyproxy/ratelimit's YAML configuration,
// unchanged, into a descriptor.Config, so that an Envoy user can point Envoy
// at Portero with the files they already have and get the same decisions.
// Matching descriptors against it, and compiling them into the engine's
// hits, is package descriptor's; this package only reads YAML.
//
// # Format
//
// One file holds one domain:
//
//	domain: edge
//	descriptors:
//	  - key: remote_address            # every client address: 10 per second
//	    rate_limit: {unit: second, requests_per_unit: 10}
//	  - key: remote_address            # one address: blocked
//	    value: 50.0.0.5
//	    rate_limit: {unit: second, requests_per_unit: 0}
//	  - key: api_key                   # two levels: (api_key, X), (plan, gold)
//	    descriptors:
//	      - key: plan
//	        value: gold
//	        rate_limit: {name: gold, unit: minute, requests_per_unit: 600}
//
// Every field of envoyproxy/ratelimit is accepted: domain; descriptors with
// key, value (with '*' wildcards), rate_limit {unit, requests_per_unit,
// unlimited, name, replaces}, shadow_mode, detailed_metric, value_to_metric
// and share_threshold. Unknown fields are errors, as there. Units are
// second, minute, hour, day, week, month (30 days) and year (365 days), in
// any case.
//
// Portero adds one optional field, rate_limit.portero, that selects any
// Portero algorithm for a descriptor:
//
//	rate_limit:
//	  unit: second
//	  requests_per_unit: 10
//	  portero: {algorithm: token-bucket, burst: 40}
//
// Without it a limit is envoyproxy/ratelimit's clock-aligned fixed window:
// portero.FixedWindow with Window = unit and Count = requests_per_unit.
//
// A limit's name (rate_limit.name, or the node's full key when it has none)
// is what RateLimit headers announce: a name that a Structured Field String
// cannot carry (bytes outside printable ASCII) is a configuration error
// asking for a rate_limit name.
//
// Errors name the file, line, column and field.
package envoyconf
