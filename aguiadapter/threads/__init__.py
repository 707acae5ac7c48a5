"""The thread rules, pure: the record, the machine, admission, access, the list's rules, the diagram.

May import: errors, fastjson, protocol, runtime (its pure rules), translate (pipeline state); no I/O
(no asyncio, aiofiles, aiohttp, redis, threading, concurrent, socket): events and time in, a new record
and events out, tested without a loop or a socket.
"""
