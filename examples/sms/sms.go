// Package sms protects a dependency: an SMS provider that bills per
// message, behind one limit shared by every path that reaches it.
//
// The services send through the gateway (portero serve --config
// examples/sms/portero.yaml), which counts each request's messages
// (X-Sms-Messages) against rule "sms-provider" in Redis. The nightly batch
// job (examples/sms/nightly) talks to the provider directly, so the gateway
// never sees it; it calls the library instead — a redisstore Limiter for
// the same rule under the same key, built by Rule — and waits for room
// (portero.WaitN) before every batch. Both count in one Redis key, so
// together they never send more than the provider's 1000 messages an hour.
// TestGatewayAndJobShareTheLimit runs both against a real gateway and a
// real redis-server.
package sms

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/policy"
)

// CostHeader carries a request's cost in messages to the gateway.
const CostHeader = "X-Sms-Messages"

// Rule returns rule "sms-provider" of examples/sms/portero.yaml, the
// provider's contract, as a policy (so that the job builds its key exactly
// as the gateway does). Keep the two equal: the test checks them.
func Rule() (*policy.Policy, *policy.Rule) {
	p, err := policy.New([]policy.Rule{{
		Name:      "sms-provider",
		Match:     policy.Match{Methods: []string{"POST"}, Path: "/sms/**"},
		Key:       policy.MustParseKey("global"),
		Algorithm: portero.SlidingLog,
		Limit:     portero.MustParseLimit("1000/h"),
		Cost:      mustCost("header:" + CostHeader),
	}}, policy.Options{})
	if err != nil {
		panic(err) // a constant rule
	}
	return p, p.Rules()[0]
}

func mustCost(s string) policy.Cost {
	c, err := policy.ParseCost(s)
	if err != nil {
		panic(err)
	}
	return c
}

// Batch is one send: a text to some recipients.
type Batch struct {
	To   []string `json:"to"`
	Text string   `json:"text"`
}

// Messages is what the provider bills for b: one message per recipient and
// per started 160 characters of text.
func Messages(b Batch) int64 {
	segments := max(1, (len(b.Text)+159)/160)
	return int64(len(b.To) * segments)
}

// Post sends b to url (the provider, or the gateway in front of it) with
// its cost in CostHeader, and returns the response's status.
func Post(ctx context.Context, client *http.Client, url string, b Batch) (int, error) {
	body, err := json.Marshal(b)
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(CostHeader, strconv.FormatInt(Messages(b), 10))
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// Job is the nightly batch job: it sends straight to the provider, but
// only the messages the shared limit admits.
type Job struct {
	// Limiter decides for rule Rule (its StoreRule) in the store the gateway
	// uses: a redisstore Limiter on the same Redis.
	Limiter portero.Limiter
	// Provider is the provider's URL; Client sends to it.
	Provider string
	Client   *http.Client
}

// NewJob returns a job over lim, which must decide for Rule's StoreRule.
func NewJob(lim portero.Limiter, provider string) *Job {
	return &Job{Limiter: lim, Provider: provider, Client: http.DefaultClient}
}

// Key returns the key under which the gateway counts a request to the
// provider: the one the job must count under.
func Key() string {
	p, r := Rule()
	k, _ := p.KeyOf(r.Key, &r.Match, &policy.Request{Method: "POST", Path: "/sms/send"})
	return k
}

// Send waits until the shared limit has room for b's messages and sends
// it. When the room would come after ctx's deadline (the end of the night)
// it returns at once an error wrapping context.DeadlineExceeded, having
// sent nothing: the batch is left for the next night, the budget intact.
func (j *Job) Send(ctx context.Context, b Batch) error {
	if _, err := portero.WaitN(ctx, j.Limiter, Key(), Messages(b), time.Now); err != nil {
		return fmt.Errorf("sms: batch of %d messages: %w", Messages(b), err)
	}
	status, err := Post(ctx, j.Client, j.Provider, b)
	if err != nil {
		return fmt.Errorf("sms: provider: %w", err)
	}
	if status/100 != 2 {
		return fmt.Errorf("sms: provider answered %d", status)
	}
	return nil
}
