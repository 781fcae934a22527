package policy

import "context"

// Identities set in a request's context by the application (its
// authentication, before the limiter), for keys with a user, tenant or
// identity:NAME part and for matches on Match.Identity. They live here, below
// the doors, so that one context value means the same to every door: a value
// set with WithIdentity is read alike by httplimit and grpclimit.

type identityKey struct{}

// WithIdentity returns a copy of ctx carrying an identity value, such as
// ("user", "alice") or ("tenant", "acme"), for keys with a user, tenant or
// identity:NAME part. Authentication that runs before a door's limiter calls
// it.
func WithIdentity(ctx context.Context, name, value string) context.Context {
	return WithIdentities(ctx, map[string]string{name: value})
}

// WithIdentities is WithIdentity for several values at once, with one copy of
// the identity map and one context where a WithIdentity per value would make
// one each. It does not keep values.
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
