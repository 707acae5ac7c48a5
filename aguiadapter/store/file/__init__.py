"""The file store: one JSON file per thread, durable replacements through one writer thread (made
on the event loop when nothing is synced), the thread list's markers and retention.

May import: what :mod:`aguiadapter.store` may, and the store's own contract.
"""
