package turnkeeper_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	turnkeeperv1 "github.com/turnkeeper/turnkeeper/clients/go/gen/turnkeeper/v1"
	"github.com/turnkeeper/turnkeeper/clients/go/turnkeeper"
)

func asError(t *testing.T, err error) *turnkeeper.Error {
	t.Helper()
	var e *turnkeeper.Error
	if !errors.As(err, &e) {
		t.Fatalf("want *turnkeeper.Error, got %T: %v", err, err)
	}
	return e
}

func TestInvalidRequestDetails(t *testing.T) {
	client := tcpClient(t)
	_, err := client.EstimateTokens(testContext(t), &turnkeeperv1.EstimateTokensRequest{History: turnkeeper.ChatHistory(
		&turnkeeperv1.ChatMessage{Content: "no role"},
		turnkeeper.User("hi"),
		turnkeeper.Tool("", "a tool row without its call id"),
	)})
	e := asError(t, err)
	if e.Code != codes.InvalidArgument || status.Code(err) != codes.InvalidArgument {
		t.Errorf("code %s (status.Code %s), want InvalidArgument", e.Code, status.Code(err))
	}
	if e.ErrorReason() != turnkeeperv1.ErrorReason_ERROR_REASON_INVALID_HISTORY || e.Domain != turnkeeper.ErrorDomain {
		t.Errorf("reason %s/%s, want %s/ERROR_REASON_INVALID_HISTORY", e.Domain, e.Reason, turnkeeper.ErrorDomain)
	}
	fields := e.Fields()
	slices.Sort(fields)
	want := []string{"history.chat.messages[0].role", "history.chat.messages[2].tool_call_id"}
	if !slices.Equal(fields, want) {
		t.Errorf("field violations %q, want %q", fields, want)
	}
	for _, v := range e.FieldViolations {
		if v.Description == "" {
			t.Errorf("violation %s has no description", v.Field)
		}
	}
}

func TestCapacityExceededDetails(t *testing.T) {
	client := tcpClient(t)
	ctx := testContext(t)
	history := threeTurns("capacity")
	profiles := &turnkeeperv1.Profiles{
		Runtime:   &turnkeeperv1.RuntimeProfile{DefaultProvider: "small"},
		Providers: []*turnkeeperv1.ProviderProfile{{Alias: "small", Model: "tiny", ContextWindow: proto.Uint64(100)}},
	}
	estimate, err := client.EstimateTokens(ctx, &turnkeeperv1.EstimateTokensRequest{History: history})
	if err != nil {
		t.Fatal(err)
	}
	_, err = client.CheckCapacity(ctx, &turnkeeperv1.CheckCapacityRequest{
		History: history, Profiles: profiles, ToolSchemas: []string{`{"name":"x"}`}, ReservedOutputTokens: 7,
	})
	e := asError(t, err)
	if e.Code != codes.FailedPrecondition || e.ErrorReason() != turnkeeperv1.ErrorReason_ERROR_REASON_CONTEXT_WINDOW_EXCEEDED {
		t.Fatalf("got %v, want FAILED_PRECONDITION / CONTEXT_WINDOW_EXCEEDED", err)
	}
	report := e.CapacityReport
	want := &turnkeeperv1.CapacityReport{
		MessageTokens:        estimate.GetTotalTokens(),
		ToolSchemaTokens:     3 + 4, // 12 bytes: ceil(12/4) + 4 framing
		ReservedOutputTokens: 7,
		TotalTokens:          estimate.GetTotalTokens() + 7 + 7,
		Capacity:             &turnkeeperv1.Capacity{Known: true, SafetyTokens: 100, ModelContextWindow: proto.Uint64(100)},
		Fits:                 false,
	}
	if !proto.Equal(report, want) {
		t.Errorf("CapacityReport %v, want %v", report, want)
	}
	if len(e.PreconditionViolations) == 0 {
		t.Error("no google.rpc.PreconditionFailure detail")
	}
}

func TestUnixAndTCPConnections(t *testing.T) {
	socket := liveEnv(t, "TURNKEEPER_UNIX")
	req := &turnkeeperv1.EstimateTokensRequest{History: turnkeeper.ChatHistory(turnkeeper.System("sys"), turnkeeper.User("abcd"))}
	for _, target := range []string{liveEnv(t, "TURNKEEPER_ADDRESS"), socket, "unix://" + socket} {
		t.Run(target, func(t *testing.T) {
			resp, err := connect(t, target).EstimateTokens(testContext(t), req)
			if err != nil {
				t.Fatal(err)
			}
			// "sys": ceil(3/4)+4 = 5; "abcd": 1+4 = 5.
			if resp.GetTotalTokens() != 10 || resp.GetTurns() != 1 {
				t.Errorf("estimate %d tokens / %d turns, want 10 / 1", resp.GetTotalTokens(), resp.GetTurns())
			}
		})
	}
}

func TestLargeMessagesWithinLimit(t *testing.T) {
	client := tcpClient(t)
	// 16 MiB: over grpc-go's 4 MiB default in both directions, within the 64 MiB limit.
	content := string(make([]byte, 16<<20))
	resp, err := client.CapToolResults(testContext(t), &turnkeeperv1.CapToolResultsRequest{Contents: []string{content}})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.GetResults()[0].GetContent(); len(got) != len(content) {
		t.Errorf("result of %d bytes, want %d", len(got), len(content))
	}
}

func TestDeadlines(t *testing.T) {
	req := &turnkeeperv1.CapToolResultsRequest{Contents: []string{"x"}}
	client := tcpClient(t, turnkeeper.WithTimeout(time.Nanosecond))
	_, err := client.CapToolResults(context.Background(), req)
	if e := asError(t, err); e.Code != codes.DeadlineExceeded {
		t.Errorf("default deadline: got %v, want DeadlineExceeded", err)
	}
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		t.Errorf("timed-out call %v: errors.Is(context.DeadlineExceeded) must hold, Canceled not", err)
	}
	// The caller's own expired deadline, and a cancelled context, match their context errors.
	expired, cancelExpired := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancelExpired()
	<-expired.Done()
	if _, err := client.CapToolResults(expired, req); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("call on an expired context: %v, want errors.Is(context.DeadlineExceeded)", err)
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = client.CapToolResults(cancelled, req)
	if !errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("call on a cancelled context: %v, want errors.Is(context.Canceled) only", err)
	}
	if e := asError(t, err); e.Code != codes.Canceled {
		t.Errorf("cancelled call: code %s, want Canceled", e.Code)
	}
	// A status error from the server counts the same way, wrapped or not.
	if !errors.Is(fmt.Errorf("calling: %w", turnkeeper.FromError(status.Error(codes.Canceled, "x"))), context.Canceled) {
		t.Error("a CANCELLED status must match context.Canceled")
	}
	if errors.Is(turnkeeper.FromError(status.Error(codes.Internal, "x")), context.Canceled) {
		t.Error("an INTERNAL status must not match context.Canceled")
	}
	// A deadline on the caller's context overrides the client default.
	if _, err := client.CapToolResults(testContext(t), req); err != nil {
		t.Errorf("call with its own deadline: %v", err)
	}
}

func TestFromErrorDecodesDetails(t *testing.T) {
	st, err := status.New(codes.FailedPrecondition, "does not fit").WithDetails(
		&errdetails.ErrorInfo{Reason: "ERROR_REASON_CONTEXT_WINDOW_EXCEEDED", Domain: turnkeeper.ErrorDomain, Metadata: map[string]string{"k": "v"}},
		&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "a", Description: "bad a"}, {Field: "b"}}},
		&errdetails.PreconditionFailure{Violations: []*errdetails.PreconditionFailure_Violation{{Type: "CAPACITY"}}},
		&turnkeeperv1.CapacityReport{TotalTokens: 12, Fits: false},
	)
	if err != nil {
		t.Fatal(err)
	}
	wrapped := fmt.Errorf("calling: %w", st.Err())
	e := turnkeeper.FromError(wrapped)
	if e.Code != codes.FailedPrecondition || e.Message != "does not fit" || e.Metadata["k"] != "v" {
		t.Errorf("decoded %+v", e)
	}
	if e.ErrorReason() != turnkeeperv1.ErrorReason_ERROR_REASON_CONTEXT_WINDOW_EXCEEDED || turnkeeper.ReasonOf(wrapped) != e.ErrorReason() {
		t.Errorf("reason %v", e.ErrorReason())
	}
	if want := []turnkeeper.FieldViolation{{"a", "bad a"}, {"b", ""}}; !slices.Equal(e.FieldViolations, want) {
		t.Errorf("violations %v, want %v", e.FieldViolations, want)
	}
	if e.CapacityReport.GetTotalTokens() != 12 || len(e.PreconditionViolations) != 1 {
		t.Errorf("capacity %v, preconditions %v", e.CapacityReport, e.PreconditionViolations)
	}
	if status.Code(e) != codes.FailedPrecondition || e.Unwrap() != wrapped {
		t.Errorf("status.Code %s, unwrap %v", status.Code(e), e.Unwrap())
	}
	if got := e.Error(); got != "turnkeeper: FailedPrecondition (ERROR_REASON_CONTEXT_WINDOW_EXCEEDED): does not fit" {
		t.Errorf("Error() = %q", got)
	}
	if turnkeeper.FromError(e) != e || turnkeeper.FromError(nil) != nil {
		t.Error("FromError must return an *Error as is and nil for nil")
	}
	if c := turnkeeper.FromError(context.DeadlineExceeded); c.Code != codes.DeadlineExceeded || !errors.Is(c, context.DeadlineExceeded) {
		t.Errorf("context error decoded as %v", c)
	}
	// A reason from another domain is not a turnkeeper reason.
	foreign, _ := status.New(codes.Internal, "x").WithDetails(&errdetails.ErrorInfo{Reason: "ERROR_REASON_INVALID_HISTORY", Domain: "example.com"})
	if r := turnkeeper.ReasonOf(foreign.Err()); r != turnkeeperv1.ErrorReason_ERROR_REASON_UNSPECIFIED {
		t.Errorf("foreign reason decoded as %v", r)
	}
}

func TestNewRejectsEmptyTarget(t *testing.T) {
	if _, err := turnkeeper.New(""); err == nil {
		t.Error("New(\"\") succeeded")
	}
}
