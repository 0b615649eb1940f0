package turnkeeper_test

// The shared apply-plan vectors (tests/conformance/compaction, spec §15.3 step 4) through
// ApplyCompaction: each gives its expected history exactly, or is refused with *ConversionError.
// They need no server.

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	turnkeeperv1 "github.com/turnkeeper/turnkeeper/clients/go/gen/turnkeeper/v1"
	"github.com/turnkeeper/turnkeeper/clients/go/turnkeeper"
)

type compactionVector struct {
	Name        string          `json:"name"`
	Rule        string          `json:"rule"`
	Description string          `json:"description"`
	History     json.RawMessage `json:"history"`
	Plan        json.RawMessage `json:"plan"`
	SummaryText string          `json:"summaryText"`
	Expect      struct {
		History json.RawMessage `json:"history"`
		Error   bool            `json:"error"`
	} `json:"expect"`
}

func TestCompactionVectors(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "..", "tests", "conformance", "compaction", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 6 {
		t.Fatalf("%d compaction vectors, want at least 6", len(files))
	}
	for _, path := range files {
		stem := strings.TrimSuffix(filepath.Base(path), ".json")
		t.Run(stem, func(t *testing.T) {
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			// Strict: a misspelt key would silently skip a check.
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.DisallowUnknownFields()
			var v compactionVector
			if err := dec.Decode(&v); err != nil {
				t.Fatal(err)
			}
			if _, name, _ := strings.Cut(stem, "-"); name != v.Name {
				t.Fatalf("name %q does not match the file name", v.Name)
			}
			if (v.Expect.History == nil) == !v.Expect.Error {
				t.Fatal("expect needs exactly one of history and error: true")
			}
			history, plan := &turnkeeperv1.History{}, &turnkeeperv1.CompactionPlan{}
			parseJSON(t, "history", v.History, history)
			parseJSON(t, "plan", v.Plan, plan)
			applied, err := turnkeeper.ApplyCompaction(history, plan, v.SummaryText)
			if v.Expect.Error {
				var conversion *turnkeeper.ConversionError
				if !errors.As(err, &conversion) {
					t.Fatalf("%s (%s): want a *ConversionError, got %v (history %v)", v.Name, v.Rule, err, applied)
				}
				return
			}
			if err != nil {
				t.Fatalf("%s (%s): %v", v.Name, v.Rule, err)
			}
			want := &turnkeeperv1.History{}
			parseJSON(t, "expect.history", v.Expect.History, want)
			if !proto.Equal(want, applied) {
				t.Errorf("%s (%s): history differs (-want +got):\n%s", v.Name, v.Rule, cmp.Diff(want, applied, protocmp.Transform()))
			}
		})
	}
}

// The applied history is a copy: changing it leaves the history the plan was made for as it was.
func TestApplyCompactionCopiesTheRows(t *testing.T) {
	history := turnkeeper.ChatHistory(turnkeeper.System("sys"), turnkeeper.User("q1"), turnkeeper.Assistant("a1"), turnkeeper.User("q2"))
	before := proto.Clone(history)
	plan := &turnkeeperv1.CompactionPlan{CondensedRows: []*turnkeeperv1.IndexRange{{Start: 1, End: 3}}}
	applied, err := turnkeeper.ApplyCompaction(history, plan, "summary")
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range applied.GetChat().GetMessages() {
		row.Content = "changed"
	}
	if !proto.Equal(before, history) {
		t.Errorf("applying changed the input history: %v", history)
	}
}

// The server plans, the client applies, and the server accepts the applied history: spec §11's
// history (a 104-token system row, ten turns of two 104-token rows), budget 2,000, the first turn
// pinned. The budget trim drops turn 2 alone, so the plan condenses it and keeps turn 1 out.
func TestPlanCompactionThenApplyIt(t *testing.T) {
	client := tcpClient(t)
	ctx := testContext(t)
	row := strings.Repeat("x", 400) // 104 tokens
	rows := []*turnkeeperv1.ChatMessage{turnkeeper.System(row)}
	for turn := range 10 {
		question := turnkeeper.User(row)
		question.Pinned = turn == 0
		rows = append(rows, question, turnkeeper.Assistant(row))
	}
	history := turnkeeper.ChatHistory(rows...)
	profiles := &turnkeeperv1.Profiles{
		Runtime:   &turnkeeperv1.RuntimeProfile{DefaultProvider: "p", MaxContextTokens: proto.Uint64(2_000)},
		Providers: []*turnkeeperv1.ProviderProfile{{Alias: "p", Model: "m", ContextWindow: proto.Uint64(8_000)}},
	}
	planned, err := client.PlanCompaction(ctx, &turnkeeperv1.PlanCompactionRequest{
		History: history, Profiles: profiles, SummaryOutputTokens: proto.Uint64(100)})
	if err != nil {
		t.Fatal(err)
	}
	plan := planned.GetPlan()
	if plan == nil {
		t.Fatalf("no plan: %v", planned.GetRefusal())
	}
	if plan.GetCondensedTurns() != 1 || plan.GetSavedTokens() != 208-100 {
		t.Errorf("condensed %d turns saving %d, want 1 turn saving 108", plan.GetCondensedTurns(), plan.GetSavedTokens())
	}
	applied, err := turnkeeper.ApplyCompaction(history, plan, "Summary: turn 2 asked and answered.")
	if err != nil {
		t.Fatal(err)
	}
	got := applied.GetChat().GetMessages()
	want := append([]*turnkeeperv1.ChatMessage{rows[0], turnkeeper.SummaryRow("Summary: turn 2 asked and answered."), rows[1], rows[2]}, rows[5:]...)
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("applied history differs (-want +got):\n%s", diff)
	}
	prepared, err := client.PrepareModelCall(ctx, &turnkeeperv1.PrepareModelCallRequest{History: applied, Profiles: profiles})
	if err != nil {
		t.Fatalf("the server refused the applied history: %v", err)
	}
	// 104 + the summary + 9 x 208 < 2,000: the applied history fits, nothing is trimmed.
	if len(prepared.GetTrims()) != 0 || !proto.Equal(prepared.GetHistory(), applied) {
		t.Errorf("the applied history was trimmed again: %v", prepared.GetTrims())
	}
}
