"""The file store: one JSON file per thread, durable replacements through one writer thread, the
thread list's markers and retention.

May import: what :mod:`aguiadapter.store` may, and the store's own contract.
"""
