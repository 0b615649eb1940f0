package turnkeeper

import (
	"context"
	"math/rand/v2"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
)

// RetryPolicy is how the Client retries a unary call (every HistoryService unary RPC is
// idempotent; TrimEvents resumes from its cursor instead, see Backoff). A call refused with one of
// RetryableCodes is called again, at most MaxAttempts times in all (the first call included) and
// within the context's deadline:
//   - with a google.rpc.RetryInfo (what an overloaded server sends) after its retry_delay, unless
//     that is over MaxDelay or would pass the deadline: then the error is returned at once;
//   - without one, Unavailable after Backoff * Multiplier^(retry-1), plus or minus Jitter of it;
//     ResourceExhausted without RetryInfo (a message over a size limit, say) is not retried.
//
// The defaults are recorded in tests/conformance/client-defaults.json (docs/conventions.md).
type RetryPolicy struct {
	MaxAttempts int
	MaxDelay    time.Duration
	Backoff     time.Duration
	Multiplier  float64
	Jitter      float64
}

// DefaultRetryPolicy is on unless WithRetry or WithoutRetry says otherwise.
var DefaultRetryPolicy = RetryPolicy{MaxAttempts: 3, MaxDelay: 5 * time.Second, Backoff: 100 * time.Millisecond, Multiplier: 2, Jitter: 0.2}

// RetryableCodes are the codes a retry may cure.
var RetryableCodes = []codes.Code{codes.ResourceExhausted, codes.Unavailable}

// WithRetry sets the retry policy of unary calls; MaxAttempts below 2 turns retrying off.
func WithRetry(p RetryPolicy) Option { return func(c *config) { c.retry = p } }

// WithoutRetry turns retrying off: every unary call is attempted once.
func WithoutRetry() Option { return WithRetry(RetryPolicy{MaxAttempts: 1}) }

// delay is the wait before retry number retry (1 for the first) after e; false: do not retry.
func (p RetryPolicy) delay(e *Error, retry int) (time.Duration, bool) {
	if retry >= p.MaxAttempts || !slices.Contains(RetryableCodes, e.Code) {
		return 0, false
	}
	if e.HasRetryDelay {
		return e.RetryDelay, e.RetryDelay <= p.MaxDelay
	}
	if e.Code != codes.Unavailable {
		return 0, false
	}
	base := float64(p.Backoff)
	for range retry - 1 {
		base *= p.Multiplier
	}
	return time.Duration(max(0, base*(1+p.Jitter*(2*rand.Float64()-1)))), true
}

// wait sleeps for the delay before the next attempt after e; false when the error is to be
// returned now: not retryable, attempts used up, or the delay would pass ctx's deadline.
func (p RetryPolicy) wait(ctx context.Context, e *Error, retry int) bool {
	d, ok := p.delay(e, retry)
	if !ok {
		return false
	}
	if deadline, has := ctx.Deadline(); has && time.Until(deadline) <= d {
		return false
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}
