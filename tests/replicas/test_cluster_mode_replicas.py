"""The replica suite's main scenarios on a Redis in cluster mode.

The same scenario functions as on a plain Redis, with ``redis_server``
replaced by a ``redis-server --cluster-enabled yes`` that serves every slot
itself (:class:`~.redis_server.ClusterNode`): such a server refuses a
script or transaction whose keys span slots (``CROSSSLOT``), so a key
layout that would break on a Redis Cluster breaks these runs: a turn on A
then B, an interrupt raised on A answered on B, cancel from B of a run
streaming on A, the thread list, retention and the run limits.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from .redis_server import ClusterNode
from .test_history_replicas import test_any_replica_serves_the_same_history_of_a_thread as test_history
from .test_limits import test_the_limits_count_every_replica_together as test_limits
from .test_redis_store import make_store, raw
from .test_redis_store import test_retention_applies_to_idle_and_terminal_records_only as test_retention
from .test_replicas import (
    test_an_interrupt_raised_on_one_replica_is_resumed_on_another as test_interrupt_on_a_answered_on_b,
)
from .test_replicas import test_cancel_through_a_replica_that_does_not_hold_the_stream as test_cancel_from_b
from .test_thread_list_replicas import (
    test_a_thread_made_on_one_replica_is_listed_on_the_other_to_its_user_only as test_thread_list,
)

__all__ = [
    "make_store", "raw", "test_cancel_from_b", "test_history", "test_interrupt_on_a_answered_on_b", "test_limits", "test_retention",
    "test_thread_list",
]


@pytest.fixture
async def redis_server(tmp_path: Path) -> AsyncIterator[ClusterNode]:
    """Replaces the plain server of the imported scenarios."""
    node = ClusterNode(tmp_path / "cluster-node")
    await node.start()
    try:
        yield node
    finally:
        await node.stop()
