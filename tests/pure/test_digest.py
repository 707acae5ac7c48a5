"""The idempotency digest: equal requests digest the same, secrets never count."""

from __future__ import annotations

import copy
import json

import pytest

from aguiadapter.protocol.digest import canonical_digest
from tests.support.envelopes import Mutation, Payload, envelope_0_1, envelope_client_1_0, iac, mutated


def with_secrets(**secrets: str) -> Payload:
    payload = envelope_0_1()
    iac(payload)["llmApiKey"] = secrets.get("llm", "sk-1")
    iac(payload)["alibabaCloud"] = {
        "accessKeyId": secrets.get("id", "LTAI-1"),
        "accessKeySecret": secrets.get("secret", "ak-1"),
        "securityToken": secrets.get("token", "sts-1"),
        "regionId": "cn-hangzhou",
    }
    return payload


def test_the_digest_is_a_sha256_hex() -> None:
    digest = canonical_digest(envelope_0_1())
    assert len(digest) == 64 and int(digest, 16) >= 0


def test_the_same_body_gives_the_same_digest_whatever_its_formatting() -> None:
    payload = envelope_client_1_0()
    reordered = json.loads(json.dumps(payload, sort_keys=True, indent=4))
    reordered_reversed = dict(reversed(list(payload.items())))
    assert canonical_digest(payload) == canonical_digest(reordered)
    assert canonical_digest(payload) == canonical_digest(reordered_reversed)


@pytest.mark.parametrize(
    "change",
    [
        lambda p: p.update(runId="run-other"),
        lambda p: p["messages"][0].update(content="创建一个 VPC 模板!"),
        lambda p: p.update(state={"x": 1}),
        lambda p: iac(p).update(cwd="/workspace/session-2"),
        lambda p: iac(p).update(runMode="pipeline"),
        lambda p: iac(p)["alibabaCloud"].update(regionId="cn-beijing"),
        lambda p: p["forwardedProps"].update(other=1),
        lambda p: iac(p).pop("llmApiKey"),  # whether a secret is sent still counts
    ],
)
def test_any_other_change_gives_another_digest(change: Mutation) -> None:
    assert canonical_digest(with_secrets()) != canonical_digest(mutated(with_secrets, change))


def test_secret_values_do_not_change_the_digest() -> None:
    assert canonical_digest(with_secrets()) == canonical_digest(
        with_secrets(llm="sk-2", id="LTAI-2", secret="ak-2", token="sts-2")
    )


def test_the_digest_leaves_the_payload_untouched() -> None:
    payload = with_secrets()
    before = copy.deepcopy(payload)
    canonical_digest(payload)
    assert payload == before


def test_the_digest_copes_with_secret_holders_of_the_wrong_shape() -> None:
    payload = envelope_0_1()
    iac(payload)["alibabaCloud"] = "not an object"
    canonical_digest(payload)
    payload["forwardedProps"] = None
    canonical_digest(payload)


def test_the_digest_of_a_known_body_is_stable() -> None:
    """The digest is stored with every run: a change of its recipe would turn
    retries of runs accepted before an upgrade into conflicts."""
    assert canonical_digest(with_secrets()) == "477d7e4c3e23093507819d7ed5bda9b08c1d5de08e7aa9252cda7f087e4ae5b7"
