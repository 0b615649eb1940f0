package turnkeeper_test

// The second-edition wrappers (spec §10) against the live server.

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	turnkeeperv1 "github.com/turnkeeper/turnkeeper/clients/go/gen/turnkeeper/v1"
	"github.com/turnkeeper/turnkeeper/clients/go/turnkeeper"
)

// TestClassifyProviderError (spec §10.4): a message holding a listed phrase, in any case, is an
// overflow naming that phrase; a near miss is not; a status outside 100-599 is a field violation.
func TestClassifyProviderError(t *testing.T) {
	client := tcpClient(t)
	ctx := testContext(t)
	resp, err := client.ClassifyProviderError(ctx, &turnkeeperv1.ClassifyProviderErrorRequest{
		Message:    "Error 400: Prompt is too long: 250000 tokens > 200000 maximum",
		HttpStatus: proto.Uint32(400),
		Provider:   "anthropic",
	})
	if err != nil {
		t.Fatalf("ClassifyProviderError: %v", err)
	}
	if !resp.GetOverflow() || resp.GetMatchedPhrase() != "prompt is too long" || resp.GetPhraseSource() != turnkeeperv1.PhraseSource_PHRASE_SOURCE_BUILT_IN {
		t.Errorf("classified as %v, want a built-in overflow on %q", resp, "prompt is too long")
	}
	resp, err = client.ClassifyProviderError(ctx, &turnkeeperv1.ClassifyProviderErrorRequest{Message: "rate limit exceeded: too many requests"})
	if err != nil {
		t.Fatalf("ClassifyProviderError: %v", err)
	}
	if resp.GetOverflow() || resp.GetMatchedPhrase() != "" || resp.GetPhraseSource() != turnkeeperv1.PhraseSource_PHRASE_SOURCE_UNSPECIFIED {
		t.Errorf("a rate limit classified as %v, want no overflow", resp)
	}
	_, err = client.ClassifyProviderError(ctx, &turnkeeperv1.ClassifyProviderErrorRequest{Message: "x", HttpStatus: proto.Uint32(700)})
	e := asError(t, err)
	if e.Code != codes.InvalidArgument || e.ErrorReason() != turnkeeperv1.ErrorReason_ERROR_REASON_INVALID_PROVIDER_ERROR || !slices.Equal(e.Fields(), []string{"http_status"}) {
		t.Errorf("status 700 failed with %v, want INVALID_ARGUMENT on http_status", err)
	}
}

// sevenRows is a system row and three short turns.
func sevenRows() *turnkeeperv1.History {
	rows := []*turnkeeperv1.ChatMessage{turnkeeper.System("sys")}
	for _, turn := range []string{"one", "two", "three"} {
		rows = append(rows, turnkeeper.User("user turn "+turn+" asks"), turnkeeper.Assistant("answer "+turn))
	}
	return turnkeeper.ChatHistory(rows...)
}

// pricedProfiles is the route p/m with a known 1,000-token window and input prices for m.
func pricedProfiles(maxContextTokens *uint64) *turnkeeperv1.Profiles {
	return &turnkeeperv1.Profiles{
		Runtime: &turnkeeperv1.RuntimeProfile{DefaultProvider: "p", MaxContextTokens: maxContextTokens},
		Providers: []*turnkeeperv1.ProviderProfile{{
			Alias: "p", Model: "m", ContextWindow: proto.Uint64(1000),
			Prices: &turnkeeperv1.ModelPrices{InputPerMillionTokens: 2.5, CachedInputPerMillionTokens: proto.Float64(0.25), Currency: "USD"},
		}},
	}
}

func near(got, want float64) bool { return math.Abs(got-want) <= 1e-12*math.Max(1, math.Abs(want)) }

// TestReportedUsageOf (spec §10.3): the estimate is what was sent, tool schemas included, without
// the reserved output; the tool-schema part is carried over.
func TestReportedUsageOf(t *testing.T) {
	usage := turnkeeper.ReportedUsageOf(&turnkeeperv1.CapacityReport{
		MessageTokens: 80, HookTokens: 7, ToolSchemaTokens: 9, ReservedOutputTokens: 100, TotalTokens: 196,
	}, 250)
	if usage.GetReportedInputTokens() != 250 || usage.GetEstimatedInputTokens() != 96 || usage.GetToolSchemaTokens() != 9 {
		t.Fatalf("ReportedUsageOf = %v", usage)
	}
}

// TestPrepareCalibratesWithReportedUsage (spec §10.3, §10.5): the first call's CapacityReport
// and the provider's count become the next call's ReportedUsage, whose budget trim then counts
// provider tokens; every response carries the meter and the cost of the resolved route.
func TestPrepareCalibratesWithReportedUsage(t *testing.T) {
	client := tcpClient(t)
	ctx := testContext(t)
	req := &turnkeeperv1.PrepareModelCallRequest{
		History:              sevenRows(),
		Profiles:             pricedProfiles(proto.Uint64(100)),
		HookTexts:            []string{"Be brief."},
		ReservedOutputTokens: 100,
		CachedInputTokens:    proto.Uint64(40),
	}
	first, err := client.PrepareModelCall(ctx, req)
	if err != nil {
		t.Fatalf("PrepareModelCall: %v", err)
	}
	if len(first.GetTrims()) != 0 {
		t.Fatalf("the first call trimmed: %v", first.GetTrims())
	}
	report := first.GetCapacityReport()
	used := report.GetTotalTokens() - report.GetReservedOutputTokens()
	meter := first.GetContextMeter()
	if meter.GetUsedTokens() != used || meter.GetBudgetTokens() != 100 || meter.GetCapacityTokens() != 1000 || !near(meter.GetCapacityFraction(), float64(used)/1000) {
		t.Errorf("meter %v, want %d of 1000 used, budget 100", meter, used)
	}
	cost := first.GetInputCost()
	if cost.GetCurrency() != "USD" || cost.GetCachedInputTokens() != 40 || cost.GetUncachedInputTokens() != used-40 || !near(cost.GetCost(), (float64(used-40)*2.5+40*0.25)/1e6) {
		t.Errorf("input cost %v", cost)
	}

	// The provider counted twice as much as estimated: more than the budget of 100.
	req.ReportedUsage = turnkeeper.ReportedUsageOf(report, 2*used)
	second, err := client.PrepareModelCall(ctx, req)
	if err != nil {
		t.Fatalf("PrepareModelCall with reported usage: %v", err)
	}
	trims := second.GetTrims()
	if len(trims) == 0 {
		t.Fatal("a reported count above the budget did not trim")
	}
	calibrated := trims[len(trims)-1]
	// spec §16.2 step 5 scales the history, tool schemas included, not the hooks the count also covered.
	before := 2 * (report.GetMessageTokens() + report.GetToolSchemaTokens())
	if calibrated.GetCountSource() != turnkeeperv1.CountSource_COUNT_SOURCE_PROVIDER_REPORTED || calibrated.GetTokensBefore() != before {
		t.Errorf("trim %v, want provider-reported counts from %d", calibrated, before)
	}
	if got, want := calibrated.GetCalibration().GetCalibratedTargetTokens(), max(1, 100*used/(2*used)); got != want {
		t.Errorf("calibrated target %d, want %d", got, want)
	}
}

// TestTrimHistoryReportedUsageMode (spec §10.3): counts in the outcome and the event are the
// provider's; within the budget by its count, both counts are the reported one.
func TestTrimHistoryReportedUsageMode(t *testing.T) {
	client := tcpClient(t)
	ctx := testContext(t)
	estimate, err := client.EstimateTokens(ctx, &turnkeeperv1.EstimateTokensRequest{History: sevenRows()})
	if err != nil {
		t.Fatalf("EstimateTokens: %v", err)
	}
	total := estimate.GetTotalTokens()
	req := &turnkeeperv1.TrimHistoryRequest{
		History:       sevenRows(),
		Mode:          turnkeeperv1.TrimMode_TRIM_MODE_REPORTED_USAGE,
		CallerPath:    turnkeeperv1.CallerPath_CALLER_PATH_AGENT,
		Limits:        &turnkeeperv1.TrimHistoryRequest_ExplicitLimits{ExplicitLimits: &turnkeeperv1.ExplicitLimits{BudgetTokens: proto.Uint64(total)}},
		ReportedUsage: &turnkeeperv1.ReportedUsage{ReportedInputTokens: 3 * total, EstimatedInputTokens: total},
		Caller:        &turnkeeperv1.CallerContext{SessionId: uniqueID(t)},
	}
	trimmed, err := client.TrimHistory(ctx, req)
	if err != nil {
		t.Fatalf("TrimHistory: %v", err)
	}
	outcome := trimmed.GetOutcome()
	if !outcome.GetTrimmed() || outcome.GetCountSource() != turnkeeperv1.CountSource_COUNT_SOURCE_PROVIDER_REPORTED || outcome.GetTokensBefore() != 3*total {
		t.Errorf("outcome %v, want a provider-reported trim from %d", outcome, 3*total)
	}
	if trimmed.GetHistoryTrimmed().GetCountSource() != turnkeeperv1.CountSource_COUNT_SOURCE_PROVIDER_REPORTED {
		t.Errorf("event count source %v", trimmed.GetHistoryTrimmed().GetCountSource())
	}
	req.ReportedUsage.ReportedInputTokens = total
	unchanged, err := client.TrimHistory(ctx, req)
	if err != nil {
		t.Fatalf("TrimHistory: %v", err)
	}
	if o := unchanged.GetOutcome(); o.GetTrimmed() || o.GetTokensBefore() != total || o.GetTokensAfter() != total {
		t.Errorf("outcome %v, want unchanged at the reported %d", o, total)
	}
}

// TestMeterWithoutKnownCapacity (spec §10.5): the 32,000 fallback is never shown as a capacity;
// no prices, no cost.
func TestMeterWithoutKnownCapacity(t *testing.T) {
	prepared, err := tcpClient(t).PrepareModelCall(testContext(t), &turnkeeperv1.PrepareModelCallRequest{History: sevenRows()})
	if err != nil {
		t.Fatalf("PrepareModelCall: %v", err)
	}
	meter := prepared.GetContextMeter()
	if meter.GetUsedTokens() != prepared.GetCapacityReport().GetTotalTokens() || meter.CapacityTokens != nil || meter.CapacityFraction != nil || prepared.GetInputCost() != nil {
		t.Errorf("meter %v, cost %v: want no capacity and no cost", meter, prepared.GetInputCost())
	}
}

// TestRecoveryThatCannotTrimSaysWhy (spec §10.1): one turn left is reported with the floor, the
// blocker and the route, never a silent no-op.
func TestRecoveryThatCannotTrimSaysWhy(t *testing.T) {
	prepared, err := tcpClient(t).PrepareModelCall(testContext(t), &turnkeeperv1.PrepareModelCallRequest{
		History:          turnkeeper.ChatHistory(turnkeeper.System(strings.Repeat("s", 400)), turnkeeper.User("the only turn")),
		Profiles:         pricedProfiles(proto.Uint64(50)),
		OverflowRecovery: true,
	})
	if err != nil {
		t.Fatalf("PrepareModelCall: %v", err)
	}
	r := prepared.GetRecovery()
	if r.GetTrimmed() || r.GetBlocker() != turnkeeperv1.RecoveryBlocker_RECOVERY_BLOCKER_SINGLE_TURN || r.GetTargetTokens() != 2*r.GetBaselineTokens()/3 {
		t.Errorf("recovery %v, want a single-turn blocker", r)
	}
	if r.GetBudgetTokens() != 50 || r.GetSystemFloorTokens() <= 50 || !r.GetSystemFloorReachesBudget() || r.GetRoute().GetProvider() != "p" || r.GetRoute().GetModel() != "m" {
		t.Errorf("recovery %v, want the floor above the budget of 50 on p/m", r)
	}
}

// TestToolResultCapFromProfiles (spec §10.6): unset means 50,000 characters, 0 disables.
func TestToolResultCapFromProfiles(t *testing.T) {
	client := tcpClient(t)
	ctx := testContext(t)
	long := strings.Repeat("x", 50_001)
	def, err := client.CapToolResults(ctx, &turnkeeperv1.CapToolResultsRequest{Contents: []string{long}, Profiles: &turnkeeperv1.Profiles{}})
	if err != nil {
		t.Fatalf("CapToolResults: %v", err)
	}
	if def.GetMaxToolResultChars() != 50_000 || def.GetResults()[0].GetTruncatedChars() == 0 {
		t.Errorf("default cap %d, truncated %d", def.GetMaxToolResultChars(), def.GetResults()[0].GetTruncatedChars())
	}
	off, err := client.CapToolResults(ctx, &turnkeeperv1.CapToolResultsRequest{
		Contents: []string{long},
		Profiles: &turnkeeperv1.Profiles{Runtime: &turnkeeperv1.RuntimeProfile{MaxToolResultChars: proto.Uint64(0)}},
	})
	if err != nil {
		t.Fatalf("CapToolResults: %v", err)
	}
	if off.GetMaxToolResultChars() != 0 || off.GetResults()[0].GetContent() != long {
		t.Errorf("a disabled cap changed the result (cap %d)", off.GetMaxToolResultChars())
	}
}

// TestMeterUpdatesOnlyForSubscribersThatOptIn (spec §10.5): IncludeMeterUpdates delivers the
// meter of every prepared call of the session, as returned; without it none arrives.
func TestMeterUpdatesOnlyForSubscribersThatOptIn(t *testing.T) {
	client := tcpClient(t)
	session := uniqueID(t)
	subscribe := func(meters bool) *turnkeeper.Subscription {
		sub, err := client.SubscribeTrimEvents(testContext(t), &turnkeeperv1.TrimEventsRequest{
			SessionIds: []string{session}, HeartbeatInterval: durationpb.New(time.Second), IncludeMeterUpdates: meters,
		})
		if err != nil {
			t.Fatalf("SubscribeTrimEvents: %v", err)
		}
		t.Cleanup(sub.Close)
		return sub
	}
	metered, plain := subscribe(true), subscribe(false)
	prepared, err := client.PrepareModelCall(testContext(t), &turnkeeperv1.PrepareModelCallRequest{
		History: sevenRows(), Profiles: pricedProfiles(nil), Caller: &turnkeeperv1.CallerContext{SessionId: session},
	})
	if err != nil {
		t.Fatalf("PrepareModelCall: %v", err)
	}
	registered(t, metered)
	item, err := metered.Recv()
	if err != nil {
		t.Fatalf("Recv: %v", err)
	}
	update := item.GetMeterUpdate()
	if update == nil || update.GetCaller().GetSessionId() != session || !proto.Equal(update.GetMeter(), prepared.GetContextMeter()) || !proto.Equal(update.GetRoute(), prepared.GetResolution().GetRoute()) {
		t.Fatalf("got %v, want the meter update of the prepared call", item)
	}
	if metered.Cursor() != update.GetCursor() {
		t.Errorf("cursor %q after a meter update with cursor %q", metered.Cursor(), update.GetCursor())
	}
	// With no trim in between the next update shares that cursor (the feed position of the trims
	// before it): it is delivered all the same.
	again, err := client.PrepareModelCall(testContext(t), &turnkeeperv1.PrepareModelCallRequest{
		History: sevenRows(), Profiles: pricedProfiles(nil), Caller: &turnkeeperv1.CallerContext{SessionId: session},
	})
	if err != nil {
		t.Fatalf("PrepareModelCall: %v", err)
	}
	if item, err = metered.Recv(); err != nil || !proto.Equal(item.GetMeterUpdate().GetMeter(), again.GetContextMeter()) {
		t.Fatalf("got %v (%v), want the second meter update", item, err)
	}
	registered(t, plain)
	awaitHeartbeat(t, plain) // an idle heartbeat, no meter update
}
