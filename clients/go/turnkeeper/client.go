// Package turnkeeper is the Go client of the turnkeeper sidecar, which makes the history
// decisions (estimate, budget, trims, capacity pre-flight, trim events) of an agent runtime.
//
// It wraps the generated turnkeeperv1 stubs: it connects over TCP or a Unix socket with the
// server's message-size limits, applies a default per-call deadline, decodes the server's
// rich error details into *Error, retries the unary calls the server refused as retryable
// (RetryPolicy), and offers a TrimEvents subscription that resumes from the last cursor after a
// disconnect.
package turnkeeper

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	turnkeeperv1 "github.com/turnkeeper/turnkeeper/clients/go/gen/turnkeeper/v1"
)

const (
	// MaxMessageSize matches the server's send and receive limit (64 MiB): histories can be large.
	MaxMessageSize = 64 << 20
	// DefaultTimeout bounds a unary call whose context has no deadline of its own.
	DefaultTimeout = 10 * time.Second
)

// Client calls a turnkeeper server. It is safe for concurrent use; Close releases the connection.
type Client struct {
	conn    *grpc.ClientConn
	stub    turnkeeperv1.HistoryServiceClient
	timeout time.Duration
	backoff Backoff
	retry   RetryPolicy
}

type config struct {
	timeout  time.Duration
	creds    credentials.TransportCredentials
	backoff  Backoff
	retry    RetryPolicy
	dialOpts []grpc.DialOption
}

// Option configures a Client.
type Option func(*config)

// WithTimeout sets the deadline applied to unary calls whose context has none; 0 applies none.
func WithTimeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

// WithTransportCredentials replaces the default plaintext transport, for a server behind TLS.
func WithTransportCredentials(creds credentials.TransportCredentials) Option {
	return func(c *config) { c.creds = creds }
}

// WithReconnectBackoff sets the default backoff of TrimEvents subscriptions.
func WithReconnectBackoff(b Backoff) Option { return func(c *config) { c.backoff = b } }

// WithDialOptions appends raw grpc-go dial options (interceptors, stats handlers, ...).
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(c *config) { c.dialOpts = append(c.dialOpts, opts...) }
}

// New connects to target, which is a TCP "host:port", a gRPC target URI such as
// "unix:///run/turnkeeper.sock", or a filesystem path to a Unix socket (starting with "/" or ".").
// Like grpc.NewClient it does not wait for the connection: errors surface on the first call.
func New(target string, opts ...Option) (*Client, error) {
	if target == "" {
		return nil, errors.New("turnkeeper: empty target")
	}
	if strings.HasPrefix(target, "/") || strings.HasPrefix(target, ".") {
		return NewUnix(target, opts...)
	}
	return dial(target, opts)
}

// NewUnix connects to the Unix socket at path.
func NewUnix(path string, opts ...Option) (*Client, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	return dial("unix://"+abs, opts)
}

func dial(target string, opts []Option) (*Client, error) {
	cfg := config{timeout: DefaultTimeout, creds: insecure.NewCredentials(), backoff: DefaultBackoff, retry: DefaultRetryPolicy}
	for _, opt := range opts {
		opt(&cfg)
	}
	dialOpts := append([]grpc.DialOption{
		grpc.WithTransportCredentials(cfg.creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageSize), grpc.MaxCallSendMsgSize(MaxMessageSize)),
		// A sidecar is local: reconnect within seconds, not grpc-go's default of up to two minutes.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 5 * time.Second},
			MinConnectTimeout: 5 * time.Second,
		}),
	}, cfg.dialOpts...)
	conn, err := grpc.NewClient(target, dialOpts...)
	if err != nil {
		return nil, err
	}
	return &Client{conn: conn, stub: turnkeeperv1.NewHistoryServiceClient(conn), timeout: cfg.timeout, backoff: cfg.backoff, retry: cfg.retry}, nil
}

// Close closes the connection; open subscriptions fail with codes.Canceled.
func (c *Client) Close() error { return c.conn.Close() }

// Stub returns the generated stub on the same connection, for calls that need raw status errors.
func (c *Client) Stub() turnkeeperv1.HistoryServiceClient { return c.stub }

// unary applies the default deadline, retries per the client's RetryPolicy and decodes the error.
func unary[Req, Resp any](c *Client, ctx context.Context, call func(context.Context, Req, ...grpc.CallOption) (Resp, error), req Req, opts []grpc.CallOption) (Resp, error) {
	if _, ok := ctx.Deadline(); !ok && c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	for retry := 1; ; retry++ {
		resp, err := call(ctx, req, opts...)
		if err == nil {
			return resp, nil
		}
		if e := FromError(err); !c.retry.wait(ctx, e, retry) {
			var zero Resp
			return zero, e
		}
	}
}

// EstimateTokens prices a history with the pinned heuristic, in total and per row.
func (c *Client) EstimateTokens(ctx context.Context, req *turnkeeperv1.EstimateTokensRequest, opts ...grpc.CallOption) (*turnkeeperv1.EstimateTokensResponse, error) {
	return unary(c, ctx, c.stub.EstimateTokens, req, opts)
}

// ResolveBudget resolves the route, its capacity, the proactive token budget and the turn limit.
func (c *Client) ResolveBudget(ctx context.Context, req *turnkeeperv1.ResolveBudgetRequest, opts ...grpc.CallOption) (*turnkeeperv1.ResolveBudgetResponse, error) {
	return unary(c, ctx, c.stub.ResolveBudget, req, opts)
}

// TrimHistory applies one trimming operation. The response's HistoryTrimmed is non-nil when
// the trim dropped turns on the agent path (the same payload is published on TrimEvents).
func (c *Client) TrimHistory(ctx context.Context, req *turnkeeperv1.TrimHistoryRequest, opts ...grpc.CallOption) (*turnkeeperv1.TrimHistoryResponse, error) {
	return unary(c, ctx, c.stub.TrimHistory, req, opts)
}

// PrepareModelCall resolves, sweeps orphans, trims and runs the capacity pre-flight in one call.
// A request that does not fit fails with an *Error whose CapacityReport is set.
func (c *Client) PrepareModelCall(ctx context.Context, req *turnkeeperv1.PrepareModelCallRequest, opts ...grpc.CallOption) (*turnkeeperv1.PrepareModelCallResponse, error) {
	return unary(c, ctx, c.stub.PrepareModelCall, req, opts)
}

// CheckCapacity runs the capacity pre-flight alone.
// A request that does not fit fails with an *Error whose CapacityReport is set.
func (c *Client) CheckCapacity(ctx context.Context, req *turnkeeperv1.CheckCapacityRequest, opts ...grpc.CallOption) (*turnkeeperv1.CheckCapacityResponse, error) {
	return unary(c, ctx, c.stub.CheckCapacity, req, opts)
}

// SweepOrphans removes tool results without a call and tool calls without a result.
func (c *Client) SweepOrphans(ctx context.Context, req *turnkeeperv1.SweepOrphansRequest, opts ...grpc.CallOption) (*turnkeeperv1.SweepOrphansResponse, error) {
	return unary(c, ctx, c.stub.SweepOrphans, req, opts)
}

// ClassifyProviderError says whether a provider's error is a context-window overflow (spec
// §10.4) and which phrase matched: the decision that starts reactive recovery
// (PrepareModelCallRequest.OverflowRecovery).
func (c *Client) ClassifyProviderError(ctx context.Context, req *turnkeeperv1.ClassifyProviderErrorRequest, opts ...grpc.CallOption) (*turnkeeperv1.ClassifyProviderErrorResponse, error) {
	return unary(c, ctx, c.stub.ClassifyProviderError, req, opts)
}

// PlanCompaction says what to condense instead of dropping it (spec §15.3) and hands over a
// summary request that fits the summarizer's route. It never calls a model: send
// plan.SummaryRequest, then build the new history with ApplyCompaction. A response without a plan
// carries its CompactionRefusal (nothing to condense, too large, no saving); that is not an error.
func (c *Client) PlanCompaction(ctx context.Context, req *turnkeeperv1.PlanCompactionRequest, opts ...grpc.CallOption) (*turnkeeperv1.PlanCompactionResponse, error) {
	return unary(c, ctx, c.stub.PlanCompaction, req, opts)
}

// CapToolResults applies the max_tool_result_chars cap to tool results being recorded.
func (c *Client) CapToolResults(ctx context.Context, req *turnkeeperv1.CapToolResultsRequest, opts ...grpc.CallOption) (*turnkeeperv1.CapToolResultsResponse, error) {
	return unary(c, ctx, c.stub.CapToolResults, req, opts)
}
