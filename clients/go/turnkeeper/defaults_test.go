package turnkeeper_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
