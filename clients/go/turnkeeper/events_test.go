package turnkeeper_test

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	turnkeeperv1 "github.com/turnkeeper/turnkeeper/clients/go/gen/turnkeeper/v1"
	"github.com/turnkeeper/turnkeeper/clients/go/turnkeeper"
)

// trim causes one published HistoryTrimmed for session and returns it.
func trim(t *testing.T, client *turnkeeper.Client, session string) *turnkeeperv1.HistoryTrimmed {
	t.Helper()
	resp, err := client.TrimHistory(testContext(t), &turnkeeperv1.TrimHistoryRequest{
		History:    threeTurns(session),
		Mode:       turnkeeperv1.TrimMode_TRIM_MODE_TOKEN_BUDGET,
		CallerPath: turnkeeperv1.CallerPath_CALLER_PATH_AGENT,
		Limits:     &turnkeeperv1.TrimHistoryRequest_ExplicitLimits{ExplicitLimits: &turnkeeperv1.ExplicitLimits{BudgetTokens: proto.Uint64(50)}},
		Caller:     &turnkeeperv1.CallerContext{SessionId: session},
	})
	if err != nil {
		t.Fatalf("TrimHistory: %v", err)
	}
	trimmed := resp.GetHistoryTrimmed()
	if trimmed == nil || trimmed.GetDroppedTurns() == 0 {
		t.Fatalf("TrimHistory dropped nothing: %v", resp.GetOutcome())
	}
	return trimmed
}

func subscribe(client *turnkeeper.Client, t *testing.T, session, after string) *turnkeeper.Subscription {
	sub := client.TrimEvents(testContext(t), &turnkeeperv1.TrimEventsRequest{
		SessionIds:        []string{session},
		AfterCursor:       after,
		HeartbeatInterval: durationpb.New(time.Second),
	})
	t.Cleanup(sub.Close)
	return sub
}

// nextEvent returns the next event. A gap fails the test, and so do three heartbeats in a row:
// the event is published or replayed at once, so three idle intervals mean it is not coming.
func nextEvent(t *testing.T, sub *turnkeeper.Subscription) *turnkeeperv1.TrimEvent {
	t.Helper()
	for heartbeats := 0; heartbeats < 3; {
		item, err := sub.Recv()
		if err != nil {
			t.Fatalf("Recv: %v", err)
		}
		switch {
		case item.GetEvent() != nil:
			return item.GetEvent()
		case item.GetGap() != nil:
			t.Fatalf("unexpected gap: %v", item.GetGap())
		default:
			heartbeats++
		}
	}
	t.Fatal("no event within three heartbeat intervals")
	return nil
}

// registered returns the heartbeat that answers a new live tail and its cursor. The server sends
// it as soon as the subscription is registered, well before the one-second idle interval, and
// it names the resume position, so no event published after it can be missed.
func registered(t *testing.T, sub *turnkeeper.Subscription) string {
	t.Helper()
	began := time.Now()
	item, err := sub.Recv()
	if err != nil {
		t.Fatalf("Recv: %v", err)
	}
	beat := item.GetHeartbeat()
	if beat == nil {
		t.Fatalf("want the heartbeat that answers a subscription, got %v", item)
	}
	if elapsed := time.Since(began); elapsed > 800*time.Millisecond {
		t.Fatalf("first heartbeat after %v: the subscription was not answered at once", elapsed)
	}
	if beat.GetCursor() == "" || sub.Cursor() != beat.GetCursor() {
		t.Fatalf("subscription cursor %q after the first heartbeat with cursor %q", sub.Cursor(), beat.GetCursor())
	}
	return beat.GetCursor()
}

// awaitHeartbeat returns at the next heartbeat and fails on any event before it: after the one
// answering a subscription, the server sends a heartbeat only after a whole idle interval, so
// nothing else was owed.
func awaitHeartbeat(t *testing.T, sub *turnkeeper.Subscription) {
	t.Helper()
	for {
		item, err := sub.Recv()
		if err != nil {
			t.Fatalf("Recv: %v", err)
		}
		if item.GetHeartbeat() != nil {
			return
		}
		t.Fatalf("want a heartbeat, got %v", item)
	}
}

func requireEvent(t *testing.T, got *turnkeeperv1.TrimEvent, want *turnkeeperv1.HistoryTrimmed, sub *turnkeeper.Subscription) {
	t.Helper()
	if !proto.Equal(got.GetTrimmed(), want) {
		t.Fatalf("event %v, want the trim returned to the caller %v", got.GetTrimmed(), want)
	}
	if got.GetCursor() == "" || sub.Cursor() != got.GetCursor() {
		t.Fatalf("subscription cursor %q after event with cursor %q", sub.Cursor(), got.GetCursor())
	}
}

// TestTrimEventsResumeAfterCursor: a subscriber that went away resumes with its last cursor and
// receives exactly the event published while it was gone.
func TestTrimEventsResumeAfterCursor(t *testing.T) {
	client := tcpClient(t)
	session := uniqueID(t)

	first := subscribe(client, t, session, "")
	registered(t, first)
	want1 := trim(t, client, session)
	requireEvent(t, nextEvent(t, first), want1, first)
	cursor := first.Cursor()
	first.Close()
	if _, err := first.Recv(); err == nil {
		t.Fatal("Recv after Close succeeded")
	}

	want2 := trim(t, client, session)
	second := subscribe(client, t, session, cursor)
	requireEvent(t, nextEvent(t, second), want2, second)
	awaitHeartbeat(t, second) // and nothing else: the first event is not replayed
}

// TestTrimEventsReconnect cuts the connection under a live subscription, publishes while the
// server is unreachable, and checks the helper reconnects by itself and delivers each event once.
func TestTrimEventsReconnect(t *testing.T) {
	direct := tcpClient(t)
	proxy := startProxy(t, liveEnv(t, "TURNKEEPER_ADDRESS"))
	viaProxy := connect(t, proxy.addr(), turnkeeper.WithReconnectBackoff(turnkeeper.Backoff{
		Initial: 50 * time.Millisecond, Max: 200 * time.Millisecond, Multiplier: 2,
	}))
	session := uniqueID(t)

	sub := subscribe(viaProxy, t, session, "")
	registered(t, sub)
	want1 := trim(t, direct, session)
	requireEvent(t, nextEvent(t, sub), want1, sub)

	proxy.cut()
	got := make(chan *turnkeeperv1.TrimEvent, 1)
	go func() {
		item, err := sub.Recv()
		if err != nil {
			t.Errorf("Recv across the outage: %v", err)
		}
		got <- item.GetEvent()
	}()
	time.Sleep(400 * time.Millisecond) // several refused reconnects
	want2 := trim(t, direct, session)  // published while the subscriber cannot reach the server
	proxy.restore()
	select {
	case event := <-got:
		requireEvent(t, event, want2, sub)
	case <-time.After(15 * time.Second):
		t.Fatal("no event after the proxy came back")
	}
	awaitHeartbeat(t, sub) // exactly once: nothing replayed twice
}

// TestTrimEventsLiveTailResumesBeforeAnyEvent: the heartbeat answering a live tail names its
// resume position, so a subscription cut off before its first event resumes from there and
// still receives, once, the trim published while it was away.
func TestTrimEventsLiveTailResumesBeforeAnyEvent(t *testing.T) {
	direct := tcpClient(t)
	proxy := startProxy(t, liveEnv(t, "TURNKEEPER_ADDRESS"))
	viaProxy := connect(t, proxy.addr(), turnkeeper.WithReconnectBackoff(turnkeeper.Backoff{
		Initial: 50 * time.Millisecond, Max: 200 * time.Millisecond, Multiplier: 2,
	}))
	session := uniqueID(t)

	sub := subscribe(viaProxy, t, session, "")
	registered(t, sub)

	proxy.cut() // before any event reached the subscriber
	got := make(chan *turnkeeperv1.TrimEvent, 1)
	go func() {
		item, err := sub.Recv()
		if err != nil {
			t.Errorf("Recv across the outage: %v", err)
		}
		got <- item.GetEvent()
	}()
	time.Sleep(400 * time.Millisecond) // several refused reconnects
	want := trim(t, direct, session)   // published while the subscriber cannot reach the server
	proxy.restore()
	select {
	case event := <-got:
		if event == nil {
			t.Fatal("the resumed stream did not start with the missed event")
		}
		requireEvent(t, event, want, sub)
	case <-time.After(15 * time.Second):
		t.Fatal("no event after the proxy came back")
	}
	awaitHeartbeat(t, sub) // exactly once: nothing replayed twice
}

// proxy forwards TCP to the server and can cut every connection and refuse new ones.
type proxy struct {
	ln       net.Listener
	upstream string
	mu       sync.Mutex
	refusing bool
	conns    map[net.Conn]struct{}
}

func startProxy(t *testing.T, upstream string) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, upstream: upstream, conns: map[net.Conn]struct{}{}}
	go p.serve()
	t.Cleanup(func() {
		_ = ln.Close()
		p.cut()
	})
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) serve() {
	for {
		down, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refusing := p.refusing
		p.mu.Unlock()
		if refusing {
			_ = down.Close()
			continue
		}
		up, err := net.Dial("tcp", p.upstream)
		if err != nil {
			_ = down.Close()
			continue
		}
		p.mu.Lock()
		p.conns[down], p.conns[up] = struct{}{}, struct{}{}
		p.mu.Unlock()
		go p.pipe(down, up)
		go p.pipe(up, down)
	}
}

func (p *proxy) pipe(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	_ = dst.Close()
	_ = src.Close()
}

func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refusing = true
	for c := range p.conns {
		_ = c.Close()
	}
	clear(p.conns)
}

func (p *proxy) restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refusing = false
}

func subscribeLive(t *testing.T, client *turnkeeper.Client, session, after string) *turnkeeper.Subscription {
	t.Helper()
	sub, err := client.SubscribeTrimEvents(testContext(t), &turnkeeperv1.TrimEventsRequest{
		SessionIds:        []string{session},
		AfterCursor:       after,
		HeartbeatInterval: durationpb.New(time.Second),
	})
	if err != nil {
		t.Fatalf("SubscribeTrimEvents: %v", err)
	}
	t.Cleanup(sub.Close)
	return sub
}

// TestSubscribeTrimEventsThenTrimAtOnce (docs/events.md): SubscribeTrimEvents returns once the
// server has answered, i.e. registered, the subscription, so a trim made right after it, with
// no sleep in between, is always delivered.
func TestSubscribeTrimEventsThenTrimAtOnce(t *testing.T) {
	client := tcpClient(t)
	for range 5 {
		session := uniqueID(t)
		sub := subscribeLive(t, client, session, "")
		want := trim(t, client, session)
		// The held answer's cursor counts only once Recv hands it out.
		if sub.Cursor() != "" {
			t.Fatalf("cursor %q before the first Recv of a live tail", sub.Cursor())
		}
		// The answering heartbeat comes first, then the event, then only idle heartbeats.
		registered(t, sub)
		requireEvent(t, nextEvent(t, sub), want, sub)
		awaitHeartbeat(t, sub)
		sub.Close()
	}
}

// TestSubscribeTrimEventsResumingStartsWithTheOwedEvent: a resumed subscription is answered by
// its replay, which is then the first item.
func TestSubscribeTrimEventsResumingStartsWithTheOwedEvent(t *testing.T) {
	client := tcpClient(t)
	session := uniqueID(t)
	first := subscribeLive(t, client, session, "")
	cursor := registered(t, first)
	first.Close()
	want := trim(t, client, session)
	resumed := subscribeLive(t, client, session, cursor)
	if resumed.Cursor() != cursor {
		t.Fatalf("cursor %q before the held event was handed out, want %q", resumed.Cursor(), cursor)
	}
	item, err := resumed.Recv()
	if err != nil {
		t.Fatalf("Recv: %v", err)
	}
	if item.GetEvent() == nil {
		t.Fatalf("want the owed event first, got %v", item)
	}
	requireEvent(t, item.GetEvent(), want, resumed)
}

// TestSubscribeTrimEventsTimesOut: a server that never answers fails the subscription with
// DeadlineExceeded after the client's timeout, not a hang.
func TestSubscribeTrimEventsTimesOut(t *testing.T) {
	proxy := startProxy(t, liveEnv(t, "TURNKEEPER_ADDRESS"))
	proxy.cut()
	viaProxy := connect(t, proxy.addr(), turnkeeper.WithTimeout(500*time.Millisecond), turnkeeper.WithReconnectBackoff(turnkeeper.Backoff{
		Initial: 50 * time.Millisecond, Max: 100 * time.Millisecond, Multiplier: 2,
	}))
	began := time.Now()
	sub, err := viaProxy.SubscribeTrimEvents(testContext(t), &turnkeeperv1.TrimEventsRequest{})
	if sub != nil || err == nil {
		t.Fatal("SubscribeTrimEvents succeeded through a refusing proxy")
	}
	if code := turnkeeper.FromError(err).Code; code != codes.DeadlineExceeded {
		t.Fatalf("code %v, want DeadlineExceeded: %v", code, err)
	}
	if elapsed := time.Since(began); elapsed > 5*time.Second {
		t.Fatalf("gave up after %v", elapsed)
	}
}

// TestSubscribeTrimEventsReturnsTheSubscriptionError: a request the server rejects fails the
// call itself with the decoded error.
func TestSubscribeTrimEventsReturnsTheSubscriptionError(t *testing.T) {
	client := tcpClient(t)
	_, err := client.SubscribeTrimEvents(testContext(t), &turnkeeperv1.TrimEventsRequest{AfterCursor: "not-a-cursor"})
	e := turnkeeper.FromError(err)
	if e == nil || e.Code != codes.InvalidArgument || len(e.Fields()) != 1 || e.Fields()[0] != "after_cursor" {
		t.Fatalf("want INVALID_ARGUMENT on after_cursor, got %v", err)
	}
}

// TestTrimEventsBatchesArriveAsSingleItems: with MaxBatchEvents the server sends what is ready
// in one message (a batch); Recv hands its items out one by one, in order, as without batches.
func TestTrimEventsBatchesArriveAsSingleItems(t *testing.T) {
	client := tcpClient(t)
	session := uniqueID(t)
	first := subscribe(client, t, session, "")
	cursor := registered(t, first)
	first.Close()
	want := make([]*turnkeeperv1.HistoryTrimmed, 5)
	for i := range want {
		want[i] = trim(t, client, session)
	}
	batched := client.TrimEvents(testContext(t), &turnkeeperv1.TrimEventsRequest{
		SessionIds:        []string{session},
		AfterCursor:       cursor,
		HeartbeatInterval: durationpb.New(time.Second),
		MaxBatchEvents:    50,
	})
	t.Cleanup(batched.Close)
	for _, trimmed := range want {
		requireEvent(t, nextEvent(t, batched), trimmed, batched)
	}
}
