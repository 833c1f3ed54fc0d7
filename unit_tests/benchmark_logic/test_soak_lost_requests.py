"""A request the load soak loses says which step of its exchange failed.

Here a local server reads each request and resets the connection, and the
real httpx client, traced as the soak traces it, reports the failure.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from benchmarks.load_soak import _failed_step


async def _reset(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.read(65536)
    writer.transport.abort()


async def _lost_at() -> str:
    server = await asyncio.start_server(_reset, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    steps: list[str] = []

    async def trace(event: str, _info: dict[str, Any]) -> None:
        steps.append(event)

    async with server, httpx.AsyncClient() as client:
        try:
            await client.post(
                f"http://127.0.0.1:{port}/", content=b"{}", extensions={"trace": trace}
            )
        except httpx.HTTPError:
            return _failed_step(steps)
    raise AssertionError("the reset server answered")


def test_a_reset_connection_names_the_step_that_failed() -> None:
    assert asyncio.run(_lost_at()) == "http11.receive_response_headers.failed"
