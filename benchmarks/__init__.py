"""Side-by-side benchmark of the adapter, ``iac-code agui`` and a minimal relay.

``python -m benchmarks`` starts the demo runtime in firehose mode and the
three targets as separate processes on loopback, runs every measure with the
targets interleaved, prints a table of medians and ratios and writes a JSON
file. See ``benchmarks/README.md``.
"""
