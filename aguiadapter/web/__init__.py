"""The aiohttp edge: the app factory, routes and handlers, the SSE writer, HTTP errors, guards,
identity (JWT, JWKS) and the connect snapshot.

May import: every other part of the package; nothing below imports it.
"""
