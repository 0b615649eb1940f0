package turnkeeper

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// TLSCredentials builds transport credentials for a server started with --tls-cert: it trusts
// the PEM CA bundle at caFile (the system roots when caFile is empty) and, for a server that also
// has --tls-client-ca (mTLS), presents the PEM client certificate and key. Pass the result to
// WithTransportCredentials.
func TLSCredentials(caFile, clientCertFile, clientKeyFile string) (credentials.TransportCredentials, error) {
	if (clientCertFile == "") != (clientKeyFile == "") {
		return nil, errors.New("turnkeeper: give the client certificate and key together")
	}
	config := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("turnkeeper: CA bundle: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("turnkeeper: no PEM certificate in %s", caFile)
		}
		config.RootCAs = pool
	}
	if clientCertFile != "" {
		pair, err := tls.LoadX509KeyPair(clientCertFile, clientKeyFile)
		if err != nil {
			return nil, fmt.Errorf("turnkeeper: client certificate: %w", err)
		}
		config.Certificates = []tls.Certificate{pair}
	}
	return credentials.NewTLS(config), nil
}

// bearerToken sends "authorization: Bearer <token>" with every call, over TLS or a Unix socket.
type bearerToken string

func (t bearerToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(t)}, nil
}

// RequireTransportSecurity is false so that a token also works over a local Unix socket.
func (bearerToken) RequireTransportSecurity() bool { return false }

// WithToken sends the bearer token a server started with --auth-tokens requires on every call,
// TrimEvents subscriptions included.
func WithToken(token string) Option {
	return WithDialOptions(grpc.WithPerRPCCredentials(bearerToken(strings.TrimSpace(token))))
}
