"""The operator command: ``python -m aguiadapter threads list|show|cancel|delete``.

:mod:`.operations` does the work through the thread store and its claims,
as one more replica would; :mod:`.command` parses the command line (the
server's own options for the settings) and prints tables or JSON.

May import: errors, fastjson, config, cli_help, logs, a2a, pool, threads, store, service, web (the run-log
bounds the server uses).
"""
