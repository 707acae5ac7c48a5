"""One run on one claimed thread: the shell (load, apply, save, emit), and the driver with a piece per
phase: :mod:`.opening`, :mod:`.relaying` (the runtime's stream: :mod:`.follow`), :mod:`.grace`, :mod:`.closing`.

May import: errors, fastjson, i18n, logs, telemetry, a2a, protocol, runtime, translate, threads, store.
The process's timers and leases reach a run as ports (:class:`.shell.Deadlines`, :class:`.shell.Leases`).
"""
