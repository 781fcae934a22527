package policy

import "context"

// Identities set in a request's context by the application's
// authentication, for keys with a user, tenant or identity:NAME part and
// Match.Identity, read alike by the middleware and every server.

type identityKey struct{}

// WithIdentity returns a copy of ctx carrying an identity value, such as
// ("user", "alice") or ("tenant", "acme"), for keys with a user, tenant or
// identity:NAME part. Authentication that runs before the limiter calls it.
func WithIdentity(ctx context.Context, name, value string) context.Context {
	return WithIdentities(ctx, map[string]string{name: value})
}

// WithIdentities is WithIdentity for several values at once; it does not
// keep values.
func WithIdentities(ctx context.Context, values map[string]string) context.Context {
	old, _ := ctx.Value(identityKey{}).(map[string]string)
	m := make(map[string]string, len(old)+len(values))
	for k, v := range old {
		m[k] = v
	}
	for k, v := range values {
		m[k] = v
	}
	return context.WithValue(ctx, identityKey{}, m)
}

// Identity returns the identity values set with WithIdentity; nil when none.
// The caller must not change the map.
func Identity(ctx context.Context) map[string]string {
	m, _ := ctx.Value(identityKey{}).(map[string]string)
	return m
}
