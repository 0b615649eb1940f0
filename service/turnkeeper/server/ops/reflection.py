"""gRPC server reflection, as `grpc.reflection.v1` and as `grpc.reflection.v1alpha`.

grpcio-reflection implements only v1alpha (grpc/grpc#38576), while current tools ask for v1
first (grpcurl, Postman, grpc-java, which deprecated v1alpha). v1 is v1alpha with the package
renamed: the same messages with the same field numbers, so the same bytes on the wire. One
servicer answers both; v1 gets its descriptor (the v1alpha file, renamed) in the default pool,
so reflection describes v1 as well, and clients without generated v1 code (the tests) can build
its messages.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.descriptor import FileDescriptor
from grpc_reflection.v1alpha import reflection, reflection_pb2

if TYPE_CHECKING:
    from turnkeeper.server.edge.wrapper import HandlerRegistry

V1ALPHA_SERVICE_NAME: str = reflection.SERVICE_NAME
V1_PACKAGE = "grpc.reflection.v1"
V1_SERVICE_NAME = f"{V1_PACKAGE}.ServerReflection"
V1_FILE_NAME = "grpc/reflection/v1/reflection.proto"
_ALPHA_PACKAGE = reflection_pb2.DESCRIPTOR.package


def _renamed(type_name: str) -> str:
    return type_name.replace(f".{_ALPHA_PACKAGE}.", f".{V1_PACKAGE}.", 1)


def _rename_messages(messages: Iterable[descriptor_pb2.DescriptorProto]) -> None:
    for message in messages:
        for field in message.field:
            if field.type_name:
                field.type_name = _renamed(field.type_name)
        _rename_messages(message.nested_type)


def v1_file() -> FileDescriptor:
    """The descriptor of grpc/reflection/v1/reflection.proto, added to the default pool once."""
    pool = descriptor_pool.Default()
    try:
        return pool.FindFileByName(V1_FILE_NAME)
    except KeyError:
        pass
    proto = descriptor_pb2.FileDescriptorProto()
    reflection_pb2.DESCRIPTOR.CopyToProto(proto)
    proto.name, proto.package = V1_FILE_NAME, V1_PACKAGE
    proto.ClearField("options")  # v1alpha's Java and Go package options name v1alpha
    _rename_messages(proto.message_type)
    for service in proto.service:
        for method in service.method:
            method.input_type = _renamed(method.input_type)
            method.output_type = _renamed(method.output_type)
    pool.Add(proto)
    return pool.FindFileByName(V1_FILE_NAME)


def enable_reflection(server: HandlerRegistry, service_names: Iterable[str]) -> None:
    """Serves reflection for `service_names` and both reflection services, under both names."""
    v1_file()
    servicer = reflection.aio.ReflectionServicer(
        (*service_names, V1_SERVICE_NAME, V1ALPHA_SERVICE_NAME)
    )
    # The v1alpha message classes read and write v1's bytes too (the same wire format).
    info = grpc.stream_stream_rpc_method_handler(
        servicer.ServerReflectionInfo,
        request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
        response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
    )
    server.add_generic_rpc_handlers(
        tuple(
            grpc.method_handlers_generic_handler(name, {"ServerReflectionInfo": info})
            for name in (V1_SERVICE_NAME, V1ALPHA_SERVICE_NAME)
        )
    )
