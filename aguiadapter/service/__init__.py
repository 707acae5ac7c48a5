"""The process: admission, recovery, re-attach, expiry timers, leases, admission limits, and the
conversation reader with its cache.

May import: errors, fastjson, i18n, logs, telemetry, a2a, protocol, runtime, threads, store, runs, pool, tasks.
"""
