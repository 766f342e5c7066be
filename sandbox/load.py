"""A bounded keep-alive load client to measure the sandbox server.

``python -m sandbox.load --seconds 5`` starts a sandbox (100 hosts x 50 pages),
sends GETs for its page URLs in a loop over ``--connections`` keep-alive
connections for at most ``--seconds`` (and at most ``--max-requests``), and
prints one JSON line: requests, seconds, requests per second, errors.

``--port`` measures an already running server instead (same spec options).
Reads no settings.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import time
from dataclasses import asdict, dataclass
from urllib.parse import urlsplit

from sandbox.process import SandboxProcess
from sandbox.site import SiteSpec


@dataclass
class LoadResult:
    requests: int
    seconds: float
    rps: float
    errors: int
    bytes: int


async def _worker(
    port: int,
    targets: list[tuple[str, str]],
    offset: int,
    deadline: float,
    budget: list[int],
    counts: list[int],
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    n = offset
    try:
        while time.monotonic() < deadline and budget[0] > 0:
            budget[0] -= 1
            host, path = targets[n % len(targets)]
            n += 1
            writer.write(
                f"GET {path} HTTP/1.1\r\nHost: {host}\r\n"
                "User-Agent: sandbox-load\r\n\r\n".encode()
            )
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head[9:12])
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            body = await reader.readexactly(length)
            counts[0] += 1
            counts[1] += status >= 400
            counts[2] += len(body)
    finally:
        writer.close()


async def run_load(
    port: int,
    urls: list[str],
    seconds: float = 5.0,
    connections: int = 8,
    max_requests: int = 1_000_000,
) -> LoadResult:
    """GET ``urls`` round-robin over keep-alive connections; bounded in time
    and count. Each connection starts at a different point of the list."""
    targets = [(p.netloc, p.path or "/") for p in map(urlsplit, urls)]
    counts = [0, 0, 0]
    budget = [max_requests]
    start = time.monotonic()
    deadline = start + seconds
    step = max(1, len(targets) // connections)
    await asyncio.gather(
        *(
            _worker(port, targets, c * step, deadline, budget, counts)
            for c in range(connections)
        )
    )
    elapsed = time.monotonic() - start
    return LoadResult(counts[0], elapsed, counts[0] / elapsed, counts[1], counts[2])


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m sandbox.load", description=__doc__)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--connections", type=int, default=8)
    p.add_argument("--max-requests", type=int, default=1_000_000)
    p.add_argument("--hosts", type=int, default=100)
    p.add_argument("--pages", type=int, default=50)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--port", type=int, default=0, help="measure a running server")
    args = p.parse_args(argv)
    spec = SiteSpec(seed=args.seed, hosts=args.hosts, pages_per_host=args.pages)
    if args.port:
        urls = spec.page_urls(args.port)
        result = asyncio.run(
            run_load(args.port, urls, args.seconds, args.connections, args.max_requests)
        )
        report = asdict(result)
    else:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        with SandboxProcess(spec, max_seconds=args.seconds + 60) as web:
            urls = spec.page_urls(web.port)
            result = asyncio.run(
                run_load(
                    web.port, urls, args.seconds, args.connections, args.max_requests
                )
            )
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        # The server's own CPU time (start-up included): requests per CPU
        # second is its one-core capacity, whatever else shares the machine.
        cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
        report = asdict(result) | {
            "server_cpu_s": cpu,
            "requests_per_server_cpu_s": result.requests / cpu if cpu else 0.0,
        }
    print(
        json.dumps(
            {k: round(v, 1) if isinstance(v, float) else v for k, v in report.items()}
        )
    )


if __name__ == "__main__":
    main()
