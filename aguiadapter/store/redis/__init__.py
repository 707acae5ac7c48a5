"""The Redis store, shared by replicas: records, claims, signals, run logs in streams, run slots
and the thread list (every key in docs/redis-layout.md).

May import: what :mod:`aguiadapter.store` may, the store's own contract, and the ``redis`` extra.
"""
