"""The embedded demo runtime: a real A2A 1.0 server on loopback with scripted answers and pipelines.

May import: errors, fastjson, version, a2a.
"""
