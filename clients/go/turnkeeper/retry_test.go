package turnkeeper_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	turnkeeperv1 "github.com/turnkeeper/turnkeeper/clients/go/gen/turnkeeper/v1"
	"github.com/turnkeeper/turnkeeper/clients/go/turnkeeper"
)

// refusal is what the fake answers before it succeeds: a code and a RetryInfo delay (none if 0).
type refusal struct {
	code  codes.Code
	delay time.Duration
}

// fakeServer answers ResolveBudget: its refusals first, then OK; it counts the calls.
type fakeServer struct {
	turnkeeperv1.UnimplementedHistoryServiceServer
	mu       sync.Mutex
	refusals []refusal
	calls    int
}

func (f *fakeServer) ResolveBudget(context.Context, *turnkeeperv1.ResolveBudgetRequest) (*turnkeeperv1.ResolveBudgetResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if len(f.refusals) == 0 {
		return &turnkeeperv1.ResolveBudgetResponse{Resolution: &turnkeeperv1.Resolution{BudgetTokens: 7}}, nil
	}
	r := f.refusals[0]
	f.refusals = f.refusals[1:]
	st := status.New(r.code, "refused by the fake")
	if r.delay > 0 {
		var err error
		if st, err = st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(r.delay)}); err != nil {
			return nil, err
		}
	}
	return nil, st.Err()
}

func (f *fakeServer) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// startFake serves a fake that refuses with refusals, then answers; it stops with the test.
func startFake(t *testing.T, refusals ...refusal) (*fakeServer, string) {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fake := &fakeServer{refusals: refusals}
	server := grpc.NewServer()
	turnkeeperv1.RegisterHistoryServiceServer(server, fake)
	go func() { _ = server.Serve(listener) }()
	t.Cleanup(server.Stop)
	return fake, listener.Addr().String()
}

func resolve(t *testing.T, client *turnkeeper.Client, ctx context.Context) (time.Duration, error) {
	t.Helper()
	started := time.Now()
	resp, err := client.ResolveBudget(ctx, &turnkeeperv1.ResolveBudgetRequest{})
	if err == nil && resp.GetResolution().GetBudgetTokens() != 7 {
		t.Fatalf("unexpected response %v", resp)
	}
	return time.Since(started), err
}

func TestRetryInfoIsWaitedForThenTheCallSucceeds(t *testing.T) {
	fake, addr := startFake(t, refusal{codes.ResourceExhausted, 300 * time.Millisecond}, refusal{codes.Unavailable, 200 * time.Millisecond})
	elapsed, err := resolve(t, connect(t, addr), testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	if fake.count() != 3 || elapsed < 500*time.Millisecond {
		t.Errorf("%d calls in %v, want 3 calls after the two RetryInfo delays (500ms)", fake.count(), elapsed)
	}
}

func TestRetryAttemptsAreBounded(t *testing.T) {
	many := []refusal{{codes.ResourceExhausted, 10 * time.Millisecond}, {codes.ResourceExhausted, 10 * time.Millisecond}, {codes.ResourceExhausted, 10 * time.Millisecond}, {codes.ResourceExhausted, 10 * time.Millisecond}, {codes.ResourceExhausted, 10 * time.Millisecond}}
	fake, addr := startFake(t, many...)
	_, err := resolve(t, connect(t, addr), testContext(t))
	if e := asError(t, err); e.Code != codes.ResourceExhausted || !e.HasRetryDelay || e.RetryDelay != 10*time.Millisecond {
		t.Errorf("got %v (retry delay %v), want the last RESOURCE_EXHAUSTED with its RetryInfo", e, e.RetryDelay)
	}
	if fake.count() != turnkeeper.DefaultRetryPolicy.MaxAttempts {
		t.Errorf("%d calls, want %d", fake.count(), turnkeeper.DefaultRetryPolicy.MaxAttempts)
	}
	policy := turnkeeper.DefaultRetryPolicy
	policy.MaxAttempts = 5
	fake, addr = startFake(t, many...)
	if _, err := resolve(t, connect(t, addr, turnkeeper.WithRetry(policy)), testContext(t)); err == nil || fake.count() != 5 {
		t.Errorf("MaxAttempts 5: %d calls (%v)", fake.count(), err)
	}
}

func TestNotRetried(t *testing.T) {
	smallMaxDelay := turnkeeper.DefaultRetryPolicy
	smallMaxDelay.MaxDelay = 200 * time.Millisecond
	for _, c := range []struct {
		why     string
		refusal refusal
		option  turnkeeper.Option
	}{
		{"retrying turned off", refusal{codes.ResourceExhausted, 50 * time.Millisecond}, turnkeeper.WithoutRetry()},
		{"RESOURCE_EXHAUSTED without RetryInfo", refusal{codes.ResourceExhausted, 0}, nil},
		{"RetryInfo over MaxDelay", refusal{codes.ResourceExhausted, 500 * time.Millisecond}, turnkeeper.WithRetry(smallMaxDelay)},
		{"a code the policy does not retry", refusal{codes.Internal, 50 * time.Millisecond}, nil},
	} {
		t.Run(c.why, func(t *testing.T) {
			fake, addr := startFake(t, c.refusal)
			var opts []turnkeeper.Option
			if c.option != nil {
				opts = append(opts, c.option)
			}
			_, err := resolve(t, connect(t, addr, opts...), testContext(t))
			if e := asError(t, err); e.Code != c.refusal.code || fake.count() != 1 {
				t.Errorf("%v after %d calls, want %v after 1", e, fake.count(), c.refusal.code)
			}
		})
	}
}

func TestUnavailableWithoutRetryInfoBacksOff(t *testing.T) {
	fake, addr := startFake(t, refusal{codes.Unavailable, 0}, refusal{codes.Unavailable, 0})
	policy := turnkeeper.RetryPolicy{MaxAttempts: 3, MaxDelay: time.Second, Backoff: 200 * time.Millisecond, Multiplier: 2}
	elapsed, err := resolve(t, connect(t, addr, turnkeeper.WithRetry(policy)), testContext(t))
	if err != nil || fake.count() != 3 || elapsed < 600*time.Millisecond {
		t.Errorf("%d calls in %v (%v), want 3 after 200ms + 400ms", fake.count(), elapsed, err)
	}
}

func TestARetryDelayPastTheDeadlineReturnsTheErrorAtOnce(t *testing.T) {
	fake, addr := startFake(t, refusal{codes.ResourceExhausted, 2 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	elapsed, err := resolve(t, connect(t, addr), ctx)
	if e := asError(t, err); e.Code != codes.ResourceExhausted || fake.count() != 1 || elapsed > 500*time.Millisecond {
		t.Errorf("%v after %d calls in %v, want RESOURCE_EXHAUSTED at once", e, fake.count(), elapsed)
	}
}

// estimate is a call the overloaded sidecar refuses (with_server.py --overloaded: every call gets
// RESOURCE_EXHAUSTED with a 1 s RetryInfo).
func estimate() *turnkeeperv1.EstimateTokensRequest {
	return &turnkeeperv1.EstimateTokensRequest{History: turnkeeper.ChatHistory(turnkeeper.User("hello"))}
}

// overloadedClient connects to the overloaded sidecar and counts the attempts the client makes.
func overloadedClient(t *testing.T, attempts *int, opts ...turnkeeper.Option) *turnkeeper.Client {
	count := grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
		*attempts++
		return invoker(ctx, method, req, reply, cc, callOpts...)
	})
	return connect(t, liveEnv(t, "TURNKEEPER_OVERLOADED_ADDRESS"), append(opts, turnkeeper.WithDialOptions(count))...)
}

func TestTheOverloadedServerIsRetriedMaxAttemptsTimes(t *testing.T) {
	attempts := 0
	client := overloadedClient(t, &attempts)
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
	client := overloadedClient(t, &attempts)
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
	client := overloadedClient(t, &attempts, turnkeeper.WithoutRetry())
	if _, err := client.EstimateTokens(context.Background(), estimate()); asError(t, err).Code != codes.ResourceExhausted || attempts != 1 {
		t.Errorf("%v after %d attempts, want RESOURCE_EXHAUSTED after 1", err, attempts)
	}
}
