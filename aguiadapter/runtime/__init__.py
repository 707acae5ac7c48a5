"""What is specific to the iac-code runtime behind the A2A wire.

:mod:`.envelope` and :mod:`.evidence` are pure (the runtime's input
envelopes, and what its task says about an answer); :mod:`.iac_code` is the
async edge that talks to the runtime (sending answers, looking at a task,
session restore, the pipeline state route); a run follows its task through
it (:mod:`aguiadapter.runs.follow`).

May import: errors, fastjson, logs (masking credentials), a2a, protocol.
"""
