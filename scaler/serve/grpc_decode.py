"""Undecodable requests answer INVALID_ARGUMENT, not UNKNOWN.

grpc parses a request before the handler runs; when protobuf rejects the bytes (corrupt
wire format, a string field that is not UTF-8), grpc.aio answers UNKNOWN with a Python
exception name, which reads like a server bug. The request is what is wrong, so this
interceptor parses it itself and answers INVALID_ARGUMENT saying why. Only the KEDA
service's methods are wrapped (unary and server-streaming, the shapes it has).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from google.protobuf.message import DecodeError

log = logging.getLogger("scaler.grpc")

Deserializer = Callable[[bytes], Any]


async def _decode(
    deserialize: Deserializer, raw: bytes, method: str, context: grpc.aio.ServicerContext
) -> Any:
    try:
        return deserialize(raw)
    except DecodeError as e:
        log.warning("%s: undecodable request (%d bytes): %s", method, len(raw), e)
        await context.abort(
            grpc.StatusCode.INVALID_ARGUMENT, f"request is not a valid {method} message: {e}"
        )


class RejectUndecodable(grpc.aio.ServerInterceptor):
    def __init__(self, service_prefix: str = "/externalscaler.ExternalScaler/") -> None:
        self._prefix = service_prefix

    async def intercept_service(
        self,
        continuation: Callable[
            [grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any] | None]
        ],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or not method.startswith(self._prefix):
            return handler
        deserialize = handler.request_deserializer
        if deserialize is None:
            return handler
        name = method.rsplit("/", 1)[-1]
        if handler.unary_unary is not None:
            inner: Any = handler.unary_unary  # the stubs type handlers as sync only

            async def unary(raw: bytes, context: grpc.aio.ServicerContext) -> Any:
                request = await _decode(deserialize, raw, name, context)
                return await inner(request, context)

            return grpc.unary_unary_rpc_method_handler(
                unary, response_serializer=handler.response_serializer
            )
        if handler.unary_stream is not None:
            inner_stream: Any = handler.unary_stream

            async def stream(raw: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
                request = await _decode(deserialize, raw, name, context)
                # aclosing: a dropped stream closes the servicer's generator now (its
                # `finally` decrements the open-streams gauge), not at garbage collection.
                async with contextlib.aclosing(inner_stream(request, context)) as items:
                    async for item in items:
                        yield item

            return grpc.unary_stream_rpc_method_handler(
                stream, response_serializer=handler.response_serializer
            )
        return handler
