"""A pool of A2A runtimes: which runtimes there are (settings), which one a new
thread goes to (placement), and how each one is doing (health probes).

Threads are pinned to a runtime by name (``ThreadRecord.runtime``); the pool
turns a name into that runtime's A2A client. Its logic lives here, apart from
the run and thread rules, so that those stay the same for a pool of one.

May import: errors, fastjson, version, a2a, logs, runtime, store, telemetry.
"""
