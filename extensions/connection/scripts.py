"""One registry of Lua scripts per Redis client, and the Redis clock.

Every Lua script of :mod:`extensions` is registered through :func:`script`,
once per client (as ``rq/scripts.py`` caches its registrations), so a script
is loaded once and then run by SHA. A script returns a code; the Python
wrapper beside it turns the code into a named value (an ``IntEnum``) or a
domain exception.

Times in records and leases are epoch milliseconds of the Redis server clock
(``TIME``), never of a worker's clock, so the whole fleet shares one clock:
Lua scripts include :data:`LUA_NOW_MS` and call ``now_ms()``; Python reads the
same clock with :func:`server_now_ms`. On a Redis Cluster each master has its
own clock: a time is compared only with times of its own slot (its script
reads it there, and :func:`server_now_ms` reads the clock of a key's master).

Scripts on a cluster: redis-py runs a registered script by ``EVALSHA``
routed to the master of its first key; every other key it touches shares
that key's hash tag. A master that never saw the script (a replica promoted
after a failover, a restarted node) answers ``NOSCRIPT``; the script is then
loaded on that master (:class:`_ClusterScript`; on a plain Redis, redis-py's
``AsyncScript`` does the same) and run again, so a script survives a
failover.

Settings read: none.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any, cast

from redis.asyncio.cluster import RedisCluster
from redis.commands.core import AsyncScript, Script
from redis.exceptions import NoScriptError

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    import redis
    import redis.asyncio as aredis

    # One call of a pipeline: a registered script with its keys and args, or
    # a plain command (its name and arguments).
    Call = tuple[Script | AsyncScript, Sequence[Any], Sequence[Any]] | tuple[Any, ...]

# The Redis server clock in epoch ms. ``replicate_commands`` lets a script
# write after reading the non-deterministic ``TIME`` on Redis < 5 (a no-op
# from Redis 5 on, where effects replication is the default).
LUA_NOW_MS = """
redis.replicate_commands()
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
"""

_REGISTERED: weakref.WeakKeyDictionary[
    aredis.Redis | redis.Redis, dict[str, AsyncScript | Script]
] = weakref.WeakKeyDictionary()


class _ClusterScript(AsyncScript):
    """A script on a cluster client that, on ``NOSCRIPT``, loads itself on
    the master of its first key only.

    redis-py's own ``AsyncScript`` sends ``SCRIPT LOAD`` to every master it
    knows; just after a failover that list still holds the dead master, and
    the load fails (seen: a ``ConnectionError``, and redis-py 8.1's
    ``AttributeError`` on a connection closed under it), so the page whose
    duplicate check ran the script was lost. The master that answered
    ``NOSCRIPT`` is alive: load it there.
    """

    async def __call__(
        self,
        keys: Sequence[Any] | None = None,
        args: Iterable[Any] | None = None,
        client: Any = None,
    ) -> Any:
        cluster = cast(
            "RedisCluster", client if client is not None else self.registered_client
        )
        keys, args = list(keys or []), list(args or [])
        for _attempt in range(2):
            try:
                return await cluster.evalsha(self.sha, len(keys), *keys, *args)
            except NoScriptError:
                # The slot may move between the load and the call: once more.
                node = cluster.get_node_from_key(keys[0]) if keys else None
                await cluster.execute_command(
                    "SCRIPT LOAD", self.script, target_nodes=node
                )
        return await cluster.evalsha(self.sha, len(keys), *keys, *args)


def script(client: aredis.Redis, source: str) -> AsyncScript:
    """``client.register_script(source)``, registered once per client (on a
    cluster client, a script that reloads itself on one master)."""
    registered = _REGISTERED.setdefault(client, {})
    found = registered.get(source)
    if found is None:
        found = registered[source] = (
            _ClusterScript(client, source)
            if isinstance(client, RedisCluster)
            else client.register_script(source)
        )
    return cast("AsyncScript", found)


def sync_script(client: redis.Redis, source: str) -> Script:
    """:func:`script` for a synchronous client (operator commands,
    benchmarks): the same registry."""
    registered = _REGISTERED.setdefault(client, {})
    found = registered.get(source)
    if found is None:
        found = registered[source] = client.register_script(source)
    return cast("Script", found)


async def server_now_ms(client: aredis.Redis, near: str | None = None) -> int:
    """The Redis server clock in epoch ms (the clock of every stored time);
    on a cluster, the clock of the master that holds key ``near`` (the one
    whose scripts stamped the times it is compared with)."""
    if near is not None and isinstance(client, RedisCluster):
        await client.initialize()  # the slot map (a no-op once read)
        node = client.get_node_from_key(near)
        sec, usec = await client.time(target_nodes=node)
    else:
        sec, usec = await client.time()
    return int(sec) * 1000 + int(usec) // 1000


def queue_calls(pipe: Any, calls: Sequence[Call]) -> None:
    """Add ``calls`` to a pipeline: a script as a raw ``EVALSHA`` (routed by
    its first key on a cluster), a command as it is.

    A script object passed to a pipeline makes redis-py send ``SCRIPT
    EXISTS`` first (one more round trip), and its cluster pipeline refuses
    it; see :func:`rerun_noscript` for a server that does not know it.
    """
    for call in calls:
        if isinstance(call[0], Script | AsyncScript):
            run, keys, args = call
            pipe.execute_command("EVALSHA", run.sha, len(keys), *keys, *args)
        else:
            pipe.execute_command(*call)


def noscript_calls(calls: Sequence[Call], results: list[Any]) -> list[int]:
    """The calls answered ``NOSCRIPT`` (a restarted server, a promoted
    replica): they did not run, and run again alone through their script
    object, which loads them; the other calls ran once, nothing twice.
    Any other error is raised."""
    again = []
    for i, result in enumerate(results):
        if isinstance(result, NoScriptError) and isinstance(
            calls[i][0], Script | AsyncScript
        ):
            again.append(i)
        elif isinstance(result, Exception):
            raise result
    return again


async def run_pipelined(client: aredis.Redis, calls: Sequence[Call]) -> list[Any]:
    """Run ``calls`` (scripts with their keys and args, or commands) in one
    pipelined round trip (one per master on a cluster); the results in
    order (:func:`queue_calls`, :func:`noscript_calls`)."""
    async with client.pipeline(transaction=False) as pipe:
        queue_calls(pipe, calls)
        results = list(await pipe.execute(raise_on_error=False))
    for i in noscript_calls(calls, results):
        run, keys, args = calls[i]
        results[i] = await run(keys=keys, args=args)
    return results


def run_pipelined_sync(client: redis.Redis, calls: Sequence[Call]) -> list[Any]:
    """:func:`run_pipelined` on a synchronous client."""
    with client.pipeline(transaction=False) as pipe:
        queue_calls(pipe, calls)
        results = list(pipe.execute(raise_on_error=False))
    for i in noscript_calls(calls, results):
        run, keys, args = calls[i]
        results[i] = run(keys=keys, args=args)
    return results
