package turnkeeper_test

// The shared converter vectors (tests/conformance/converters, docs/converters.md) and one round-trip
// property per format over seeded random provider JSON, through the live server.

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/testing/protocmp"

	turnkeeperv1 "github.com/turnkeeper/turnkeeper/clients/go/gen/turnkeeper/v1"
	"github.com/turnkeeper/turnkeeper/clients/go/turnkeeper"
)

type converter struct {
	from func([]byte, turnkeeper.ConvertOptions) (*turnkeeperv1.History, error)
	to   func(*turnkeeperv1.History, ...turnkeeper.AnthropicOption) ([]byte, error)
}

// withoutOptions is an export that takes no options; a vector that passes some to it fails.
func withoutOptions(to func(*turnkeeperv1.History) ([]byte, error)) func(*turnkeeperv1.History, ...turnkeeper.AnthropicOption) ([]byte, error) {
	return func(history *turnkeeperv1.History, options ...turnkeeper.AnthropicOption) ([]byte, error) {
		if len(options) > 0 {
			return nil, errors.New("this format's export takes no options")
		}
		return to(history)
	}
}

var converters = map[string]converter{
	"openai_chat":      {turnkeeper.FromOpenAI, withoutOptions(turnkeeper.ToOpenAI)},
	"openai_responses": {turnkeeper.FromOpenAIResponses, withoutOptions(turnkeeper.ToOpenAIResponses)},
	"anthropic":        {turnkeeper.FromAnthropic, turnkeeper.ToAnthropic},
}

// exportOptions is a vector's optional `exportOptions`: the Anthropic cache marks of spec §14.
type exportOptions struct {
	CacheBreakpoints []uint32 `json:"cacheBreakpoints"`
	CacheLifetime    string   `json:"cacheLifetime"`
}

func (e *exportOptions) options(t *testing.T) []turnkeeper.AnthropicOption {
	t.Helper()
	if e == nil {
		return nil
	}
	options := []turnkeeper.AnthropicOption{turnkeeper.WithCacheBreakpoints(e.CacheBreakpoints)}
	if e.CacheLifetime != "" {
		lifetime, ok := turnkeeperv1.CacheLifetime_value[e.CacheLifetime]
		if !ok {
			t.Fatalf("unknown cacheLifetime %q", e.CacheLifetime)
		}
		options = append(options, turnkeeper.WithCacheLifetime(turnkeeperv1.CacheLifetime(lifetime)))
	}
	return options
}

// vectorMarks is a vector's optional `marks`: the spec §15 marks kept beside the provider JSON.
type vectorMarks struct {
	Summary     bool  `json:"summary"`
	PinnedTurns []int `json:"pinnedTurns"`
}

// turnMarks are the marks as the imports take them; no `marks` is no summary and no pins.
func (m *vectorMarks) turnMarks() turnkeeper.TurnMarks {
	if m == nil {
		return turnkeeper.TurnMarks{}
	}
	return turnkeeper.TurnMarks{Summary: m.Summary, PinnedTurns: m.PinnedTurns}
}

type converterVector struct {
	Name      string           `json:"name"`
	Format    string           `json:"format"`
	Shape     turnkeeper.Shape `json:"shape"`
	Direction string           `json:"direction"`
	Export    *exportOptions   `json:"exportOptions"`
	Marks     *vectorMarks     `json:"marks"`
	Provider  json.RawMessage  `json:"provider"`
	History   json.RawMessage  `json:"history"`
	Estimate  struct {
		TotalTokens int64 `json:"totalTokens"`
	} `json:"estimate"`
}

// sameJSON compares two JSON texts as values.
func sameJSON(t *testing.T, got, want []byte) string {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("output is not JSON: %v", err)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatalf("expected is not JSON: %v", err)
	}
	return cmp.Diff(w, g)
}

func trimWithoutPressure(t *testing.T, client *turnkeeper.Client, history *turnkeeperv1.History) *turnkeeperv1.History {
	t.Helper()
	response, err := client.TrimHistory(testContext(t), &turnkeeperv1.TrimHistoryRequest{
		History:    history,
		Mode:       turnkeeperv1.TrimMode_TRIM_MODE_TOKEN_BUDGET,
		CallerPath: turnkeeperv1.CallerPath_CALLER_PATH_AGENT,
		Limits:     &turnkeeperv1.TrimHistoryRequest_ExplicitLimits{ExplicitLimits: &turnkeeperv1.ExplicitLimits{BudgetTokens: new(uint64(1_000_000_000))}},
	})
	if err != nil {
		t.Fatalf("TrimHistory: %v", err)
	}
	if response.GetOutcome().GetTrimmed() {
		t.Fatalf("a trim without budget pressure dropped rows")
	}
	return response.GetHistory()
}

func TestConverterVectors(t *testing.T) {
	dir := filepath.Join(liveEnv(t, "TURNKEEPER_CONFORMANCE_DIR"), "..", "converters")
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(files) < 12 {
		t.Fatalf("converter vectors in %s: %d files, %v", dir, len(files), err)
	}
	client := tcpClient(t)
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var v converterVector
		if err := json.Unmarshal(raw, &v); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		t.Run(v.Name, func(t *testing.T) {
			conv, ok := converters[v.Format]
			if !ok {
				t.Fatalf("unknown format %q", v.Format)
			}
			opts := turnkeeper.ConvertOptions{Shape: v.Shape, Marks: v.Marks.turnMarks()}
			if v.Direction == "import-error" {
				_, err := conv.from(v.Provider, opts)
				var conversion *turnkeeper.ConversionError
				if !errors.As(err, &conversion) {
					t.Fatalf("want a *ConversionError, got %v", err)
				}
				return
			}
			history := &turnkeeperv1.History{}
			if err := protojson.Unmarshal(v.History, history); err != nil {
				t.Fatalf("history: %v", err)
			}
			if v.Direction == "both" {
				got, err := conv.from(v.Provider, opts)
				if err != nil {
					t.Fatalf("import: %v", err)
				}
				if diff := cmp.Diff(history, got, protocmp.Transform()); diff != "" {
					t.Errorf("import (-want +got):\n%s", diff)
				}
			}
			marks, err := turnkeeper.TurnMarksOf(history)
			if err != nil {
				t.Fatalf("turn marks: %v", err)
			}
			if diff := cmp.Diff(v.Marks.turnMarks(), marks, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("turn marks (-want +got):\n%s", diff)
			}
			out, err := conv.to(history, v.Export.options(t)...)
			if err != nil {
				t.Fatalf("export: %v", err)
			}
			if diff := sameJSON(t, out, v.Provider); diff != "" {
				t.Errorf("export (-want +got):\n%s", diff)
			}
			estimate, err := client.EstimateTokens(testContext(t), &turnkeeperv1.EstimateTokensRequest{History: history})
			if err != nil {
				t.Fatal(err)
			}
			if estimate.GetTotalTokens() != uint64(v.Estimate.TotalTokens) {
				t.Errorf("estimate %d, want %d", estimate.GetTotalTokens(), v.Estimate.TotalTokens)
			}
			kept := trimWithoutPressure(t, client, history)
			if diff := cmp.Diff(history, kept, protocmp.Transform()); diff != "" {
				t.Errorf("trim changed the history (-want +got):\n%s", diff)
			}
			if out, err = conv.to(kept, v.Export.options(t)...); err != nil {
				t.Fatal(err)
			}
			if diff := sameJSON(t, out, v.Provider); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
		})
	}
}

// gen draws random provider JSON from a seeded source, so a failure names the seed that reproduces it.
type gen struct{ r *rand.Rand }

func (g gen) bool() bool              { return g.r.IntN(2) == 0 }
func (g gen) intn(lo, hi int) int     { return lo + g.r.IntN(hi-lo+1) }
func pick[T any](g gen, items ...T) T { return items[g.r.IntN(len(items))] }

func (g gen) text() string {
	var b strings.Builder
	for range g.intn(0, 6) {
		b.WriteString(pick(g, "a", "b", " ", "é", "🦀", "[", "]", ":", "/", "\n", `"`, "<", "[IMAGE:https://x/y.png]", "[Tool results]"))
	}
	return b.String()
}

func (g gen) id() string {
	var b strings.Builder
	for range g.intn(1, 6) {
		b.WriteString(pick(g, "a", "b", "c", "_", "1", "2"))
	}
	return b.String()
}

func (g gen) extra(base map[string]any) map[string]any {
	if g.bool() {
		base["cache_control"] = map[string]any{"type": "ephemeral"}
	}
	if g.bool() {
		base["x_note"] = pick[any](g, nil, true, 3, g.text())
	}
	return base
}

func (g gen) imageURL() string {
	return pick(g, "https://x.test/a.png", "http://h/b.jpg", "data:image/png;base64,AAAA", "data:;base64,")
}

func (g gen) times(lo, hi int, f func() any) []any {
	out := []any{}
	for range g.intn(lo, hi) {
		out = append(out, f())
	}
	return out
}

func (g gen) openAIMessages() any {
	return g.times(0, 6, func() any {
		role := pick(g, "system", "developer", "user", "assistant", "tool")
		m := map[string]any{"role": role}
		if g.bool() {
			m["name"] = g.text()
		}
		switch {
		case role == "tool":
			m["tool_call_id"], m["content"] = g.id(), g.text()
		case role == "assistant":
			m["content"] = pick[any](g, nil, g.text())
			if g.bool() {
				m["tool_calls"] = g.times(1, 2, func() any {
					return map[string]any{"id": g.id(), "type": "function", "function": map[string]any{"name": g.id(), "arguments": g.text()}}
				})
			}
			if g.bool() {
				m["refusal"] = pick[any](g, nil, g.text())
			}
		case role == "user" && g.bool():
			m["content"] = g.times(0, 3, func() any {
				if g.bool() {
					return map[string]any{"type": "text", "text": g.text()}
				}
				image := map[string]any{"url": g.imageURL()}
				if g.bool() {
					image["detail"] = pick(g, "low", "high", "auto")
				}
				return map[string]any{"type": "image_url", "image_url": image}
			})
		default:
			m["content"] = pick[any](g, g.text(), g.times(0, 2, func() any { return map[string]any{"type": "text", "text": g.text()} }))
		}
		return m
	})
}

func (g gen) responsesItems() any {
	return g.times(0, 6, func() any {
		switch pick(g, "message", "function_call", "output", "reasoning") {
		case "message":
			role := pick(g, "system", "developer", "user", "assistant")
			var content any = g.text()
			if g.bool() {
				partType := "input_text"
				if role == "assistant" {
					partType = "output_text"
				}
				parts := []any{map[string]any{"type": partType, "text": g.text()}}
				if role == "user" && g.bool() {
					parts = append(parts, map[string]any{"type": "input_image", "image_url": g.imageURL(), "detail": pick(g, "low", "high", "auto")})
				}
				content = parts
			}
			item := map[string]any{"role": role, "content": content}
			if g.bool() {
				item["type"], item["id"], item["status"] = "message", g.id(), "completed"
			}
			return item
		case "function_call":
			return g.extra(map[string]any{"type": "function_call", "call_id": g.id(), "name": g.id(), "arguments": g.text()})
		case "output":
			return map[string]any{"type": "function_call_output", "call_id": g.id(), "output": pick[any](g, g.text(), []any{map[string]any{"type": "input_text", "text": "o"}})}
		default:
			item := map[string]any{"type": "reasoning", "id": g.id(), "summary": g.times(0, 2, func() any { return map[string]any{"type": "summary_text", "text": g.text()} })}
			if g.bool() {
				item["encrypted_content"] = pick[any](g, nil, g.text())
			}
			return item
		}
	})
}

func (g gen) anthropicImage() any {
	if g.bool() {
		return map[string]any{"type": "image", "source": map[string]any{"type": "url", "url": g.imageURL()}}
	}
	return map[string]any{"type": "image", "source": map[string]any{"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
}

func (g gen) anthropicRequest() any {
	request := map[string]any{}
	switch pick(g, "none", "string", "blocks") {
	case "string":
		request["system"] = g.text()
	case "blocks":
		request["system"] = g.times(1, 2, func() any { return g.extra(map[string]any{"type": "text", "text": g.text()}) })
	}
	request["messages"] = g.times(0, 5, func() any {
		if g.bool() {
			blocks := g.times(0, 4, func() any {
				switch pick(g, "text", "thinking", "redacted", "tool_use") {
				case "text":
					return g.extra(map[string]any{"type": "text", "text": g.text()})
				case "thinking":
					return map[string]any{"type": "thinking", "thinking": g.text(), "signature": g.id()}
				case "redacted":
					return map[string]any{"type": "redacted_thinking", "data": g.text()}
				default:
					input := map[string]any{}
					for range g.intn(0, 3) {
						input[g.text()] = pick[any](g, 1, -2, true, nil, g.text())
					}
					return g.extra(map[string]any{"type": "tool_use", "id": g.id(), "name": g.id(), "input": input})
				}
			})
			return map[string]any{"role": "assistant", "content": pick[any](g, g.text(), blocks)}
		}
		blocks := g.times(0, 2, func() any {
			result := map[string]any{"type": "tool_result", "tool_use_id": g.id()}
			switch pick(g, "absent", "string", "blocks") {
			case "string":
				result["content"] = g.text()
			case "blocks":
				result["content"] = []any{map[string]any{"type": "text", "text": g.text()}, g.anthropicImage()}
			}
			if g.bool() {
				result["is_error"] = g.bool()
			}
			return g.extra(result)
		})
		blocks = append(blocks, g.times(0, 2, func() any {
			if g.bool() {
				return g.extra(map[string]any{"type": "text", "text": g.text()})
			}
			return g.anthropicImage()
		})...)
		return map[string]any{"role": "user", "content": pick[any](g, g.text(), blocks)}
	})
	return request
}

// A parallel pair whose second call was never answered: the sweep removes that call from the
// pair's one row and keeps the answered call with its output; the export leaves the removed call's
// item out and keeps the answered one's id.
func TestResponsesParallelCallsSweepKeepsTheAnsweredCall(t *testing.T) {
	client := tcpClient(t)
	transcript := `[
		{"role": "user", "content": "go"},
		{"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "a", "arguments": "{}"},
		{"type": "function_call", "id": "fc_2", "call_id": "c2", "name": "b", "arguments": "{}"},
		{"type": "function_call_output", "call_id": "c1", "output": "x"}
	]`
	history, err := turnkeeper.FromOpenAIResponses([]byte(transcript), turnkeeper.ConvertOptions{})
	if err != nil {
		t.Fatalf("import: %v", err)
	}
	swept, err := client.SweepOrphans(testContext(t), &turnkeeperv1.SweepOrphansRequest{History: history})
	if err != nil {
		t.Fatalf("SweepOrphans: %v", err)
	}
	if n := len(swept.GetRemovals()); n != 1 {
		t.Fatalf("want the unanswered call alone removed, got %d removals: %v", n, swept.GetRemovals())
	}
	out, err := turnkeeper.ToOpenAIResponses(swept.GetHistory())
	if err != nil {
		t.Fatalf("export: %v", err)
	}
	want := `[
		{"role": "user", "content": "go"},
		{"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "a", "arguments": "{}"},
		{"type": "function_call_output", "call_id": "c1", "output": "x"}
	]`
	if diff := sameJSON(t, out, []byte(want)); diff != "" {
		t.Errorf("export (-want +got):\n%s", diff)
	}
}

func TestConverterRoundTripProperties(t *testing.T) {
	client := tcpClient(t)
	generators := map[string]func(gen) any{
		"openai_chat":      gen.openAIMessages,
		"openai_responses": gen.responsesItems,
		"anthropic":        gen.anthropicRequest,
	}
	formats := slices.Sorted(func(yield func(string) bool) {
		for k := range generators {
			if !yield(k) {
				return
			}
		}
	})
	for _, format := range formats {
		t.Run(format, func(t *testing.T) {
			conv := converters[format]
			for seed := uint64(1); seed <= 60; seed++ {
				provider, err := json.Marshal(generators[format](gen{rand.New(rand.NewPCG(seed, 0))}))
				if err != nil {
					t.Fatal(err)
				}
				shape := turnkeeper.ShapeChat
				if seed%2 == 1 {
					shape = turnkeeper.ShapeConversation
				}
				where := fmt.Sprintf("seed %d (%s): %s", seed, shape, provider)
				history, err := conv.from(provider, turnkeeper.ConvertOptions{Shape: shape})
				if err != nil {
					t.Fatalf("%s: import: %v", where, err)
				}
				out, err := conv.to(trimWithoutPressure(t, client, history))
				if err != nil {
					t.Fatalf("%s: export: %v", where, err)
				}
				if diff := sameJSON(t, out, provider); diff != "" {
					t.Fatalf("%s: round trip (-want +got):\n%s", where, diff)
				}
			}
		})
	}
}
