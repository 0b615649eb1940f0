package turnkeeper_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	turnkeeperv1 "github.com/turnkeeper/turnkeeper/clients/go/gen/turnkeeper/v1"
	"github.com/turnkeeper/turnkeeper/clients/go/turnkeeper"
)

// liveEnv returns a variable exported by tests/support/with_server.py. Live tests fail without
// it, so a misconfigured run cannot pass by skipping them; -short skips them on purpose.
func liveEnv(t *testing.T, name string) string {
	t.Helper()
	value := os.Getenv(name)
	if value == "" {
		if testing.Short() {
			t.Skipf("%s not set (-short): skipping a live-server test", name)
		}
		t.Fatalf("%s is not set: run `make -C clients/go test`, which starts a server through tests/support/with_server.py (or pass -short)", name)
	}
	return value
}

// connect returns a client for target, closed when the test ends.
func connect(t *testing.T, target string, opts ...turnkeeper.Option) *turnkeeper.Client {
	t.Helper()
	client, err := turnkeeper.New(target, opts...)
	if err != nil {
		t.Fatalf("connect %s: %v", target, err)
	}
	t.Cleanup(func() { _ = client.Close() })
	return client
}

func tcpClient(t *testing.T, opts ...turnkeeper.Option) *turnkeeper.Client {
	return connect(t, liveEnv(t, "TURNKEEPER_ADDRESS"), opts...)
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// uniqueID keeps the events of one test apart from every other trim on the shared server.
func uniqueID(t *testing.T) string {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return t.Name() + "-" + hex.EncodeToString(b)
}

// threeTurns is a history of three turns of about 100 tokens each: a small budget drops turns.
func threeTurns(tag string) *turnkeeperv1.History {
	long := func(s string) string {
		out := s
		for len(out) < 400 {
			out += " " + s
		}
		return out
	}
	return turnkeeper.ChatHistory(
		turnkeeper.System("You are terse."),
		turnkeeper.User(long("first question "+tag)), turnkeeper.Assistant(long("first answer")),
		turnkeeper.User(long("second question "+tag)), turnkeeper.Assistant(long("second answer")),
		turnkeeper.User("third question "+tag), turnkeeper.Assistant("third answer"),
	)
}
