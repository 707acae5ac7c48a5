"""A2A to AG-UI, pure: the run translator (:mod:`.mapper`), open spans, pipeline state.

May import: errors, fastjson, a2a (wire vocabulary), protocol, runtime (envelopes, transcripts).
"""
