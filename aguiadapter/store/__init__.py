"""Persistence: the store contract (:mod:`.contract`), run logs, run slots, and the one factory
(:mod:`.factory`) that opens a backend: :mod:`.file` (the default) or :mod:`.redis` (replicas).

May import: errors, fastjson, logs (masked URLs, log fields), protocol (event framing), threads (the
record and the list's rules), tasks (stopping a background task).
"""
