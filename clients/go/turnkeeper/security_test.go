package turnkeeper_test

import (
	"errors"
	"testing"

	"google.golang.org/grpc/codes"

	turnkeeperv1 "github.com/turnkeeper/turnkeeper/clients/go/gen/turnkeeper/v1"
	"github.com/turnkeeper/turnkeeper/clients/go/turnkeeper"
)

// secureClient connects to the TLS or mTLS server of `with_server.py --secure`.
func secureClient(t *testing.T, addressVar string, mtls bool, opts ...turnkeeper.Option) *turnkeeper.Client {
	t.Helper()
	cert, key := "", ""
	if mtls {
		cert, key = liveEnv(t, "TURNKEEPER_TLS_CLIENT_CERT"), liveEnv(t, "TURNKEEPER_TLS_CLIENT_KEY")
	}
	creds, err := turnkeeper.TLSCredentials(liveEnv(t, "TURNKEEPER_TLS_CA"), cert, key)
	if err != nil {
		t.Fatal(err)
	}
	return connect(t, liveEnv(t, addressVar), append([]turnkeeper.Option{turnkeeper.WithTransportCredentials(creds)}, opts...)...)
}

func estimateCode(t *testing.T, client *turnkeeper.Client) (codes.Code, string) {
	t.Helper()
	_, err := client.EstimateTokens(testContext(t), &turnkeeperv1.EstimateTokensRequest{History: threeTurns("tls")})
	if err == nil {
		return codes.OK, ""
	}
	var failure *turnkeeper.Error
	if !errors.As(err, &failure) {
		t.Fatalf("not a *turnkeeper.Error: %v", err)
	}
	return failure.Code, failure.Reason
}

func TestTLSWithAToken(t *testing.T) {
	client := secureClient(t, "TURNKEEPER_TLS_ADDRESS", false, turnkeeper.WithToken(liveEnv(t, "TURNKEEPER_TOKEN")))
	if code, _ := estimateCode(t, client); code != codes.OK {
		t.Fatalf("TLS + token: %v", code)
	}
}

func TestTLSWithoutATokenIsUnauthenticated(t *testing.T) {
	code, reason := estimateCode(t, secureClient(t, "TURNKEEPER_TLS_ADDRESS", false))
	if code != codes.Unauthenticated || reason != "ERROR_REASON_UNAUTHENTICATED" {
		t.Fatalf("got %v %q", code, reason)
	}
}

func TestMTLSWithAClientCertificateAndAToken(t *testing.T) {
	client := secureClient(t, "TURNKEEPER_MTLS_ADDRESS", true, turnkeeper.WithToken(liveEnv(t, "TURNKEEPER_TOKEN")))
	if code, _ := estimateCode(t, client); code != codes.OK {
		t.Fatalf("mTLS + token: %v", code)
	}
}

func TestMTLSWithoutAClientCertificateFails(t *testing.T) {
	client := secureClient(t, "TURNKEEPER_MTLS_ADDRESS", false, turnkeeper.WithToken(liveEnv(t, "TURNKEEPER_TOKEN")))
	if code, _ := estimateCode(t, client); code != codes.Unavailable {
		t.Fatalf("mTLS without a client certificate: got %v, want Unavailable", code)
	}
}

func TestTLSCredentialsNeedCertAndKeyTogether(t *testing.T) {
	if _, err := turnkeeper.TLSCredentials("", "client.pem", ""); err == nil {
		t.Fatal("a certificate without its key was accepted")
	}
}

func TestTrimEventsCarryTheTokenAndHonourTheSubscribeRight(t *testing.T) {
	allowed := secureClient(t, "TURNKEEPER_TLS_ADDRESS", false, turnkeeper.WithToken(liveEnv(t, "TURNKEEPER_TOKEN")))
	sub, err := allowed.SubscribeTrimEvents(testContext(t), &turnkeeperv1.TrimEventsRequest{})
	if err != nil {
		t.Fatalf("a token with trim_events may subscribe: %v", err)
	}
	sub.Close()
	denied := secureClient(t, "TURNKEEPER_TLS_ADDRESS", false, turnkeeper.WithToken(liveEnv(t, "TURNKEEPER_TOKEN_NO_EVENTS")))
	_, err = denied.SubscribeTrimEvents(testContext(t), &turnkeeperv1.TrimEventsRequest{})
	var failure *turnkeeper.Error
	if !errors.As(err, &failure) || failure.Code != codes.PermissionDenied || failure.Reason != "ERROR_REASON_PERMISSION_DENIED" {
		t.Fatalf("a token without trim_events: got %v", err)
	}
}
