"""The ``safeSummary`` the adapter writes for a permission it rebuilt from
the runtime's checkpoint is the one the real iac-code 0.16.0 writes for the
same tool call (``aguiadapter/runtime/tool_summary.py``): long commands,
file contents, secret fields and nested inputs alike. Credential-shaped text
is masked by each in its own words, so those calls are compared apart.
"""

from __future__ import annotations

from typing import Any

import pytest
from iac_code.a2a.input_required import permission_safe_summary
from iac_code.types.stream_events import PermissionRequestEvent

from aguiadapter.runtime.tool_summary import safe_summary

CALLS: list[tuple[str, dict[str, Any]]] = [
    ("bash", {"command": "cd /srv && " + "echo step && " * 25 + "aliyun ecs DeleteInstance --InstanceId i-1",
              "description": "clean up"}),
    ("bash", {"command": "echo A >> log.txt", "description": "append", "timeout": 30}),
    ("bash", {"cmd": "x" * 200, "password": "hunter22"}),
    ("write_file", {"path": "a.txt", "content": "line\n" * 1000}),
    ("edit_file", {"file_path": "a.txt", "old_string": "a", "new_string": "b", "replace_all": True}),
    ("aliyun_api", {"product": "ecs", "action": "DeleteInstance",
                    "params": {"InstanceId": "i-1", "AccessKeySecret": "zzz", "nested": {"a": [1, 2], "b": None}}}),
    ("glob", {"pattern": "**/*.py", "path": "/" + "d/" * 100}),
    ("mcp_tool", {f"field{n}": n for n in range(20)}),
]


def runtime_summary(tool_name: str, tool_input: dict[str, Any]) -> str:
    request = PermissionRequestEvent(tool_name=tool_name, tool_input=tool_input, tool_use_id="call-1")
    return str(permission_safe_summary(request))


@pytest.mark.parametrize(("tool_name", "tool_input"), CALLS, ids=[f"{name}-{n}" for n, (name, _) in enumerate(CALLS)])
def test_the_rebuilt_summary_is_the_runtimes(tool_name: str, tool_input: dict[str, Any]) -> None:
    assert safe_summary(tool_name, tool_input) == runtime_summary(tool_name, tool_input)


def test_a_credential_in_a_command_is_masked_by_both() -> None:
    call = {"command": "export API_KEY=sk-abcdefgh12345678 && deploy"}
    for summary in (safe_summary("bash", call), runtime_summary("bash", call)):
        assert "abcdefgh12345678" not in summary and summary.endswith(" && deploy\"}")
