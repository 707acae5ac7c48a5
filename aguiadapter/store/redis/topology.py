"""Where the Redis store's primary is: one server, or a service behind Sentinel.

``redis://`` (``rediss://``, ``unix://``) names one server, handed to
redis-py as it is. ``redis+sentinel://[:password@]host:port[,host:port...]/SERVICE[/db]``
names the sentinels that know the primary of ``SERVICE``: the client asks
them for the primary at each new connection (redis-py's asyncio
``Sentinel``); a command that meets a demoted primary (``READONLY``, or a
blocked ``XREAD`` woken by the demotion) drops its connection and fails,
and the next one connects to the new primary. The password in the URL is
the servers'; ``?sentinel_password=`` is the sentinels' own and ``?ssl=yes``
puts both on TLS.

``redis+cluster://[:password@]host:port[,host:port...]/`` names a few nodes
of a Redis Cluster (redis-py's asyncio ``RedisCluster`` learns the rest and
follows ``MOVED``/``ASK`` when slots move); every script keeps to one slot
(:mod:`.layout`). ``?ssl=yes`` puts it on TLS.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote, urlsplit

import attrs
import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import ExponentialBackoff

SENTINEL_SCHEME = "redis+sentinel"
CLUSTER_SCHEME = "redis+cluster"
#: Options of a Sentinel URL that are the connection's, not the store's.
SENTINEL_OPTIONS = frozenset({"sentinel_password", "ssl"})
#: Options of a Cluster URL that are the connection's, not the store's.
CLUSTER_OPTIONS = frozenset({"ssl"})
_TRUE = frozenset({"1", "yes", "true", "on"})
_FALSE = frozenset({"0", "no", "false", "off", ""})


#: A client of one primary (plain or found through Sentinel) or of a whole cluster.
Client = aioredis.Redis | RedisCluster


class TopologyError(ValueError):
    """The URL does not name a usable topology (its text says why)."""


@attrs.frozen
class SentinelTarget:
    """A service behind sentinels, parsed from its URL."""

    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int = 0
    username: str | None = attrs.field(default=None, repr=False)
    password: str | None = attrs.field(default=None, repr=False)
    sentinel_password: str | None = attrs.field(default=None, repr=False)
    ssl: bool = False

    def describe(self) -> str:
        """What the banner and /health show (no password)."""
        hosts = ",".join(f"{host}:{port}" for host, port in self.sentinels)
        return f"{SENTINEL_SCHEME}://{hosts}/{self.service}/{self.db}"


def parse_sentinel_url(url: str, options: dict[str, str]) -> SentinelTarget:
    """The target of a ``redis+sentinel://`` URL; ``options``: its query options of
    :data:`SENTINEL_OPTIONS` (the store's own were taken out before)."""
    parts = urlsplit(url)
    userinfo, _, hosts = parts.netloc.rpartition("@")
    username, _, password = userinfo.partition(":") if userinfo else ("", "", "")
    sentinels = tuple(_host_port(item) for item in hosts.split(",") if item)
    if not sentinels:
        raise TopologyError("a Sentinel URL names at least one sentinel: redis+sentinel://HOST:PORT[,HOST:PORT...]/SERVICE")
    path = [unquote(piece) for piece in parts.path.split("/") if piece]
    if not path or len(path) > 2:
        raise TopologyError("a Sentinel URL ends with /SERVICE or /SERVICE/DB (the name the sentinels monitor)")
    try:
        db = int(path[1]) if len(path) == 2 else 0
    except ValueError:
        raise TopologyError(f"the database of a Sentinel URL is a number, not {path[1][:50]!r}") from None
    if db < 0:
        raise TopologyError("the database of a Sentinel URL is 0 or more")
    return SentinelTarget(
        sentinels, path[0], db, unquote(username) or None, unquote(password) or None,
        options.get("sentinel_password") or None, _flag("ssl", options.get("ssl", "no")),
    )


@attrs.frozen
class ClusterTarget:
    """A few nodes of a Redis Cluster, parsed from its URL."""

    nodes: tuple[tuple[str, int], ...]
    username: str | None = attrs.field(default=None, repr=False)
    password: str | None = attrs.field(default=None, repr=False)
    ssl: bool = False


def parse_cluster_url(url: str, options: dict[str, str]) -> ClusterTarget:
    """The target of a ``redis+cluster://`` URL (its path is ``/``: a cluster has one database)."""
    parts = urlsplit(url)
    userinfo, _, hosts = parts.netloc.rpartition("@")
    username, _, password = userinfo.partition(":") if userinfo else ("", "", "")
    nodes = tuple(_host_port(item, 6379) for item in hosts.split(",") if item)
    if not nodes:
        raise TopologyError("a Cluster URL names at least one node: redis+cluster://HOST:PORT[,HOST:PORT...]/")
    if parts.path.strip("/"):
        raise TopologyError("a Cluster URL ends with / (a Redis Cluster has one database)")
    return ClusterTarget(nodes, unquote(username) or None, unquote(password) or None,
                         _flag("ssl", options.get("ssl", "no")))


def cluster_client(target: ClusterTarget) -> RedisCluster:
    """A client of the whole cluster, starting from the URL's nodes."""
    return RedisCluster(
        startup_nodes=[ClusterNode(host, port) for host, port in target.nodes], username=target.username,
        password=target.password, ssl=target.ssl, socket_connect_timeout=1.0, socket_timeout=2.0,
        cluster_error_retry_attempts=3,
    )


def sentinel_client(target: SentinelTarget) -> tuple[aioredis.Redis, Sentinel]:
    """A client of the current primary (found anew at each connection), and
    the :class:`Sentinel` that finds it (the caller closes both)."""
    timeouts: dict[str, Any] = {"socket_connect_timeout": 1.0, "socket_timeout": 2.0}
    sentinel_kwargs: dict[str, Any] = {**timeouts, "ssl": target.ssl}
    if target.sentinel_password:
        sentinel_kwargs["password"] = target.sentinel_password
    sentinel = Sentinel(
        target.sentinels, sentinel_kwargs=sentinel_kwargs, **timeouts, ssl=target.ssl,
        username=target.username, password=target.password, db=target.db,
    )
    retry = Retry(ExponentialBackoff(cap=0.2, base=0.05), retries=1)
    client = sentinel.master_for(target.service, retry=retry, health_check_interval=15)
    return client, sentinel


async def close_sentinel(sentinel: Sentinel) -> None:
    """Close the connections to the sentinels themselves."""
    for connection in sentinel.sentinels:
        await connection.aclose()


def _host_port(item: str, default_port: int = 26379) -> tuple[str, int]:
    host, colon, port = item.strip().rpartition(":")
    if not colon or not host:
        return item.strip(), default_port
    try:
        number = int(port)
    except ValueError:
        raise TopologyError(f"bad address {item[:100]!r}: the port is a number") from None
    if not 0 < number < 65536:
        raise TopologyError(f"bad address {item[:100]!r}: the port is 1-65535")
    return host.strip("[]"), number


def _flag(name: str, value: str) -> bool:
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    raise TopologyError(f"{name} is yes or no, not {value[:20]!r}")
