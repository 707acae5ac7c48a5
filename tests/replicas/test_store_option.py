"""``--store`` / ``IAC_CODE_AGUI_STORE``: which store an adapter uses."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from aguiadapter.cli import build_parser, config_from_args
from aguiadapter.store.redis import store as rs
from aguiadapter.store.file.store import FileThreadStore

from .redis_server import RedisServer, free_port
from .replicas import ENV_STORE, REPO


def parse(*argv: str, env: dict[str, str] | None = None) -> Any:
    env = env or {}
    return config_from_args(build_parser(env).parse_args(list(argv)), env)


def test_the_file_store_stays_the_default() -> None:
    assert parse().store_url is None


def test_the_option_and_the_environment_name_the_store() -> None:
    assert parse(env={ENV_STORE: "redis://127.0.0.1:6390/1"}).store_url == "redis://127.0.0.1:6390/1"
    assert parse("--store", "redis://h:1/2", env={ENV_STORE: "redis://other:1/0"}).store_url == "redis://h:1/2"


def test_the_config_never_shows_the_store_password() -> None:
    assert "secret" not in repr(parse("--store", "redis://:secret@h:1/0"))


def test_one_factory_opens_the_store_a_url_names(tmp_path: Path) -> None:
    from aguiadapter.store.factory import open_store

    assert isinstance(open_store(None, state_dir=tmp_path), FileThreadStore)
    store = open_store("redis://127.0.0.1:6390/0?prefix=x:", state_dir=tmp_path)
    assert isinstance(store, rs.RedisThreadStore) and store.keys.prefix == "x:"


def test_a_replica_without_its_redis_does_not_start(tmp_path: Path) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    result = subprocess.run(
        [sys.executable, "-m", "aguiadapter", "--demo", "--port", "0", "--state-dir", str(tmp_path), "--store", url],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
    )
    assert result.returncode == 2, result.stderr
    assert f"aguiadapter: cannot start: cannot reach the redis store at {url}" in result.stderr


async def test_the_banner_names_the_store(tmp_path: Path, redis_server: RedisServer) -> None:
    from .replicas import Replica

    replica = await Replica("banner", tmp_path, redis_server.url, "http://127.0.0.1:9/").start()
    try:
        assert f"state:   {redis_server.url} (prefix aguiadapter:)" in replica.log()
    finally:
        await replica.stop()
