"""How a pool of runtimes is configured: ``--runtime NAME=URL``, the
environment, a TOML file; what is refused, in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from aguiadapter.config import ENV_RUNTIMES, Config
from aguiadapter.pool.settings import DEFAULT_RUNTIME, RuntimeSpec, load_runtimes_file, parse_runtime, parse_runtimes


def test_a_runtime_is_name_equals_url() -> None:
    assert parse_runtime("east-1=http://10.0.0.5:8080/") == RuntimeSpec("east-1", "http://10.0.0.5:8080/")


@pytest.mark.parametrize("text", ["Upper=http://h/", "a_b=http://h/", "=http://h/", "a" * 33 + "=http://h/",
                                  "a=ftp://h/", "a=http://", "no-equals-sign"])
def test_a_bad_runtime_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_runtime(text)


def test_the_environment_names_a_pool_and_a_name_twice_is_refused() -> None:
    assert [spec.name for spec in parse_runtimes("a=http://h:1/, b=http://h:2/,")] == ["a", "b"]
    with pytest.raises(ValueError, match="named twice"):
        parse_runtimes("a=http://h:1/,a=http://h:2/")
    config = Config.from_env({ENV_RUNTIMES: "a=http://h:1/,b=http://h:2/"}, state_dir=Path("/tmp/x"))
    assert [spec.name for spec in config.pool_specs()] == ["a", "b"] and config.runtime_kind == "a2a"
    with pytest.raises(ValueError, match=ENV_RUNTIMES):
        Config.from_env({ENV_RUNTIMES: "a=nowhere"}, state_dir=Path("/tmp/x"))


def test_an_a2a_url_alone_is_a_pool_of_one_named_default(tmp_path: Path) -> None:
    config = Config(state_dir=tmp_path, a2a_url="http://h:1/", runtime_config_dir=tmp_path / "cfg")
    assert config.pool_specs() == (RuntimeSpec(DEFAULT_RUNTIME, "http://h:1/", config_dir=tmp_path / "cfg"),)


def test_an_a2a_url_beside_a_pool_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="exclude each other"):
        Config(state_dir=tmp_path, a2a_url="http://h:1/", runtimes=(RuntimeSpec("a", "http://h:2/"),))


def test_a_runtimes_file_names_tokens_folders_capacity_and_drain(tmp_path: Path) -> None:
    path = tmp_path / "runtimes.toml"
    path.write_text(
        '[[runtime]]\nname = "a"\nurl = "http://h:1/"\ntoken_env = "A_TOKEN"\nconfig_dir = "/srv/a"\n'
        'capacity = 8\n\n[[runtime]]\nname = "b"\nurl = "http://h:2/"\ndrain = true\n', encoding="utf-8")
    first, second = load_runtimes_file(path, {"A_TOKEN": "tok"})
    assert first == RuntimeSpec("a", "http://h:1/", token="tok", config_dir=Path("/srv/a"), capacity=8)
    assert second == RuntimeSpec("b", "http://h:2/", drain=True)
    assert "tok" not in repr(first)


@pytest.mark.parametrize(("text", "said"), [
    ("[[runtime]]\nname = \"a\"\n", "needs a name and a url"),
    ("[[runtime]]\nname = \"a\"\nurl = \"http://h/\"\ncolour = 1\n", "unknown key 'colour'"),
    ("[[runtime]]\nname = \"a\"\nurl = \"http://h/\"\ntoken_env = \"UNSET\"\n", "not set"),
    ("[[runtime]]\nname = \"a\"\nurl = \"http://h/\"\ncapacity = 0\n", "capacity"),
    ("[[runtime]]\nname = \"a\"\nurl = \"http://h/\"\ndrain = \"yes\"\n", "drain"),
    ("[server]\nx = 1\n", "unknown top-level key"),
    ("[[runtime]\n", "not TOML"),
    ("", "no [[runtime]] table"),
])
def test_a_bad_runtimes_file_is_one_line_naming_the_file(tmp_path: Path, text: str, said: str) -> None:
    path = tmp_path / "runtimes.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError) as caught:
        load_runtimes_file(path, {})
    message = str(caught.value)
    assert said in message and message.startswith(str(path)) and "\n" not in message
