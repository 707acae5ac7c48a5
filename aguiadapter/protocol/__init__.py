"""The AG-UI side, pure: strict input models and their schema, content parts, events, interrupts,
resume answers, digests, refusals.

May import: errors, fastjson.
"""
