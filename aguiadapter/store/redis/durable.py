"""Saves that wait for replicas (``?min_replicas=N``), and their undo.

Redis replicates asynchronously: a primary that dies can take its last
writes with it. With ``min_replicas=N`` every save of a record (a run
admitted, a task bound, an interrupt raised, an answer taken, a run's end:
each is a save) is followed, on the same connection, by ``WAIT N
wait_timeout_ms``. When fewer replicas acknowledge it in time the save
fails as any failed save does (``PersistenceError``: the run ends with
``RUN_ERROR STATE_PERSISTENCE_FAILED``), and the record is put back as it
was: the save script kept the previous hash in ``undo:{:<T>}`` (the
thread's slot, a short TTL), and :data:`UNDO` restores it unless another
write came since. The undo is itself a write the replicas may not have yet;
if the primary dies before they get either, a promoted replica holds the
record as it was before the save, or (when the save reached it late) as
the save left it, which the evidence rules then judge like a resume whose
outcome is unknown.
"""

from __future__ import annotations

#: How long the previous hash is kept for an undo (ms): far beyond any WAIT.
UNDO_TTL_MS = 60_000

# Appended to the save script when replicas are awaited. KEYS[3]: the undo
# key. Keeps the hash as it was (or that there was none), with its TTL.
KEEP_UNDO = """
if KEYS[3] then
  if redis.call('EXISTS', KEYS[1]) == 1 then
    redis.call('COPY', KEYS[1], KEYS[3], 'REPLACE')
    redis.call('HSET', KEYS[3], '_pttl', redis.call('PTTL', KEYS[1]))
  else
    redis.call('DEL', KEYS[3])
    redis.call('HSET', KEYS[3], '_absent', '1')
  end
  redis.call('PEXPIRE', KEYS[3], ARGV[7])
end
"""

# KEYS: record, undo. ARGV: the version and record JSON of the save to undo.
# 1: put back; 0: the record changed since (or no undo): left as it is.
UNDO = """
if redis.call('HGET', KEYS[1], 'version') ~= ARGV[1] or redis.call('HGET', KEYS[1], 'record') ~= ARGV[2] then
  return 0
end
if redis.call('EXISTS', KEYS[2]) == 0 then return 0 end
if redis.call('HEXISTS', KEYS[2], '_absent') == 1 then
  redis.call('DEL', KEYS[1], KEYS[2])
  return 1
end
local pttl = tonumber(redis.call('HGET', KEYS[2], '_pttl'))
redis.call('COPY', KEYS[2], KEYS[1], 'REPLACE')
redis.call('HDEL', KEYS[1], '_pttl')
if pttl and pttl > 0 then redis.call('PEXPIRE', KEYS[1], pttl) else redis.call('PERSIST', KEYS[1]) end
redis.call('DEL', KEYS[2])
return 1
"""


def wait_refusal(acked: int, wanted: int, timeout_ms: int) -> str:
    """The text of a save that too few replicas acknowledged."""
    return (f"only {acked} of the {wanted} replicas required (min_replicas) acknowledged the write "
            f"within {timeout_ms} ms; the record was put back as it was")
