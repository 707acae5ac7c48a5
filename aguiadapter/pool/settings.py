"""What a pool is made of: runtime specifications from the command line, the
environment or a TOML file (pure: no I/O beyond reading that file).

A runtime's *name* is what threads are pinned to; its URL may change under
the name (a re-read of the file), its threads keep going to it.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

import attrs

#: The runtime of ``--a2a-url`` alone, and of thread records written before pools.
DEFAULT_RUNTIME: Final = "default"
NAME = re.compile(r"[a-z0-9-]{1,32}")
#: The keys a ``[[runtime]]`` table may hold.
FILE_KEYS: Final = frozenset({"name", "url", "token_env", "config_dir", "capacity", "drain"})
#: Runtimes a pool holds at most (a typo in a generated file should not open thousands of clients).
MAX_RUNTIMES: Final = 64


@attrs.frozen
class RuntimeSpec:
    """One runtime of the pool, as configured."""

    name: str
    url: str
    #: This runtime's bearer token (``token_env``'s value); ``None``: the shared ``--a2a-token``.
    token: str | None = attrs.field(default=None, repr=False)
    #: Where the adapter reads this runtime's permission checkpoints and session files.
    config_dir: Path | None = None
    #: Most active runs at once on this runtime (``None``: no limit).
    capacity: int | None = None
    #: Takes no new thread; its threads keep working until they go idle.
    drain: bool = False

    def __attrs_post_init__(self) -> None:
        if not NAME.fullmatch(self.name):
            raise ValueError(f"a runtime name is 1-32 of a-z, 0-9 and -, not {self.name[:40]!r}")
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"runtime {self.name}: the URL must be an http:// or https:// URL, not {self.url[:200]!r}")
        if self.capacity is not None and (isinstance(self.capacity, bool) or self.capacity < 1):
            raise ValueError(f"runtime {self.name}: capacity must be a whole number of at least 1")


def check_pool(specs: Iterable[RuntimeSpec]) -> tuple[RuntimeSpec, ...]:
    """The specs, refused (``ValueError``) when a name repeats or there are too many."""
    pool = tuple(specs)
    seen: set[str] = set()
    for spec in pool:
        if spec.name in seen:
            raise ValueError(f"runtime {spec.name} is named twice")
        seen.add(spec.name)
    if len(pool) > MAX_RUNTIMES:
        raise ValueError(f"a pool holds at most {MAX_RUNTIMES} runtimes, not {len(pool)}")
    return pool


def parse_runtime(text: str) -> RuntimeSpec:
    """``NAME=URL`` (``--runtime``, one item of ``IAC_CODE_AGUI_RUNTIMES``)."""
    name, sep, url = text.strip().partition("=")
    if not sep:
        raise ValueError(f"a runtime is NAME=URL, not {text[:200]!r}")
    return RuntimeSpec(name.strip(), url.strip())


def parse_runtimes(value: str | None) -> tuple[RuntimeSpec, ...]:
    """``a=URL,b=URL`` (``IAC_CODE_AGUI_RUNTIMES``; empty items dropped)."""
    return check_pool(parse_runtime(item) for item in (value or "").split(",") if item.strip())


def load_runtimes_file(path: Path, env: Mapping[str, str] = os.environ) -> tuple[RuntimeSpec, ...]:
    """The ``[[runtime]]`` tables of a TOML file; ``ValueError`` with one line
    naming the file and what is wrong (a missing ``token_env`` variable too)."""
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not TOML: {exc}") from None
    try:
        return runtimes_of(document, env)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


def runtimes_of(document: Mapping[str, Any], env: Mapping[str, str]) -> tuple[RuntimeSpec, ...]:
    """The pool a parsed runtimes file describes."""
    unknown = sorted(set(document) - {"runtime"})
    if unknown:
        raise ValueError(f"unknown top-level key {unknown[0]!r} (the file holds [[runtime]] tables)")
    tables = document.get("runtime", [])
    if not isinstance(tables, list) or not tables or not all(isinstance(table, dict) for table in tables):
        raise ValueError("no [[runtime]] table")
    return check_pool(_spec_of(table, env) for table in tables)


def _spec_of(table: Mapping[str, Any], env: Mapping[str, str]) -> RuntimeSpec:
    extra = sorted(set(table) - FILE_KEYS)
    if extra:
        raise ValueError(f"[[runtime]] has an unknown key {extra[0]!r}")
    name, url = table.get("name"), table.get("url")
    if not isinstance(name, str) or not isinstance(url, str):
        raise ValueError("each [[runtime]] needs a name and a url (strings)")
    token = None
    token_env = table.get("token_env")
    if token_env is not None:
        if not isinstance(token_env, str) or not env.get(token_env):
            raise ValueError(f"runtime {name}: token_env names a variable that is not set: {str(token_env)[:64]!r}")
        token = env[token_env]
    config_dir = table.get("config_dir")
    if config_dir is not None and not isinstance(config_dir, str):
        raise ValueError(f"runtime {name}: config_dir must be a string")
    capacity = table.get("capacity")
    if capacity is not None and (not isinstance(capacity, int) or isinstance(capacity, bool)):
        raise ValueError(f"runtime {name}: capacity must be a whole number")
    drain = table.get("drain", False)
    if not isinstance(drain, bool):
        raise ValueError(f"runtime {name}: drain must be true or false")
    return RuntimeSpec(name, url, token=token, config_dir=None if config_dir is None else Path(config_dir).expanduser(),
                       capacity=capacity, drain=drain)
