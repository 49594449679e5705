"""A loopback TCP proxy in front of a MongoDB server that can lose replies on purpose.

Fail points inject faults *before* a command runs (``closeConnection``) or report an error
after it ran (``writeConcernError``, which reaches the caller on the embedded server
without a retry by pymongo). A reply lost in the network after the server applied the
command is neither: this proxy makes it. Armed with :meth:`ReplyCutter.cut_replies`, it
forwards the next matching command, waits for the server's reply, and closes the client's
connection instead of passing the reply on. The client sees a dropped connection, exactly
as if the reply had been lost on the way; pymongo then retries a retryable write on a new
connection.

It reads the MongoDB wire protocol only as far as it must: the 16-byte header (int32
messageLength, requestID, responseTo, opCode) gives the message boundaries and ties a reply
to its request, and an ``OP_MSG`` (opCode 2013: uint32 flagBits, then sections) names its
command in the first key of its section-0 document. Everything else is forwarded byte for
byte, including the server's streamed ``hello`` replies to pymongo's monitor. Compression
and TLS are not supported (the tests use neither).

:meth:`ReplyCutter.answer_retries_as_mongodb` goes one step further and plays the part of a
MongoDB replica set for the retry: the server here runs a retried write again, where
MongoDB answers a retried ``findAndModify`` whose first attempt was applied from its oplog,
with the document's **full** pre- or post-image and no projection
(``parseOplogEntryForFindAndModify``, ``src/mongo/db/query/write_ops/
write_ops_retryability.cpp`` in mongodb/mongo). The proxy forwards the chosen command
without its projection (``fields``), so the server's reply is exactly that image as the
first attempt left it, drops the reply, and answers pymongo's retry (the same ``lsid`` and
``txnNumber``) itself with it, never forwarding the retry. It answers so even where the
first attempt changed nothing (MongoDB would run that retry again): a reader must take the
image either way.

One event loop in a daemon thread serves every connection; arm it and read its cuts from
any thread::

    with ReplyCutter(("127.0.0.1", 27017)) as proxy:
        client = MongoClient("127.0.0.1", proxy.port, directConnection=True)
        proxy.cut_replies({"update"})
        client.db.c.update_one({"_id": 1}, {"$inc": {"n": 1}})  # applied, reply lost, retried
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import bson

Doc = dict[str, Any]

__all__ = ["Cut", "ReplyCutter", "decode_op_msg", "op_msg"]

_HEADER = struct.Struct("<iiii")  # messageLength, requestID, responseTo, opCode
_OP_MSG = 2013
_CHECKSUM_PRESENT = 1  # flagBits bit 0: a CRC-32C follows the sections


def decode_op_msg(body: bytes) -> Doc:
    """The document an ``OP_MSG`` body (the bytes after the header) carries.

    Section 0 is the command (or reply) itself; each kind-1 section is a document sequence
    (``documents``, ``updates``, ``deletes``) that the server reads as a field of it, so it
    is merged in under its identifier, as the server sees the command.
    """
    (flags,) = struct.unpack_from("<I", body)
    end = len(body) - (4 if flags & _CHECKSUM_PRESENT else 0)
    document: Doc = {}
    sequences: Doc = {}
    position = 4
    while position < end:
        kind = body[position]
        (size,) = struct.unpack_from("<i", body, position + 1)
        if kind == 0:
            document = bson.decode(body[position + 1 : position + 1 + size])
        elif kind == 1:
            name_end = body.index(b"\x00", position + 5)
            identifier = body[position + 5 : name_end].decode()
            sequences[identifier] = bson.decode_all(body[name_end + 1 : position + 1 + size])
        else:
            raise ValueError(f"unknown OP_MSG section kind {kind}")
        position += 1 + size
    return {**document, **sequences}


def op_msg(request_id: int, response_to: int, document: Doc) -> bytes:
    """A whole ``OP_MSG`` message (no checksum) carrying ``document`` as its section 0."""
    body = struct.pack("<I", 0) + b"\x00" + bson.encode(document)
    return _HEADER.pack(_HEADER.size + len(body), request_id, response_to, _OP_MSG) + body


def _retry_key(command: Doc) -> bytes | None:
    """What identifies a retryable write and its retries: its session and transaction number."""
    if "lsid" not in command or "txnNumber" not in command:
        return None
    return bson.encode({"lsid": command["lsid"], "txnNumber": command["txnNumber"]})


@dataclass(frozen=True)
class Cut:
    """A reply the proxy dropped: what the client asked, and what the server answered."""

    at_ms: int  # this host's clock, epoch milliseconds, when the reply was dropped
    command: Doc  # the request, its document sequences merged in
    reply: Doc  # the server's answer, which never reached the client

    @property
    def name(self) -> str:
        """The command's name (its document's first key)."""
        return next(iter(self.command))


class ReplyCutter:
    """A TCP proxy on ``127.0.0.1`` in front of ``upstream``; a context manager.

    :param upstream: the server's ``(host, port)``. Each client connection gets a server
        connection of its own; when the server is down, the client's is closed at once.
    :param port: where to listen; a free port when 0.
    """

    def __init__(self, upstream: tuple[str, int], *, port: int = 0) -> None:
        self.upstream = upstream
        self.port = port
        self._guard = threading.Lock()
        self._commands: frozenset[str] = frozenset()
        self._remaining = 0
        self._as_mongodb = False
        # The answers MongoDB would give to the retries of the dropped commands, by
        # ``_retry_key``, and how many retries were answered from them.
        self._answers: dict[bytes, Doc] = {}
        self.answered = 0
        self._cuts: list[Cut] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="reply-cutter", daemon=True
        )
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    # -- control, from any thread ------------------------------------------------------

    def cut_replies(self, commands: Iterable[str], times: int = 1) -> None:
        """Drop the replies to the next ``times`` commands named in ``commands``.

        A matching command is still forwarded and applied by the server; the client's
        connection is closed when its reply arrives. Re-arming replaces what is left.
        """
        with self._guard:
            self._commands, self._remaining = frozenset(commands), times
            self._as_mongodb = False

    def answer_retries_as_mongodb(self, commands: Iterable[str], times: int = 1) -> None:
        """Drop the replies to the next ``times`` commands, and answer their retries as MongoDB.

        Each matching command must be a retryable write (with ``lsid`` and ``txnNumber``).
        It is forwarded without its projection; its reply (the full pre- or post-image) is
        dropped and kept, and the retry that pymongo sends with the same session and
        transaction number is answered with it (``value`` and ``lastErrorObject`` as the
        first attempt's) without reaching the server.
        """
        with self._guard:
            self._commands, self._remaining = frozenset(commands), times
            self._as_mongodb = True

    def disarm(self) -> None:
        """Forward every reply from now on."""
        self.cut_replies((), 0)

    @property
    def armed(self) -> int:
        """How many replies are still to be dropped."""
        with self._guard:
            return self._remaining

    @property
    def cuts(self) -> list[Cut]:
        """Every reply dropped so far, oldest first."""
        with self._guard:
            return list(self._cuts)

    def start(self) -> None:
        """Listen (on ``self.port``, chosen now when it was 0) and serve in the background."""
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, "127.0.0.1", self.port), self._loop
        ).result()
        self.port = self._server.sockets[0].getsockname()[1]

    def stop(self) -> None:
        """Close the listener and every connection, and end the thread."""
        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result()
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
        self._loop.close()

    def __enter__(self) -> ReplyCutter:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- the event loop's side ---------------------------------------------------------

    def _doomed(self, body: bytes) -> tuple[Doc, bool] | None:
        """A request whose reply is to be dropped: its command, and whether MongoDB's retry
        answer is to be played; else None (uses the arm)."""
        with self._guard:
            if not self._remaining:
                return None
            command = decode_op_msg(body)
            if next(iter(command), None) not in self._commands:
                return None
            if self._as_mongodb and _retry_key(command) is None:
                raise ValueError(f"not a retryable write, so MongoDB has no answer: {command}")
            self._remaining -= 1
            return command, self._as_mongodb

    def _answer(self, body: bytes) -> Doc | None:
        """MongoDB's answer to a request that retries a dropped command, else None."""
        with self._guard:
            if not self._answers:
                return None
            key = _retry_key(decode_op_msg(body))
            answer = None if key is None else self._answers.get(key)
            if answer is not None:
                self.answered += 1
            return answer

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        # Closed sockets end every connection's pumps; cancelling the handlers instead
        # would make asyncio log each cancelled one.
        for writer in self._writers:
            writer.close()
        await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def _serve(
        self, client_in: asyncio.StreamReader, client_out: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        self._writers.add(client_out)
        try:
            try:
                server_in, server_out = await asyncio.open_connection(*self.upstream)
            except OSError:
                return  # the server is down: the client's connection closes at once
            self._writers.add(server_out)
            try:
                await self._pump(client_in, client_out, server_in, server_out)
            finally:
                server_out.close()
                self._writers.discard(server_out)
        finally:
            client_out.close()
            self._writers.discard(client_out)
            self._connections.discard(task)

    async def _pump(
        self,
        client_in: asyncio.StreamReader,
        client_out: asyncio.StreamWriter,
        server_in: asyncio.StreamReader,
        server_out: asyncio.StreamWriter,
    ) -> None:
        """Forward both ways until either side closes or a reply is dropped."""
        # Request ids whose replies are to be dropped, with their commands and whether the
        # reply answers the command's retry (MongoDB's part).
        doomed: dict[int, tuple[Doc, bool]] = {}
        pumps = [
            asyncio.ensure_future(self._requests(client_in, client_out, server_out, doomed)),
            asyncio.ensure_future(self._replies(server_in, client_out, doomed)),
        ]
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pump in pumps:
                pump.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)

    async def _requests(
        self,
        source: asyncio.StreamReader,
        client: asyncio.StreamWriter,
        sink: asyncio.StreamWriter,
        doomed: dict[int, tuple[Doc, bool]],
    ) -> None:
        while (message := await _read_message(source)) is not None:
            _, request_id, _, op_code = _HEADER.unpack_from(message)
            if op_code == _OP_MSG:
                answer = self._answer(message[_HEADER.size :])
                if answer is not None:  # a retry MongoDB answers from its first attempt
                    client.write(op_msg(request_id ^ 0x5A5A, request_id, answer))
                    await client.drain()
                    continue
                found = self._doomed(message[_HEADER.size :])
                if found is not None:
                    # Registered before forwarding, so the reply cannot overtake it.
                    doomed[request_id] = found
                    command, as_mongodb = found
                    if as_mongodb:  # the reply is then the whole image, as MongoDB keeps it
                        fields = {k: v for k, v in command.items() if k != "fields"}
                        message = op_msg(request_id, 0, fields)
            sink.write(message)
            await sink.drain()

    async def _replies(
        self,
        source: asyncio.StreamReader,
        sink: asyncio.StreamWriter,
        doomed: dict[int, tuple[Doc, bool]],
    ) -> None:
        while (message := await _read_message(source)) is not None:
            _, _, response_to, _ = _HEADER.unpack_from(message)
            found = doomed.pop(response_to, None)
            if found is not None:
                command, as_mongodb = found
                reply = decode_op_msg(message[_HEADER.size :])
                with self._guard:
                    self._cuts.append(Cut(int(time.time() * 1000), command, reply))
                    key = _retry_key(command)
                    if as_mongodb and key is not None and reply.get("ok") == 1:
                        self._answers[key] = {
                            "lastErrorObject": reply.get("lastErrorObject", {}),
                            "value": reply.get("value"),
                            "ok": 1.0,
                        }
                return  # the server has applied it; the client's connection closes unanswered
            sink.write(message)
            await sink.drain()


async def _read_message(source: asyncio.StreamReader) -> bytes | None:
    """One whole wire message, header included; None once the peer has closed."""
    with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
        header = await source.readexactly(_HEADER.size)
        (length,) = struct.unpack_from("<i", header)
        return header + await source.readexactly(length - _HEADER.size)
    return None
