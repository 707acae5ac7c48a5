"""A run's id looked up in its thread's run history by the claim that admits it.

Admission judges a new run id against every earlier run of the thread: one
missing from the record's window (:mod:`aguiadapter.store.run_history`) is
looked up in the ``run:<id>`` fields of the record's hash. Asked on its own,
that look-up is one more round trip on every run of an old thread, which a
new thread never pays. So the claim script, which every run sends anyway,
reads the field (and the record's ``version``) in the same step as it takes
the claim, and the store answers the look-up from what it read.

What was read is only used while it describes the record that is judged:

- under the claim no other writer can save the thread (every save is fenced
  by its claim's token), so the hash stays as the claim found it until this
  process saves; a record loaded after the claim with another ``version``
  (the lease lapsed and another replica saved, or this process saved)
  drops what was read, and the look-up asks Redis as before;
- a record loaded before the claim is older than what was read, and the
  fields only grow while the version does (runs move out of the record, and
  an undo puts back the record that still held them), so an id found there
  stays found and one missing there was in that older record's window;
- what was read is used once, and forgotten when the claim is released.

A refused claim reads nothing: a busy thread's refusal (``THREAD_BUSY``, or
a used run id) still asks Redis on its own, as it did.
"""

from __future__ import annotations

import attrs

from ...threads.record import ThreadRecord

#: More entries than this (claims never released: cannot happen short of a
#: bug) and all are forgotten; forgetting costs a round trip, never a rule.
_MOST = 10_000


@attrs.frozen
class ReadAtClaim:
    """What a successful claim read of its thread's hash."""

    #: The run id the claim was taken for.
    run_id: str
    #: The claim's token (a release of another claim forgets nothing).
    token: int
    #: The record's ``version`` at the claim (``None``: no record).
    version: int | None
    #: The ``run:<run_id>`` field (``None``: the id is not in the history).
    entry: bytes | str | None


class ClaimReads:
    """What each claim this process holds read, by thread key."""

    def __init__(self) -> None:
        self._by_key: dict[str, ReadAtClaim] = {}

    def keep(self, key: str, read: ReadAtClaim) -> None:
        """A claim of ``key`` was taken and read this."""
        if len(self._by_key) >= _MOST:
            self._by_key.clear()
        self._by_key[key] = read

    def loaded(self, key: str, record: ThreadRecord | None) -> None:
        """A record of ``key`` was read (``None``: none, or not parsed): what
        the claim read no longer describes it unless its version is the same."""
        read = self._by_key.get(key)
        if read is not None and (record is None or record.version != read.version):
            del self._by_key[key]

    def take(self, key: str, run_id: str) -> ReadAtClaim | None:
        """What the claim of ``key`` read for ``run_id`` (used once; ``None``: ask Redis)."""
        read = self._by_key.get(key)
        if read is None or read.run_id != run_id:
            return None
        del self._by_key[key]
        return read

    def released(self, key: str, token: int) -> None:
        """The claim with ``token`` was given back."""
        read = self._by_key.get(key)
        if read is not None and read.token == token:
            del self._by_key[key]


def version_of(value: bytes | str | None) -> int | None:
    """The ``version`` field as the claim script returned it."""
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return None
