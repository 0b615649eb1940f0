package turnkeeper_test

// The edges of the Anthropic cache marks (spec §14) the shared vectors leave out; no server needed.

import (
	"errors"
	"fmt"
	"log"
	"strings"
	"testing"

	turnkeeperv1 "github.com/turnkeeper/turnkeeper/clients/go/gen/turnkeeper/v1"
	"github.com/turnkeeper/turnkeeper/clients/go/turnkeeper"
)

func exportAnthropic(t *testing.T, history *turnkeeperv1.History, options ...turnkeeper.AnthropicOption) string {
	t.Helper()
	out, err := turnkeeper.ToAnthropic(history, options...)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func TestCacheBreakpointPastTheHistoryIsAConversionError(t *testing.T) {
	history := turnkeeper.ChatHistory(turnkeeper.User("q"))
	_, err := turnkeeper.ToAnthropic(history, turnkeeper.WithCacheBreakpoints([]uint32{0, 1}))
	var conversion *turnkeeper.ConversionError
	if !errors.As(err, &conversion) || conversion.Path != "cache_breakpoints[1]" {
		t.Fatalf("want a ConversionError at cache_breakpoints[1], got %v", err)
	}
}

func TestCacheBreakpointNamedTwiceIsMarkedOnce(t *testing.T) {
	history := turnkeeper.ChatHistory(turnkeeper.User("q"), turnkeeper.Assistant("a"))
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
	history := turnkeeper.ChatHistory(marked("a"), marked("b"), marked("c"), marked("d"),
		turnkeeper.User("q"), turnkeeper.Assistant("a"))
	plain := exportAnthropic(t, history)
	if got := exportAnthropic(t, history, turnkeeper.WithCacheBreakpoints([]uint32{3, 5})); got != plain {
		t.Fatalf("a fifth mark was rendered:\n%s", got)
	}
	if strings.Count(plain, "cache_control") != 4 {
		t.Fatalf("the caller's four marks are not all there:\n%s", plain)
	}
}

func TestNoCacheBreakpointsLeavesTheExportAsItWas(t *testing.T) {
	history := turnkeeper.ChatHistory(turnkeeper.System("s"), turnkeeper.User("q"))
	if got, want := exportAnthropic(t, history, turnkeeper.WithCacheBreakpoints(nil)),
		`{"messages":[{"content":"q","role":"user"}],"system":"s"}`; got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

func ExampleWithCacheBreakpoints() {
	// As client.PrepareModelCall returns them: the system row and the last row.
	prepared := &turnkeeperv1.PrepareModelCallResponse{
		History:          turnkeeper.ChatHistory(turnkeeper.System("Be terse."), turnkeeper.User("hello")),
		CacheBreakpoints: []uint32{0, 1},
	}
	body, err := turnkeeper.ToAnthropic(prepared.GetHistory(),
		turnkeeper.WithCacheBreakpoints(prepared.GetCacheBreakpoints()),
		turnkeeper.WithCacheLifetime(turnkeeperv1.CacheLifetime_CACHE_LIFETIME_FIVE_MINUTES))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(body))
	// Output:
	// {"messages":[{"content":[{"cache_control":{"ttl":"5m","type":"ephemeral"},"text":"hello","type":"text"}],"role":"user"}],"system":[{"cache_control":{"ttl":"5m","type":"ephemeral"},"text":"Be terse.","type":"text"}]}
}

func TestToolExchangeSummaryComesBackAsAPlainAssistantRow(t *testing.T) {
	// Spec §13.1: the mark has no provider form, so the summary imports back as a plain assistant row.
	const text = "[Tool exchange: 2 tool call(s) — results collapsed]"
	summary := turnkeeper.Assistant(text)
	summary.ToolExchangeSummary = true
	history := turnkeeper.ChatHistory(turnkeeper.User("q"), summary, turnkeeper.Assistant("a"))
	for format, conv := range converters {
		out, err := conv.to(history)
		if err != nil {
			t.Fatalf("%s: %v", format, err)
		}
		back, err := conv.from(out, turnkeeper.ConvertOptions{})
		if err != nil {
			t.Fatalf("%s: %v", format, err)
		}
		got := back.GetChat().GetMessages()[1]
		if got.GetToolExchangeSummary() || got.GetContent() != text || got.GetPassthrough() != nil {
			t.Errorf("%s: the summary came back as %v", format, got)
		}
	}
}
