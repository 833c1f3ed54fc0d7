"""A request the load soak loses says whether its connection was new or reused.

A reused keep-alive connection that the server closes as the client sends on
it loses the request on the client's side; a new connection that breaks is the
server's doing. Here a local server answers one request per connection and
resets the next, so both cases happen through the real httpx client.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from benchmarks.load_soak import _where_it_broke


async def _reset(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.read(65536)
    writer.transport.abort()


async def _one_then_reset(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.read(65536)
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    await writer.drain()
    await _reset(reader, writer)


async def _outcomes(handler: Any, requests: int) -> list[str]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    outcomes = []
    async with server, httpx.AsyncClient() as client:
        for _ in range(requests):
            steps: list[str] = []

            async def trace(event: str, _info: dict[str, Any], steps: list[str] = steps) -> None:
                steps.append(event)

            try:
                url = f"http://127.0.0.1:{port}/"
                await client.post(url, content=b"{}", extensions={"trace": trace})
                outcomes.append("answered")
            except httpx.HTTPError:
                outcomes.append(_where_it_broke(steps))
    return outcomes


def test_a_reset_on_a_reused_connection_is_told_apart_from_a_new_one() -> None:
    assert asyncio.run(_outcomes(_one_then_reset, 2)) == [
        "answered",
        "reused connection, http11.receive_response_headers.failed",
    ]
    assert asyncio.run(_outcomes(_reset, 1)) == [
        "new connection, http11.receive_response_headers.failed"
    ]
