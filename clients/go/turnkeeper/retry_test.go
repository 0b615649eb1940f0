package turnkeeper_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	turnkeeperv1 "github.com/turnkeeper/turnkeeper/clients/go/gen/turnkeeper/v1"
	"github.com/turnkeeper/turnkeeper/clients/go/turnkeeper"
)

// scripted is a request the scripted fake (with_server.py --overloaded, tests/support/flaky.py)
// refuses per script ("CODE:delay_ms ...", -1: no RetryInfo) under a call id of its own; its answer's
// TotalTokens is the number of attempts the call took.
func scripted(t *testing.T, script string) *turnkeeperv1.EstimateTokensRequest {
	return &turnkeeperv1.EstimateTokensRequest{History: turnkeeper.ChatHistory(turnkeeper.User(uniqueID(t) + " " + script))}
}

// counting connects to the server in variable and counts the attempts the client makes.
func counting(t *testing.T, variable string, attempts *int, opts ...turnkeeper.Option) *turnkeeper.Client {
	count := grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
		*attempts++
		return invoker(ctx, method, req, reply, cc, callOpts...)
	})
	return connect(t, liveEnv(t, variable), append(opts, turnkeeper.WithDialOptions(count))...)
}

func estimateTimed(client *turnkeeper.Client, ctx context.Context, req *turnkeeperv1.EstimateTokensRequest) (*turnkeeperv1.EstimateTokensResponse, time.Duration, error) {
	started := time.Now()
	resp, err := client.EstimateTokens(ctx, req)
	return resp, time.Since(started), err
}

func TestRetryInfoIsWaitedForThenTheCallSucceeds(t *testing.T) {
	client := connect(t, liveEnv(t, "TURNKEEPER_FLAKY_ADDRESS"))
	resp, elapsed, err := estimateTimed(client, testContext(t), scripted(t, "RESOURCE_EXHAUSTED:300 UNAVAILABLE:200"))
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetTotalTokens() != 3 || elapsed < 500*time.Millisecond {
		t.Errorf("%d attempts in %v, want 3 after the two RetryInfo delays (500ms)", resp.GetTotalTokens(), elapsed)
	}
}

func TestRetryAttemptsAreBounded(t *testing.T) {
	attempts := 0
	client := counting(t, "TURNKEEPER_FLAKY_ADDRESS", &attempts)
	_, err := client.EstimateTokens(testContext(t), scripted(t, strings.Repeat("RESOURCE_EXHAUSTED:10 ", 5)))
	if e := asError(t, err); e.Code != codes.ResourceExhausted || !e.HasRetryDelay || e.RetryDelay != 10*time.Millisecond {
		t.Errorf("got %v (retry delay %v), want the last RESOURCE_EXHAUSTED with its RetryInfo", e, e.RetryDelay)
	}
	if attempts != turnkeeper.DefaultRetryPolicy.MaxAttempts {
		t.Errorf("%d attempts, want %d", attempts, turnkeeper.DefaultRetryPolicy.MaxAttempts)
	}
	policy := turnkeeper.DefaultRetryPolicy
	policy.MaxAttempts = 5
	five := connect(t, liveEnv(t, "TURNKEEPER_FLAKY_ADDRESS"), turnkeeper.WithRetry(policy))
	resp, err := five.EstimateTokens(testContext(t), scripted(t, "RESOURCE_EXHAUSTED:10 RESOURCE_EXHAUSTED:10 UNAVAILABLE:10 UNAVAILABLE:10"))
	if err != nil || resp.GetTotalTokens() != 5 {
		t.Errorf("MaxAttempts 5: %v (%v), want success on the fifth attempt", resp, err)
	}
}

func TestNotRetried(t *testing.T) {
	smallMaxDelay := turnkeeper.DefaultRetryPolicy
	smallMaxDelay.MaxDelay = 200 * time.Millisecond
	for _, c := range []struct {
		why, script string
		code        codes.Code
		option      turnkeeper.Option
	}{
		{"retrying turned off", "RESOURCE_EXHAUSTED:50", codes.ResourceExhausted, turnkeeper.WithoutRetry()},
		{"RESOURCE_EXHAUSTED without RetryInfo", "RESOURCE_EXHAUSTED:-1", codes.ResourceExhausted, nil},
		{"RetryInfo over MaxDelay", "RESOURCE_EXHAUSTED:500", codes.ResourceExhausted, turnkeeper.WithRetry(smallMaxDelay)},
		{"a code the policy does not retry", "INTERNAL:50", codes.Internal, nil},
	} {
		t.Run(c.why, func(t *testing.T) {
			var opts []turnkeeper.Option
			if c.option != nil {
				opts = append(opts, c.option)
			}
			attempts := 0
			client := counting(t, "TURNKEEPER_FLAKY_ADDRESS", &attempts, opts...)
			_, err := client.EstimateTokens(testContext(t), scripted(t, c.script))
			if e := asError(t, err); e.Code != c.code || attempts != 1 {
				t.Errorf("%v after %d attempts, want %v after 1", e, attempts, c.code)
			}
		})
	}
}

func TestUnavailableWithoutRetryInfoBacksOff(t *testing.T) {
	policy := turnkeeper.RetryPolicy{MaxAttempts: 3, MaxDelay: time.Second, Backoff: 200 * time.Millisecond, Multiplier: 2}
	client := connect(t, liveEnv(t, "TURNKEEPER_FLAKY_ADDRESS"), turnkeeper.WithRetry(policy))
	resp, elapsed, err := estimateTimed(client, testContext(t), scripted(t, "UNAVAILABLE:-1 UNAVAILABLE:-1"))
	if err != nil || resp.GetTotalTokens() != 3 || elapsed < 600*time.Millisecond {
		t.Errorf("%d attempts in %v (%v), want 3 after 200ms + 400ms", resp.GetTotalTokens(), elapsed, err)
	}
}

func TestARetryDelayPastTheDeadlineReturnsTheErrorAtOnce(t *testing.T) {
	attempts := 0
	client := counting(t, "TURNKEEPER_FLAKY_ADDRESS", &attempts)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, elapsed, err := estimateTimed(client, ctx, scripted(t, "RESOURCE_EXHAUSTED:2000"))
	if e := asError(t, err); e.Code != codes.ResourceExhausted || attempts != 1 || elapsed > 500*time.Millisecond {
		t.Errorf("%v after %d attempts in %v, want RESOURCE_EXHAUSTED at once", e, attempts, elapsed)
	}
}

// estimate is a call the overloaded sidecar refuses (with_server.py --overloaded: every call gets
// RESOURCE_EXHAUSTED with a 1 s RetryInfo).
func estimate() *turnkeeperv1.EstimateTokensRequest {
	return &turnkeeperv1.EstimateTokensRequest{History: turnkeeper.ChatHistory(turnkeeper.User("hello"))}
}

func TestTheOverloadedServerIsRetriedMaxAttemptsTimes(t *testing.T) {
	attempts := 0
	client := counting(t, "TURNKEEPER_OVERLOADED_ADDRESS", &attempts)
	started := time.Now()
	_, err := client.EstimateTokens(context.Background(), estimate())
	elapsed := time.Since(started)
	e := asError(t, err)
	if e.Reason != "ERROR_REASON_OVERLOADED" || !e.HasRetryDelay {
		t.Fatalf("got %v, want OVERLOADED with RetryInfo", e)
	}
	if attempts != 3 || elapsed < 2*e.RetryDelay || elapsed >= turnkeeper.DefaultTimeout {
		t.Errorf("%d attempts in %v, want 3 after two waits of %v", attempts, elapsed, e.RetryDelay)
	}
}

func TestTheOverloadedServerWithinTheDeadline(t *testing.T) {
	attempts := 0
	client := counting(t, "TURNKEEPER_OVERLOADED_ADDRESS", &attempts)
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	started := time.Now()
	_, err := client.EstimateTokens(ctx, estimate())
	elapsed := time.Since(started)
	// Refused at 0 s, waited 1 s (its RetryInfo), refused again; a second wait would pass the deadline.
	if e := asError(t, err); e.Code != codes.ResourceExhausted || e.RetryDelay != time.Second {
		t.Fatalf("got %v (retry delay %v)", e, e.RetryDelay)
	}
	if attempts != 2 || elapsed < time.Second || elapsed >= 1500*time.Millisecond {
		t.Errorf("%d attempts in %v, want 2 within the 1.5s deadline", attempts, elapsed)
	}
}

func TestTheOverloadedServerWithRetryingOff(t *testing.T) {
	attempts := 0
	client := counting(t, "TURNKEEPER_OVERLOADED_ADDRESS", &attempts, turnkeeper.WithoutRetry())
	if _, err := client.EstimateTokens(context.Background(), estimate()); asError(t, err).Code != codes.ResourceExhausted || attempts != 1 {
		t.Errorf("%v after %d attempts, want RESOURCE_EXHAUSTED after 1", err, attempts)
	}
}
