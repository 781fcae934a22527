package iolimit_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"strings"

	"github.com/portero-rl/portero/iolimit"
)

// Example copies a body through a Writer limited to 2 MB/s with a 16 MB
// burst: this 1 MB fits in the burst and goes at once;
// a longer copy would run at full speed for B/(M−R) and then at 2 MB/s.
func Example() {
	b, err := iolimit.NewBucket(2_000_000, 16_000_000)
	if err != nil {
		log.Fatal(err)
	}
	var dst bytes.Buffer
	w := iolimit.NewWriter(context.Background(), &dst, b)
	n, err := io.Copy(w, strings.NewReader(strings.Repeat("x", 1_000_000)))
	fmt.Println(n, err)
	// Output: 1000000 <nil>
}
