package turnkeeper

import (
	"context"
	"errors"
	"io"
	"iter"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	turnkeeperv1 "github.com/turnkeeper/turnkeeper/clients/go/gen/turnkeeper/v1"
)

// Backoff is the reconnect policy of a Subscription: the n-th consecutive failure waits
// min(Max, Initial * Multiplier^(n-1)), spread by ±Jitter (a fraction).
type Backoff struct {
	Initial    time.Duration
	Max        time.Duration
	Multiplier float64
	Jitter     float64
	// MaxAttempts is the number of consecutive failed reconnects after which Recv returns the
	// error; 0 retries until the subscription's context ends.
	MaxAttempts int
}

// DefaultBackoff retries quickly at first (the server is usually a local sidecar being
// restarted) and settles at one attempt every five seconds.
var DefaultBackoff = Backoff{Initial: 100 * time.Millisecond, Max: 5 * time.Second, Multiplier: 2, Jitter: 0.2}

func (b Backoff) delay(failures int) time.Duration {
	d := float64(b.Initial) * math.Pow(math.Max(b.Multiplier, 1), float64(failures-1))
	if b.Max > 0 {
		d = math.Min(d, float64(b.Max))
	}
	if b.Jitter > 0 {
		d *= 1 + b.Jitter*(2*rand.Float64()-1)
	}
	return time.Duration(d)
}

// Subscription is a TrimEvents stream that survives disconnects. It remembers the cursor of the
// last event (or heartbeat) received and, when the stream ends or the server is unavailable,
// reopens it with that cursor as after_cursor, so each event is delivered once.
//
// The server answers a new subscription at once with a heartbeat naming the stream's resume
// position, so a live tail has a cursor before its first event: one that reconnects before any
// event still receives the events published while it was disconnected.
// Recv is not safe for concurrent use; Cursor and Close are.
type Subscription struct {
	stub    turnkeeperv1.HistoryServiceClient
	req     *turnkeeperv1.TrimEventsRequest
	backoff Backoff
	ctx     context.Context
	cancel  context.CancelFunc

	stream       grpc.ServerStreamingClient[turnkeeperv1.TrimEventsResponse]
	streamCancel context.CancelFunc
	failures     int

	// first is the item that answered the subscription, held by WaitSubscribed for Recv. Its
	// cursor counts once Recv hands it out, so a cursor persisted before cannot skip it.
	first *turnkeeperv1.TrimEventsResponse
	// pending holds the rest of a batch (sent when req.MaxBatchEvents is above 1), handed out
	// one item at a time.
	pending []*turnkeeperv1.TrimEventsResponse

	mu     sync.Mutex
	cursor string
}

// DefaultMaxBatchEvents is the batch size a subscription asks for when req.MaxBatchEvents is 0;
// set it to 1 for one item per stream message.
const DefaultMaxBatchEvents = 100

// TrimEvents subscribes to the trim feed with req's filters, resuming after req.AfterCursor
// when it is set. Unless req.MaxBatchEvents is set, it asks for batches of up to
// DefaultMaxBatchEvents items, which Recv hands out one by one. The stream opens on the first Recv and lives until ctx ends or Close; use
// SubscribeTrimEvents to know when the server has registered it.
// The server confirms the subscription at once with a heartbeat carrying its resume position,
// then sends one after every req.HeartbeatInterval without other items.
func (c *Client) TrimEvents(ctx context.Context, req *turnkeeperv1.TrimEventsRequest) *Subscription {
	ctx, cancel := context.WithCancel(ctx)
	if req == nil {
		req = &turnkeeperv1.TrimEventsRequest{}
	}
	req = proto.CloneOf(req)
	if req.GetMaxBatchEvents() == 0 {
		// Batches let a subscriber keep up with a loaded server; Recv still returns one item at a time.
		req.MaxBatchEvents = DefaultMaxBatchEvents
	}
	return &Subscription{stub: c.stub, req: req, backoff: c.backoff, ctx: ctx, cancel: cancel, cursor: req.GetAfterCursor()}
}

// SubscribeTrimEvents is TrimEvents, returning only once the server has answered the
// subscription (its first heartbeat, or the first replayed item when resuming): a trim made
// after it returns is always delivered, so subscribe-then-trim needs no sleep. The answering
// item is still the first Recv returns. The wait, reconnects included, is bounded by the
// client's timeout (WithTimeout, when non-zero) and by ctx; on failure the subscription is
// closed and the error (an *Error, DeadlineExceeded when the timeout ran out) returned.
func (c *Client) SubscribeTrimEvents(ctx context.Context, req *turnkeeperv1.TrimEventsRequest) (*Subscription, error) {
	sub := c.TrimEvents(ctx, req)
	if err := sub.WaitSubscribed(c.timeout); err != nil {
		return nil, err
	}
	return sub, nil
}

// WaitSubscribed blocks until the server has answered the subscription, keeping the answering
// item for the next Recv; timeout 0 waits as long as the subscription's context lives. On
// failure the subscription is closed and the error returned (DeadlineExceeded on timeout).
// Like Recv it must not run concurrently with Recv.
func (s *Subscription) WaitSubscribed(timeout time.Duration) error {
	if s.first != nil {
		return nil
	}
	var expired atomic.Bool
	if timeout > 0 {
		timer := time.AfterFunc(timeout, func() {
			expired.Store(true)
			s.Close()
		})
		defer timer.Stop()
	}
	item, err := s.receive()
	if expired.Load() {
		s.Close()
		return FromError(status.Errorf(codes.DeadlineExceeded, "turnkeeper: the server did not answer the TrimEvents subscription within %v", timeout))
	}
	if err != nil {
		s.Close()
		return err
	}
	s.first = item
	return nil
}

// Recv returns the next feed item: an event, a heartbeat or a gap notice. Disconnects and
// UNAVAILABLE are retried with backoff; any other failure is returned as an *Error.
func (s *Subscription) Recv() (*turnkeeperv1.TrimEventsResponse, error) {
	item := s.first
	s.first = nil
	if item == nil {
		var err error
		if item, err = s.receive(); err != nil {
			return nil, err
		}
	}
	s.remember(item)
	return item, nil
}

// receive reads the next item, reopening the stream as needed; a batch's items come one by one.
func (s *Subscription) receive() (*turnkeeperv1.TrimEventsResponse, error) {
	for {
		if len(s.pending) > 0 {
			item := s.pending[0]
			s.pending = s.pending[1:]
			return item, nil
		}
		if s.stream == nil {
			if err := s.open(); err != nil {
				if err := s.retry(err); err != nil {
					return nil, err
				}
				continue
			}
		}
		item, err := s.stream.Recv()
		if err == nil {
			s.failures = 0
			if batch := item.GetBatch(); batch != nil {
				s.pending = batch.GetItems()
				continue
			}
			return item, nil
		}
		s.closeStream()
		if err := s.retry(err); err != nil {
			return nil, err
		}
	}
}

// All ranges over the feed items; a failure ends the sequence as its last pair.
func (s *Subscription) All() iter.Seq2[*turnkeeperv1.TrimEventsResponse, error] {
	return func(yield func(*turnkeeperv1.TrimEventsResponse, error) bool) {
		for {
			item, err := s.Recv()
			if !yield(item, err) || err != nil {
				return
			}
		}
	}
}

// Cursor returns the resume point: the cursor of the last event or heartbeat received, or the
// subscription's initial after_cursor before any. Persist it to resume a later subscription
// from the same point.
func (s *Subscription) Cursor() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cursor
}

// Close ends the subscription; a blocked Recv returns a Canceled error.
func (s *Subscription) Close() { s.cancel() }

func (s *Subscription) open() error {
	req := proto.CloneOf(s.req)
	req.AfterCursor = s.Cursor()
	ctx, cancel := context.WithCancel(s.ctx)
	stream, err := s.stub.TrimEvents(ctx, req)
	if err != nil {
		cancel()
		return err
	}
	s.stream, s.streamCancel = stream, cancel
	return nil
}

func (s *Subscription) closeStream() {
	s.streamCancel()
	s.stream, s.streamCancel = nil, nil
}

func (s *Subscription) remember(item *turnkeeperv1.TrimEventsResponse) {
	cursor := item.GetEvent().GetCursor()
	if cursor == "" {
		cursor = item.GetMeterUpdate().GetCursor()
	}
	if cursor == "" {
		// A heartbeat names the stream's resume position; it is empty only while a Redis
		// stream holds no entry at all, and then the current cursor stays.
		cursor = item.GetHeartbeat().GetCursor()
	}
	if cursor != "" {
		s.mu.Lock()
		s.cursor = cursor
		s.mu.Unlock()
	}
}

// retry waits out the backoff when err is worth a new stream; otherwise, or when the
// subscription ends first, it returns the error Recv gives up with.
func (s *Subscription) retry(err error) error {
	if s.ctx.Err() != nil {
		return FromError(s.ctx.Err())
	}
	if !reconnectable(err) {
		return FromError(err)
	}
	s.failures++
	if s.backoff.MaxAttempts > 0 && s.failures > s.backoff.MaxAttempts {
		return FromError(err)
	}
	timer := time.NewTimer(s.backoff.delay(s.failures))
	defer timer.Stop()
	select {
	case <-s.ctx.Done():
		return FromError(s.ctx.Err())
	case <-timer.C:
		return nil
	}
}

// reconnectable: the feed never ends on its own, so a clean end means the server is going away
// (shutdown, restart); UNAVAILABLE covers lost connections and a feed backend that is down.
func reconnectable(err error) bool {
	return errors.Is(err, io.EOF) || status.Code(err) == codes.Unavailable
}
