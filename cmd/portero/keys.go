package main

import (
	"bufio"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/portero-rl/portero/internal/apikey"
	"github.com/portero-rl/portero/policy"
)

// newKeysCmd builds `portero keys`: API keys for usage plans.
func newKeysCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "keys",
		Short: "API keys for usage plans: hash a key for the keys file, or make a new one",
		Long: `API keys map callers to usage plans (docs/plans.md). Portero stores them
hashed: the SHA-256 of the key, in hexadecimal. An API key identifies a
caller for counting; it does not authenticate it.`,
	}
	cmd.AddCommand(newKeysHashCmd(), newKeysNewCmd())
	return cmd
}

func newKeysHashCmd() *cobra.Command {
	var id, plan string
	cmd := &cobra.Command{
		Use:   "hash [KEY]",
		Short: "Print the SHA-256 of a key (read from standard input without KEY), as the keys file holds it",
		Long: `hash prints the SHA-256 of KEY in hexadecimal, the form api_keys and the
keys file store. Without KEY it reads one key per line from standard input
(better: a key on the command line lands in the shell's history). With --id
and --plan it prints the keys file's line instead.`,
		Example: `  printf %s "$KEY" | portero keys hash
  portero keys hash --id acme --plan gold < key.txt >> keys.yaml`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if (id == "") != (plan == "") {
				return usageErr(errors.New("give --id and --plan together"))
			}
			if id != "" {
				if err := policy.ValidName(id); err != nil {
					return usageErr(fmt.Errorf("--id: %w", err))
				}
			}
			keys := args
			if len(keys) == 0 {
				sc := bufio.NewScanner(io.LimitReader(cmd.InOrStdin(), 1<<20))
				for sc.Scan() {
					if k := strings.TrimRight(sc.Text(), "\r"); k != "" {
						keys = append(keys, k)
					}
				}
				if err := sc.Err(); err != nil {
					return err
				}
				if len(keys) == 0 {
					return usageErr(errors.New("no key: give KEY or one per line on standard input"))
				}
			}
			out := cmd.OutOrStdout()
			for _, k := range keys {
				if len(k) > apikey.MaxKeyLen {
					return usageErr(fmt.Errorf("a key of %d bytes: at most %d", len(k), apikey.MaxKeyLen))
				}
				printKey(out, k, id, plan, false)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&id, "id", "", "the caller's ID, for a keys-file line")
	cmd.Flags().StringVar(&plan, "plan", "", "the caller's plan, for a keys-file line")
	return cmd
}

func newKeysNewCmd() *cobra.Command {
	var id, plan string
	cmd := &cobra.Command{
		Use:   "new --id ID --plan PLAN",
		Short: "Make a random key (32 bytes, base64url) and print it with its keys-file line",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if id == "" || plan == "" {
				return usageErr(errors.New("--id and --plan are required"))
			}
			if err := policy.ValidName(id); err != nil {
				return usageErr(fmt.Errorf("--id: %w", err))
			}
			b := make([]byte, 32)
			if _, err := rand.Read(b); err != nil {
				return err
			}
			printKey(cmd.OutOrStdout(), base64.RawURLEncoding.EncodeToString(b), id, plan, true)
			return nil
		},
	}
	cmd.Flags().StringVar(&id, "id", "", "the caller's ID (its counters are kept under it)")
	cmd.Flags().StringVar(&plan, "plan", "", "the caller's usage plan")
	return cmd
}

func printKey(w io.Writer, key, id, plan string, show bool) {
	if show {
		fmt.Fprintf(w, "# key (give it to %s; Portero keeps only its hash): %s\n", id, key)
	}
	if id == "" {
		fmt.Fprintln(w, apikey.Hash(key))
		return
	}
	fmt.Fprintf(w, "  - {id: %s, plan: %s, sha256: %s}\n", id, plan, apikey.Hash(key))
}
