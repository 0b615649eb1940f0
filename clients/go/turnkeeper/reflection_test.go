package turnkeeper_test

import (
	"slices"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"
)

// The server answers grpc-go's own v1 reflection client (what grpcurl uses first) and the v1alpha
// one; grpcio-reflection implements only v1alpha, so v1 is the server's (ops/reflection.py).
func TestServerReflectionAnswersV1AndV1alphaClients(t *testing.T) {
	conn, err := grpc.NewClient(liveEnv(t, "TURNKEEPER_ADDRESS"),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ctx := testContext(t)

	v1, err := reflectionv1.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := v1.Send(&reflectionv1.ServerReflectionRequest{
		MessageRequest: &reflectionv1.ServerReflectionRequest_ListServices{},
	}); err != nil {
		t.Fatal(err)
	}
	listed, err := v1.Recv()
	if err != nil {
		t.Fatalf("v1 list services: %v", err)
	}
	var v1Names []string
	for _, service := range listed.GetListServicesResponse().GetService() {
		v1Names = append(v1Names, service.GetName())
	}
	for _, want := range []string{"turnkeeper.v1.HistoryService", "grpc.reflection.v1.ServerReflection"} {
		if !slices.Contains(v1Names, want) {
			t.Errorf("v1 lists %v, not %s", v1Names, want)
		}
	}
	if err := v1.Send(&reflectionv1.ServerReflectionRequest{
		MessageRequest: &reflectionv1.ServerReflectionRequest_FileContainingSymbol{
			FileContainingSymbol: "turnkeeper.v1.HistoryService",
		},
	}); err != nil {
		t.Fatal(err)
	}
	described, err := v1.Recv()
	if err != nil {
		t.Fatalf("v1 file containing symbol: %v", err)
	}
	var files []string
	for _, raw := range described.GetFileDescriptorResponse().GetFileDescriptorProto() {
		file := &descriptorpb.FileDescriptorProto{}
		if err := proto.Unmarshal(raw, file); err != nil {
			t.Fatal(err)
		}
		files = append(files, file.GetName())
	}
	if !slices.Contains(files, "turnkeeper/v1/history_service.proto") {
		t.Errorf("v1 describes HistoryService with %v", files)
	}
	_ = v1.CloseSend()

	alpha, err := reflectionv1alpha.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := alpha.Send(&reflectionv1alpha.ServerReflectionRequest{
		MessageRequest: &reflectionv1alpha.ServerReflectionRequest_ListServices{},
	}); err != nil {
		t.Fatal(err)
	}
	alphaListed, err := alpha.Recv()
	if err != nil {
		t.Fatalf("v1alpha list services: %v", err)
	}
	var alphaNames []string
	for _, service := range alphaListed.GetListServicesResponse().GetService() {
		alphaNames = append(alphaNames, service.GetName())
	}
	slices.Sort(alphaNames)
	slices.Sort(v1Names)
	if !slices.Equal(alphaNames, v1Names) {
		t.Errorf("v1alpha lists %v, v1 lists %v", alphaNames, v1Names)
	}
	_ = alpha.CloseSend()
}
