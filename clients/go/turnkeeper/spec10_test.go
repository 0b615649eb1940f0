package turnkeeper_test

// The second-edition wrappers (spec §10) against the live server.

import (
	"slices"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	turnkeeperv1 "github.com/turnkeeper/turnkeeper/clients/go/gen/turnkeeper/v1"
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
