package turnkeeper_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/turnkeeper/turnkeeper/clients/go/turnkeeper"
)

// The defaults every client shares live in tests/conformance/client-defaults.json
// (docs/conventions.md, Client defaults).
func TestDefaultsAreTheSharedClientDefaults(t *testing.T) {
	dir := os.Getenv("TURNKEEPER_CONFORMANCE_DIR")
	if dir == "" {
		dir = filepath.Join("..", "..", "..", "tests", "conformance", "vectors")
	}
	raw, err := os.ReadFile(filepath.Join(dir, "..", "client-defaults.json"))
	if err != nil {
		t.Fatal(err)
	}
	var shared struct {
		UnaryDeadlineSeconds float64 `json:"unaryDeadlineSeconds"`
		MaxMessageBytes      int     `json:"maxMessageBytes"`
		Retry                struct {
			MaxAttempts       int      `json:"maxAttempts"`
			RetryableCodes    []string `json:"retryableCodes"`
			MaxDelaySeconds   float64  `json:"maxDelaySeconds"`
			BackoffSeconds    float64  `json:"backoffSeconds"`
			BackoffMultiplier float64  `json:"backoffMultiplier"`
			BackoffJitter     float64  `json:"backoffJitter"`
		} `json:"retry"`
	}
	if err := json.Unmarshal(raw, &shared); err != nil {
		t.Fatal(err)
	}
	if want := time.Duration(shared.UnaryDeadlineSeconds * float64(time.Second)); turnkeeper.DefaultTimeout != want {
		t.Errorf("DefaultTimeout = %v, the shared default is %v", turnkeeper.DefaultTimeout, want)
	}
	if turnkeeper.MaxMessageSize != shared.MaxMessageBytes {
		t.Errorf("MaxMessageSize = %d, the shared default is %d", turnkeeper.MaxMessageSize, shared.MaxMessageBytes)
	}
	seconds := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
	r := shared.Retry
	want := turnkeeper.RetryPolicy{MaxAttempts: r.MaxAttempts, MaxDelay: seconds(r.MaxDelaySeconds), Backoff: seconds(r.BackoffSeconds), Multiplier: r.BackoffMultiplier, Jitter: r.BackoffJitter}
	if turnkeeper.DefaultRetryPolicy != want {
		t.Errorf("DefaultRetryPolicy = %+v, the shared default is %+v", turnkeeper.DefaultRetryPolicy, want)
	}
	var codes []string
	for _, code := range turnkeeper.RetryableCodes {
		// codes.Code's String is "ResourceExhausted"; the file uses the canonical names.
		codes = append(codes, strings.ToUpper(regexp.MustCompile(`([a-z])([A-Z])`).ReplaceAllString(code.String(), "${1}_${2}")))
	}
	if !slices.Equal(codes, r.RetryableCodes) {
		t.Errorf("RetryableCodes = %v, the shared default is %v", codes, r.RetryableCodes)
	}
}

func TestConversionErrorNamesThePath(t *testing.T) {
	var err error = fmt.Errorf("loading history: %w", &turnkeeper.ConversionError{Path: "messages[3].content[1]", Reason: "unsupported part type \"audio\""})
	var conv *turnkeeper.ConversionError
	if !errors.As(err, &conv) || conv.Path != "messages[3].content[1]" {
		t.Fatalf("errors.As did not find the ConversionError in %v", err)
	}
	if got, want := conv.Error(), `turnkeeper: cannot convert messages[3].content[1]: unsupported part type "audio"`; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if got := (&turnkeeper.ConversionError{Reason: "not a JSON array"}).Error(); got != "turnkeeper: cannot convert: not a JSON array" {
		t.Errorf("Error() without a path = %q", got)
	}
}
