// Package envoyconf reads envoyproxy/ratelimit's YAML configuration,
// unchanged, into a descriptor.Config, so that an Envoy user can point Envoy
// at Portero with the files they already have and get the same decisions.
// Matching descriptors against it, and compiling them into the engine's
// hits, is package descriptor's; this package only reads YAML. The format,
// field by field, is in docs/envoy.md ("The configuration, unchanged").
//
// One file holds one domain:
//
//	domain: edge
//	descriptors:
//	  - key: remote_address            # every client address: 10 per second
//	    rate_limit: {unit: second, requests_per_unit: 10}
//	  - key: api_key                   # two levels: (api_key, X), (plan, gold)
//	    descriptors:
//	      - key: plan
//	        value: gold
//	        rate_limit: {name: gold, unit: minute, requests_per_unit: 600}
//
// By default the reading is Portero's: strict (a field in the wrong place,
// a key given twice, a second YAML document are errors; an unknown field
// gets a "did you mean"), lenient where that cannot mislead ("5" is 5), its
// aliases and << merge keys read as in Portero's own file
// (yamlwalk.Portero). With Options.Envoyproxy it is envoyproxy/ratelimit's,
// file for file (TestEnvoyproxyConfigTests holds the cases, each checked
// against its own config check): every file of a directory, the first
// document of a file, its keys checked against its set of known keys
// wherever they stand, aliases, merge keys and keys given twice as yaml.v2
// decodes its structs (yamlwalk.YAMLv2), YAML 1.1 scalars (compat.go). The
// one difference kept: Portero's extension, the key portero, which it
// refuses wherever it stands (extension.go): any Portero algorithm for a
// limit, calendar quotas, look-back windows and address lists. Inside it
// the reading is strict in both modes.
//
// Errors name the file, line, column and field.
package envoyconf
