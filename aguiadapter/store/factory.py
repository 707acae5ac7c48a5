"""Open the store a deployment names: the one place that picks a backend.

``--store`` empty means the file store under ``--state-dir``; a
``redis://`` (or ``rediss://``) URL means the Redis store, which needs the
``redis`` extra. Callers receive a :class:`~.contract.ThreadStore` and ask it
what it is (``kind``, ``shared``), never which class it is.
"""

from __future__ import annotations

from pathlib import Path

from .contract import ThreadStore


def open_store(
    url: str | None, *, state_dir: Path, retention_days: float = 30.0, durability: str = "fsync"
) -> ThreadStore:
    """The file store (writing with ``durability``), or the Redis store for ``url``."""
    if not url:
        from .file.store import FileThreadStore

        return FileThreadStore(state_dir, retention_days=retention_days, durability=durability)
    try:
        from .redis.store import store_from_url
    except ImportError as exc:
        raise RuntimeError("--store redis://... needs the redis extra: pip install 'aguiadapter[redis]'") from exc
    return store_from_url(url)
