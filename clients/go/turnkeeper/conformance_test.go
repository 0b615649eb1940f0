package turnkeeper_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	turnkeeperv1 "github.com/turnkeeper/turnkeeper/clients/go/gen/turnkeeper/v1"
	"github.com/turnkeeper/turnkeeper/clients/go/turnkeeper"
)

// vector is one conformance vector, in the format of docs/conventions.md.
type vector struct {
	Name        string          `json:"name"`
	Rule        string          `json:"rule"`
	Description string          `json:"description"`
	RPC         string          `json:"rpc"`
	Request     json.RawMessage `json:"request"`
	Expect      struct {
		Response json.RawMessage `json:"response"`
		Error    *struct {
			Code   string `json:"code"`
			Reason string `json:"reason"`
			// A pointer: an omitted key means no BadRequest check, an empty list means none expected.
			FieldViolations *[]string       `json:"fieldViolations"`
			CapacityReport  json.RawMessage `json:"capacityReport"`
		} `json:"error"`
	} `json:"expect"`
}

// rpc runs one unary RPC through the wrapper on messages parsed from JSON.
type rpc struct {
	newRequest  func() proto.Message
	newResponse func() proto.Message
	call        func(context.Context, *turnkeeper.Client, proto.Message) (proto.Message, error)
}

func unaryRPC[Req, Resp proto.Message](method func(*turnkeeper.Client, context.Context, Req, ...grpc.CallOption) (Resp, error)) rpc {
	return rpc{
		newRequest:  func() proto.Message { var r Req; return r.ProtoReflect().New().Interface() },
		newResponse: func() proto.Message { var r Resp; return r.ProtoReflect().New().Interface() },
		call: func(ctx context.Context, c *turnkeeper.Client, req proto.Message) (proto.Message, error) {
			return method(c, ctx, req.(Req))
		},
	}
}

var unaryRPCs = map[string]rpc{
	"EstimateTokens":        unaryRPC((*turnkeeper.Client).EstimateTokens),
	"ResolveBudget":         unaryRPC((*turnkeeper.Client).ResolveBudget),
	"TrimHistory":           unaryRPC((*turnkeeper.Client).TrimHistory),
	"PrepareModelCall":      unaryRPC((*turnkeeper.Client).PrepareModelCall),
	"CheckCapacity":         unaryRPC((*turnkeeper.Client).CheckCapacity),
	"SweepOrphans":          unaryRPC((*turnkeeper.Client).SweepOrphans),
	"CapToolResults":        unaryRPC((*turnkeeper.Client).CapToolResults),
	"ClassifyProviderError": unaryRPC((*turnkeeper.Client).ClassifyProviderError),
	"PlanCompaction":        unaryRPC((*turnkeeper.Client).PlanCompaction),
}

// TestWrapperCoversEveryUnaryRPC fails when the contract gains a unary RPC the wrapper lacks.
func TestWrapperCoversEveryUnaryRPC(t *testing.T) {
	methods := turnkeeperv1.File_turnkeeper_v1_history_service_proto.Services().ByName("HistoryService").Methods()
	for i := range methods.Len() {
		m := methods.Get(i)
		if m.IsStreamingServer() || m.IsStreamingClient() {
			continue
		}
		if _, ok := unaryRPCs[string(m.Name())]; !ok {
			t.Errorf("no wrapper method for unary RPC %s", m.Name())
		}
	}
}

func vectorFiles(t *testing.T) []string {
	dir := os.Getenv("TURNKEEPER_CONFORMANCE_DIR")
	if dir == "" {
		dir = filepath.Join("..", "..", "..", "tests", "conformance", "vectors")
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no conformance vectors in %s", dir)
	}
	return files
}

func loadVector(t *testing.T, path string) vector {
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Strict: a misspelt key (say "fieldViolation") would silently skip a check.
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var v vector
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if (v.Expect.Response == nil) == (v.Expect.Error == nil) {
		t.Fatalf("%s: expect needs exactly one of response and error", path)
	}
	return v
}

func parseJSON(t *testing.T, what string, raw json.RawMessage, msg proto.Message) {
	t.Helper()
	// protojson rejects unknown fields by default, as the vector format requires.
	if err := protojson.Unmarshal(raw, msg); err != nil {
		t.Fatalf("parse %s as %s: %v", what, msg.ProtoReflect().Descriptor().FullName(), err)
	}
}

func TestConformanceVectors(t *testing.T) {
	client := tcpClient(t)
	for _, path := range vectorFiles(t) {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".json"), func(t *testing.T) {
			v := loadVector(t, path)
			r, ok := unaryRPCs[v.RPC]
			if !ok {
				t.Fatalf("unknown rpc %q", v.RPC)
			}
			req := r.newRequest()
			parseJSON(t, "request", v.Request, req)
			resp, err := r.call(testContext(t), client, req)
			if v.Expect.Error != nil {
				checkError(t, v, err)
				return
			}
			if err != nil {
				t.Fatalf("%s (%s): unexpected error: %v", v.Name, v.Rule, err)
			}
			want := r.newResponse()
			parseJSON(t, "expect.response", v.Expect.Response, want)
			if !proto.Equal(want, resp) {
				t.Errorf("%s (%s): response differs (-want +got):\n%s", v.Name, v.Rule, cmp.Diff(want, resp, protocmp.Transform()))
			}
		})
	}
}

func checkError(t *testing.T, v vector, err error) {
	t.Helper()
	want := v.Expect.Error
	if err == nil {
		t.Fatalf("%s (%s): want %s %s, the call succeeded", v.Name, v.Rule, want.Code, want.Reason)
	}
	var got *turnkeeper.Error
	if !errors.As(err, &got) {
		t.Fatalf("%s: the wrapper returned %T, not *turnkeeper.Error: %v", v.Name, err, err)
	}
	wantCode, ok := code.Code_value[want.Code]
	if !ok {
		t.Fatalf("%s: unknown status code %q", v.Name, want.Code)
	}
	if got.Code != codes.Code(wantCode) {
		t.Errorf("%s (%s): code %s, want %s (%v)", v.Name, v.Rule, got.Code, want.Code, err)
	}
	if got.Reason != want.Reason || got.Domain != turnkeeper.ErrorDomain {
		t.Errorf("%s (%s): ErrorInfo %s/%s, want %s/%s", v.Name, v.Rule, got.Domain, got.Reason, turnkeeper.ErrorDomain, want.Reason)
	}
	if want.FieldViolations != nil {
		gotFields, wantFields := fieldSet(got.Fields()), fieldSet(*want.FieldViolations)
		if !slices.Equal(gotFields, wantFields) {
			t.Errorf("%s (%s): field violations %q, want %q", v.Name, v.Rule, gotFields, wantFields)
		}
	}
	if want.CapacityReport != nil {
		wantReport := &turnkeeperv1.CapacityReport{}
		parseJSON(t, "expect.error.capacityReport", want.CapacityReport, wantReport)
		if !proto.Equal(wantReport, got.CapacityReport) {
			t.Errorf("%s (%s): CapacityReport differs (-want +got):\n%s", v.Name, v.Rule, cmp.Diff(wantReport, got.CapacityReport, protocmp.Transform()))
		}
	}
}

// fieldSet sorts and deduplicates field paths: the vectors compare violations as a set.
func fieldSet(fields []string) []string {
	out := slices.Clone(fields)
	slices.Sort(out)
	return slices.Compact(out)
}
