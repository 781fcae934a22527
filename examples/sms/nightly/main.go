// Command nightly is a nightly batch job: it sends SMS batches
// straight to the provider, bypassing the gateway, yet stays within the
// limit the gateway enforces, because it asks the same rule in the same
// Redis before every batch (package sms). It waits while the hour's budget
// is spent by others, and stops, leaving the rest for the next night, when
// the budget would not come back before --until.
//
//	nightly --redis redis://127.0.0.1:6379/0 --provider http://127.0.0.1:9000/sms/send \
//	        --batches batches.json --until 5h
//
// batches.json is a JSON array of {"to": [...], "text": "..."}.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/portero-rl/portero/examples/sms"
	"github.com/portero-rl/portero/store/redisstore"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "nightly:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("nightly", flag.ContinueOnError)
	redisURL := fs.String("redis", "redis://127.0.0.1:6379/0", "the Redis the gateway uses")
	provider := fs.String("provider", "http://127.0.0.1:9000/sms/send", "the provider's send URL")
	file := fs.String("batches", "", "JSON array of batches to send (required)")
	until := fs.Duration("until", 5*time.Hour, "how long the night lasts: no batch is sent after it")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *file == "" {
		return errors.New("--batches is required")
	}
	data, err := os.ReadFile(*file)
	if err != nil {
		return err
	}
	var batches []sms.Batch
	if err := json.Unmarshal(data, &batches); err != nil {
		return fmt.Errorf("%s: %w", *file, err)
	}
	// Fail closed: while Redis is down every decision is an error, and
	// nothing is sent.
	store, err := redisstore.New(redisstore.Config{URL: *redisURL})
	if err != nil {
		return err
	}
	defer store.Close(context.Background())
	_, rule := sms.Rule()
	lim, err := store.Limiter(rule.StoreRule())
	if err != nil {
		return err
	}
	job := sms.NewJob(lim, *provider)
	ctx, cancel := context.WithTimeout(ctx, *until)
	defer cancel()
	var sent, messages int64
	for i, b := range batches {
		if err := job.Send(ctx, b); err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				fmt.Fprintf(stdout, "sent %d of %d batches (%d messages); %d left for the next night: %v\n", sent, len(batches), messages, len(batches)-i, err)
				return nil
			}
			return fmt.Errorf("batch %d: %w", i, err)
		}
		sent++
		messages += sms.Messages(b)
	}
	fmt.Fprintf(stdout, "sent %d of %d batches (%d messages)\n", sent, len(batches), messages)
	return nil
}
