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
// unlimited, name, replaces}, shadow_mode, quota_mode, metadata,
// detailed_metric, value_to_metric and share_threshold. Unknown fields are
// errors, as there. Units are second, minute, hour, day, week, month (30
// days) and year (365 days), in any case.
//
// # Its parser, exactly: Options.Envoyproxy
//
// By default the reading is Portero's: strict (a field in the wrong place,
// a key given twice, a second YAML document are errors; an unknown field
// gets a "did you mean"), lenient where that cannot mislead ("5" is 5),
// and its aliases and << merge keys read as in Portero's own file
// (yamlwalk.Portero: a mapping's own keys win). With Options.Envoyproxy it is
// envoyproxy/ratelimit's, file for file (TestEnvoyproxyConfigTests holds
// the cases, each checked against its own config check): every file of a
// directory whatever its name (dot files unless IgnoreDotFiles), an empty
// directory as no domains, the first document of a file, every key
// checked against its set of known keys wherever it stands (a known key
// out of place is then ignored), aliases, merge keys and keys given twice
// as yaml.v2 decodes its structs (yamlwalk.YAMLv2: keys in order, the last
// of a key wins, a mapping given again adds to the first), YAML 1.1
// scalars (yes/no booleans; a quoted number or boolean is an error),
// descriptors that collide as key_value strings ((a, b_c) and (a_b, c))
// refused, an unreadable unit beside unlimited ignored, any count per
// second and any limit name. The one difference kept: rate_limit.portero,
// which it refuses, is read.
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
// The same key carries what the gateway model (docs/plans.md) gives this
// door (extension.go, docs/envoy.md): rate_limit.portero's calendar: true,
// tz and offset make a limit a calendar quota per day, week or month
// (read by portero.ParseQuota); its look_back (60s, 120s, 300s or 600s, a
// limit of at least 10, validated by policy.ParseLookBack and
// LookBackLimit as the gateway's rate_rules are) a look-back window
// counted by the sliding log; the file's portero.address_lists and a
// descriptor's portero: {addresses, not_addresses} match an entry's value
// by address or CIDR (descriptor.Node.Addresses). envoyproxy/ratelimit
// refuses the key portero anywhere, so no file it accepts reads
// differently; inside it the reading is strict in both modes.
//
// A limit's name (rate_limit.name, or the node's full key when it has none)
// is what RateLimit headers announce: a name that a Structured Field String
// cannot carry (bytes outside printable ASCII) is a configuration error
// asking for a rate_limit name (with Options.Envoyproxy it is announced
// percent-encoded instead).
//
// Errors name the file, line, column and field.
package envoyconf
