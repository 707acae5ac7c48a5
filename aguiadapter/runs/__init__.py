"""One run on one claimed thread: the shell (load, apply, save, emit), the driver, the relay of the
runtime's stream (:mod:`.follow`), and how a run gone wrong ends (:mod:`.endings`).

May import: errors, fastjson, i18n, logs, telemetry, a2a, protocol, runtime, translate, threads, store.
The process's timers and leases reach a run as ports (:class:`.shell.Deadlines`, :class:`.shell.Leases`).
"""
