"""The sandbox HTTP/1.1 server: every host of a :class:`~sandbox.site.SiteSpec`
on one loopback port, chosen by the ``Host`` header.

A raw :class:`asyncio.Protocol` (no framework) so that it stays much faster
than any crawler it serves: keep-alive, pipelining, GET and HEAD. Once bound it
prints one JSON line, ``{"port": N}``, to stdout (like Scrapy's mockserver).

With a record file it appends one JSON object per served request::

    {"host": "site-000.sandbox.test", "path": "/?q=1", "t_ms": 1717.5,
     "status": 200, "ua": "Scrapy/2.19", "method": "GET", "ip": "127.0.0.1"}

``t_ms`` is ``time.time() * 1000`` when the request line was parsed; ``ip``
is the address the client connected to (a web whose hosts have addresses of
their own, ``SiteSpec.addresses``, is served on each, one port). A
conditional request adds its validators (``"inm"``: If-None-Match, ``"ims"``:
If-Modified-Since), and an answer with an ``ETag`` adds it (``"etag"``), so
a test can tell revisits, 304s and which version of a page was served. Lines are
buffered and flushed every ``FLUSH_INTERVAL`` seconds, on SIGUSR1, and on
SIGTERM/SIGINT (which stop the server).

The module reads no settings; see ``python -m sandbox --help``.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
import signal
import sys
import time
from http import HTTPStatus
from typing import IO, TYPE_CHECKING, Any

from sandbox.site import Request, Response, Site, SiteSpec

if TYPE_CHECKING:
    from collections.abc import Awaitable, Coroutine

logger = logging.getLogger(__name__)

# Records reach the file at most this many seconds after the request.
FLUSH_INTERVAL = 0.1
# Largest request head accepted (431 beyond).
MAX_HEAD_BYTES = 65_536
# Bodies above this are written in chunks that respect the socket's flow control.
CHUNK_BYTES = 256 * 1024
_REASONS = {s.value: s.phrase for s in HTTPStatus}
_TASKS: set[asyncio.Future[None]] = set()


class Recorder:
    """Buffers request records and appends them to a JSON-lines file."""

    def __init__(self, path: str | None) -> None:
        self.file: IO[str] | None = (
            open(path, "a", encoding="utf-8") if path else None  # noqa: SIM115
        )
        self.lines: list[str] = []

    def add(
        self,
        host: str,
        target: str,
        t_ms: float,
        status: int,
        ua: str,
        method: str,
        extra: dict[str, str] | None = None,
        ip: str = "",
    ) -> None:
        if self.file is not None:
            record = {
                "host": host,
                "path": target,
                "t_ms": t_ms,
                "status": status,
                "ua": ua,
                "method": method,
                "ip": ip,
            }
            if extra:
                record.update(extra)
            self.lines.append(json.dumps(record) + "\n")

    def flush(self) -> None:
        if self.file is not None and self.lines:
            self.file.write("".join(self.lines))
            self.lines.clear()
            self.file.flush()

    def close(self) -> None:
        self.flush()
        if self.file is not None:
            self.file.close()
            self.file = None


def validators(req: Request, response: Response) -> dict[str, str] | None:
    """The conditional headers of a request and the ETag of its answer.

    >>> validators(Request("GET", "h", "/", "", {"if-none-match": '"a"'}),
    ...            Response(304, b"", [("ETag", '"a"')]))
    {'inm': '"a"', 'etag': '"a"'}
    """
    found = {}
    for name, key in (("if-none-match", "inm"), ("if-modified-since", "ims")):
        value = req.headers.get(name)
        if value is not None:
            found[key] = value
    for name, value in response.headers:
        if name.lower() == "etag":
            found["etag"] = value
    return found or None


class HttpProtocol(asyncio.Protocol):
    """One client connection: parse requests in order, answer them in order."""

    def __init__(self, site: Site, recorder: Recorder) -> None:
        self.site = site
        self.recorder = recorder
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None
        self.ip = ""
        self.busy = False  # an answer is in progress (slow page, big body)
        self.closing = False
        self.can_write = asyncio.Event()
        self.can_write.set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        # The address the client connected to: which "machine" it reached.
        sockname = transport.get_extra_info("sockname")
        self.ip = str(sockname[0]) if sockname else ""

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.closing = True
        self.can_write.set()

    def pause_writing(self) -> None:
        self.can_write.clear()

    def resume_writing(self) -> None:
        self.can_write.set()

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if not self.busy:
            self.process()

    def process(self) -> None:
        while not self.busy and not self.closing and self.transport is not None:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buffer) > MAX_HEAD_BYTES:
                    self.fail(431)
                return
            t_ms = time.time() * 1000
            head = bytes(self.buffer[:end]).decode("latin-1")
            lines = head.split("\r\n")
            parts = lines[0].split(" ")
            if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
                self.fail(400)
                return
            method, target, version = parts
            headers: dict[str, str] = {}
            for line in lines[1:]:
                name, sep, value = line.partition(":")
                if sep:
                    headers[name.strip().lower()] = value.strip()
            length = int(headers.get("content-length", "0") or 0)
            if len(self.buffer) < end + 4 + length:
                return  # wait for the request body (ignored once read)
            del self.buffer[: end + 4 + length]
            connection = headers.get("connection", "").lower()
            keep = (
                "close" not in connection
                if version == "HTTP/1.1"
                else "keep-alive" in connection
            )
            if target.startswith(("http://", "https://")):
                target = (
                    "/" + target.split("/", 3)[3] if target.count("/") >= 3 else "/"
                )
            path, _, query = target.partition("?")
            host = headers.get("host", "")
            req = Request(method, host.lower(), path, query, headers)
            ua = headers.get("user-agent", "")
            record_host = (
                host.rsplit(":", 1)[0].lower() if host.count(":") == 1 else host.lower()
            )
            try:
                answer = self.site.handle(req)
            except Exception:
                logger.exception("error answering %s %s%s", method, host, target)
                answer = Response(500, b"internal error")
            if inspect.isawaitable(answer):
                self.busy = True
                self.spawn(
                    self.finish(answer, req, keep, record_host, target, t_ms, ua)
                )
                return
            assert isinstance(answer, Response)
            if not self.send(answer, req, keep):
                self.busy = True
                self.spawn(self.send_big(answer, req, keep))
            self.recorder.add(
                record_host,
                target,
                t_ms,
                answer.status,
                ua,
                method,
                validators(req, answer),
                self.ip,
            )
            if not keep and not self.busy:
                self.close()

    async def finish(
        self,
        answer: Awaitable[Response],
        req: Request,
        keep: bool,
        host: str,
        target: str,
        t_ms: float,
        ua: str,
    ) -> None:
        try:
            response = await answer
        except Exception:
            logger.exception("error answering %s %s%s", req.method, host, target)
            response = Response(500, b"internal error")
        self.recorder.add(
            host,
            target,
            t_ms,
            response.status,
            ua,
            req.method,
            validators(req, response),
            self.ip,
        )
        if self.transport is None:
            return
        if not self.send(response, req, keep):
            await self.send_big(response, req, keep)
            return
        self.done(keep)

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run ``coro`` as a task, referenced until done (asyncio keeps only
        weak references to tasks)."""
        task = asyncio.ensure_future(coro)
        _TASKS.add(task)
        task.add_done_callback(_TASKS.discard)

    def done(self, keep: bool) -> None:
        self.busy = False
        if not keep:
            self.close()
        elif self.buffer:
            self.process()

    def head_bytes(self, response: Response, req: Request, keep: bool) -> bytes:
        status = response.status
        lines = [
            f"HTTP/1.1 {status} {_REASONS.get(status, 'Unknown')}\r\n"
            "Server: sandbox\r\n"
        ]
        lines += [f"{k}: {v}\r\n" for k, v in response.headers]
        if status != 304 and not (100 <= status < 200 or status == 204):
            lines.append(f"Content-Length: {len(response.body)}\r\n")
        lines.append(
            "Connection: keep-alive\r\n\r\n" if keep else "Connection: close\r\n\r\n"
        )
        return "".join(lines).encode("latin-1")

    def send(self, response: Response, req: Request, keep: bool) -> bool:
        """Write a small answer at once; False when the body needs chunking."""
        assert self.transport is not None
        head = self.head_bytes(response, req, keep)
        body = b"" if req.method == "HEAD" or response.status == 304 else response.body
        if len(body) > CHUNK_BYTES:
            return False
        self.transport.write(head + body if body else head)
        return True

    async def send_big(self, response: Response, req: Request, keep: bool) -> None:
        if self.transport is None:
            return
        self.transport.write(self.head_bytes(response, req, keep))
        view = memoryview(response.body)
        for start in range(0, len(view), CHUNK_BYTES):
            await self.can_write.wait()
            if self.transport is None:
                return
            self.transport.write(view[start : start + CHUNK_BYTES])
        self.done(keep)

    def fail(self, status: int) -> None:
        if self.transport is not None:
            reason = _REASONS.get(status, "Error")
            self.transport.write(
                f"HTTP/1.1 {status} {reason}\r\nContent-Length: 0\r\n"
                "Connection: close\r\n\r\n".encode()
            )
        self.close()

    def close(self) -> None:
        self.closing = True
        if self.transport is not None:
            self.transport.close()


async def serve(
    spec: SiteSpec,
    port: int = 0,
    record: str | None = None,
    max_seconds: float = 0.0,
    out: IO[str] | None = None,
    cache_pages: int = 2048,
) -> None:
    """Serve ``spec`` on 127.0.0.1:``port`` (and on the same port of every
    address of ``spec.addresses``) until SIGTERM/SIGINT or ``max_seconds``
    (0: no limit); print ``{"port": N}`` once bound."""
    loop = asyncio.get_running_loop()
    recorder = Recorder(record)
    holder: list[Site] = []

    def protocol() -> HttpProtocol:
        return HttpProtocol(holder[0], recorder)

    first, *others = spec.listen_addresses()
    servers = [await loop.create_server(protocol, first, port, backlog=1024)]
    bound = servers[0].sockets[0].getsockname()[1]
    for address in others:
        servers.append(await loop.create_server(protocol, address, bound, backlog=1024))
    server = servers[0]
    holder.append(Site(spec, bound, cache_pages))
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGUSR1, recorder.flush)
    if max_seconds > 0:
        loop.call_later(max_seconds, stop.set)

    async def flusher() -> None:
        while True:
            await asyncio.sleep(FLUSH_INTERVAL)
            recorder.flush()

    flush_task = asyncio.ensure_future(flusher())
    out = out if out is not None else sys.stdout
    out.write(json.dumps({"port": bound}) + "\n")
    out.flush()
    try:
        await stop.wait()
    finally:
        flush_task.cancel()
        for one in servers:
            one.close()
        recorder.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.wait_closed(), 0.5)
