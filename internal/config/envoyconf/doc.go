// Package envoyconf reads envoyproxy/ratelimit's YAML configuration,
// unchanged, into a descriptor.Config (docs/envoy.md). One file holds one
// domain:
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
// By default the reading is Portero's: strict (a misplaced field, a key
// given twice, a second document are errors; an unknown field gets a "did
// you mean"), with yamlwalk.Portero's aliases and merges. With
// Options.Envoyproxy it accepts and refuses what envoyproxy/ratelimit does
// (TestEnvoyproxyConfigTests): yamlwalk.YAMLv2, YAML 1.1 scalars
// (compat.go). Portero's extension, the key portero (extension.go), which
// envoyproxy/ratelimit refuses, is read strictly in both modes. Errors name
// the file, line, column and field.
package envoyconf
