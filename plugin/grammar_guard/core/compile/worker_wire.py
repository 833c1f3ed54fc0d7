"""The messages between the engine process and a compile worker: a tag byte, a length, a payload.

A reader refuses a length past its limit before it allocates anything, so a
worker cannot make the engine process allocate more than the worker itself
was allowed to hold.
"""

from __future__ import annotations

import socket
import struct
import time

# One message: a tag byte and the payload's length, then the payload.
HEADER = struct.Struct("!cQ")
# The longest message the engine process reads from a worker without a memory
# limit (a limited worker cannot build a reply longer than its limit).
MAX_UNLIMITED_REPLY_BYTES = 16 << 30
COMPILE = b"C"  # to the worker: a pickled (GrammarSpec, EngineName or None)
READY = b"R"  # the engine is built
START_FAILED = b"S"  # the engine could not be built: the reason
COMPILED = b"K"  # the serialised grammar
INVALID = b"I"  # InvalidGrammarError: its reason
FAILED = b"F"  # any other exception: its type and text


def send(connection: socket.socket, tag: bytes, payload: bytes) -> None:
    connection.sendall(HEADER.pack(tag, len(payload)))
    connection.sendall(payload)


class OversizedMessage(Exception):
    """The peer announced a message longer than the reader accepts: nothing of it was read."""


def receive(
    connection: socket.socket, deadline: float | None, max_length: int
) -> tuple[bytes, bytes]:
    """One message; ``TimeoutError`` past ``deadline``, ``EOFError`` if the peer closed.

    The payload's buffer is allocated from the length the peer announces, so a
    length past ``max_length`` is refused before anything is allocated.
    """
    tag, length = HEADER.unpack(_receive_exactly(connection, HEADER.size, deadline))
    if length > max_length:
        raise OversizedMessage(
            f"the grammar compile process announced a {length}-byte reply, "
            f"over the {max_length}-byte limit"
        )
    return tag, _receive_exactly(connection, length, deadline)


def _receive_exactly(connection: socket.socket, size: int, deadline: float | None) -> bytes:
    buffer = bytearray(size)
    view = memoryview(buffer)
    received = 0
    while received < size:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            connection.settimeout(remaining)
        count = connection.recv_into(view[received:])
        if count == 0:
            raise EOFError
        received += count
    return bytes(buffer)
