package turnkeeper_test

// The edges of the Anthropic cache marks (spec §14) the shared vectors leave out; no server needed.

import (
	"errors"
	"strings"
	"testing"

	turnkeeperv1 "github.com/turnkeeper/turnkeeper/clients/go/gen/turnkeeper/v1"
	"github.com/turnkeeper/turnkeeper/clients/go/turnkeeper"
)

func chatHistory(messages ...*turnkeeperv1.ChatMessage) *turnkeeperv1.History {
	return &turnkeeperv1.History{Shape: &turnkeeperv1.History_Chat{Chat: &turnkeeperv1.ChatHistory{Messages: messages}}}
}

func row(role turnkeeperv1.Role, content string) *turnkeeperv1.ChatMessage {
	return &turnkeeperv1.ChatMessage{Role: role, Content: content}
}

func exportAnthropic(t *testing.T, history *turnkeeperv1.History, options ...turnkeeper.AnthropicOption) string {
	t.Helper()
	out, err := turnkeeper.ToAnthropic(history, options...)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func TestCacheBreakpointPastTheHistoryIsAConversionError(t *testing.T) {
	history := chatHistory(row(turnkeeperv1.Role_ROLE_USER, "q"))
	_, err := turnkeeper.ToAnthropic(history, turnkeeper.WithCacheBreakpoints([]uint32{0, 1}))
	var conversion *turnkeeper.ConversionError
	if !errors.As(err, &conversion) || conversion.Path != "cache_breakpoints[1]" {
		t.Fatalf("want a ConversionError at cache_breakpoints[1], got %v", err)
	}
}

func TestCacheBreakpointNamedTwiceIsMarkedOnce(t *testing.T) {
	history := chatHistory(row(turnkeeperv1.Role_ROLE_USER, "q"), row(turnkeeperv1.Role_ROLE_ASSISTANT, "a"))
	got := exportAnthropic(t, history, turnkeeper.WithCacheBreakpoints([]uint32{1, 1}),
		turnkeeper.WithCacheLifetime(turnkeeperv1.CacheLifetime_CACHE_LIFETIME_ONE_HOUR))
	want := `{"messages":[{"content":"q","role":"user"},` +
		`{"content":[{"cache_control":{"ttl":"1h","type":"ephemeral"},"text":"a","type":"text"}],"role":"assistant"}]}`
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

func TestCacheBreakpointsWithoutRoomAreLeftOut(t *testing.T) {
	// Four system blocks the caller marked leave no room for turnkeeper's marks.
	marked := func(text string) *turnkeeperv1.ChatMessage {
		history, err := turnkeeper.FromAnthropic([]byte(`{"system": [{"type": "text", "text": "`+text+
			`", "cache_control": {"type": "ephemeral"}}], "messages": []}`), turnkeeper.ConvertOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return history.GetChat().GetMessages()[0]
	}
	history := chatHistory(marked("a"), marked("b"), marked("c"), marked("d"),
		row(turnkeeperv1.Role_ROLE_USER, "q"), row(turnkeeperv1.Role_ROLE_ASSISTANT, "a"))
	plain := exportAnthropic(t, history)
	if got := exportAnthropic(t, history, turnkeeper.WithCacheBreakpoints([]uint32{3, 5})); got != plain {
		t.Fatalf("a fifth mark was rendered:\n%s", got)
	}
	if strings.Count(plain, "cache_control") != 4 {
		t.Fatalf("the caller's four marks are not all there:\n%s", plain)
	}
}

func TestNoCacheBreakpointsLeavesTheExportAsItWas(t *testing.T) {
	history := chatHistory(row(turnkeeperv1.Role_ROLE_SYSTEM, "s"), row(turnkeeperv1.Role_ROLE_USER, "q"))
	if got, want := exportAnthropic(t, history, turnkeeper.WithCacheBreakpoints(nil)),
		`{"messages":[{"content":"q","role":"user"}],"system":"s"}`; got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}
