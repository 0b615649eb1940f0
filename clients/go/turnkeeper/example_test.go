package turnkeeper_test

import (
	"context"
	"errors"
	"log"

	"google.golang.org/protobuf/proto"

	tkv1 "github.com/turnkeeper/turnkeeper/clients/go/gen/turnkeeper/v1"
	"github.com/turnkeeper/turnkeeper/clients/go/turnkeeper"
)

// The README's examples, kept compiling here (they need a server, so they do not run).

func ExampleClient_TrimHistory() {
	client, err := turnkeeper.New("127.0.0.1:50051")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	resp, err := client.TrimHistory(context.Background(), &tkv1.TrimHistoryRequest{
		History: turnkeeper.ChatHistory(
			turnkeeper.System("You are terse."),
			turnkeeper.User("first question"), turnkeeper.Assistant("first answer"),
			turnkeeper.User("second question"),
		),
		Mode:       tkv1.TrimMode_TRIM_MODE_TOKEN_BUDGET,
		CallerPath: tkv1.CallerPath_CALLER_PATH_AGENT,
		Limits: &tkv1.TrimHistoryRequest_ExplicitLimits{
			ExplicitLimits: &tkv1.ExplicitLimits{BudgetTokens: proto.Uint64(2000)},
		},
		Caller: &tkv1.CallerContext{SessionId: "session-1"},
	})
	var e *turnkeeper.Error
	if errors.As(err, &e) {
		for _, v := range e.FieldViolations {
			log.Printf("%s: %s", v.Field, v.Description)
		}
		return
	}
	if t := resp.GetHistoryTrimmed(); t != nil {
		log.Printf("dropped %d turns (%s), %d -> %d tokens", t.GetDroppedTurns(), t.GetReason(), t.GetTokensBefore(), t.GetTokensAfter())
	}
	_ = resp.GetHistory() // send this to the model
}

func ExampleClient_TrimEvents() {
	client, err := turnkeeper.New("/run/turnkeeper.sock")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	saved := "" // a cursor persisted earlier, or empty for a live tail
	sub := client.TrimEvents(context.Background(), &tkv1.TrimEventsRequest{SessionIds: []string{"session-1"}, AfterCursor: saved})
	defer sub.Close()
	for item, err := range sub.All() {
		if err != nil {
			log.Fatal(err)
		}
		if event := item.GetEvent(); event != nil {
			log.Printf("trimmed: %v", event.GetTrimmed())
			saved = sub.Cursor()
		}
	}
}
