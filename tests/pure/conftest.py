"""The pure tests: rules fed events and records, answers read back; no socket,
no server, no process, no harness (``pytest tests/pure`` runs them alone;
tests/pure/test_import_graph.py checks what they import)."""
