"""Which wire forms the server speaks where AG-UI 1.0 and the protocol
reference of ``iac-code agui`` differ.

The default is AG-UI 1.0 to the letter. ``--compat iac-code-agui`` keeps the
reference's forms for front ends written against it. The two differ in two
places only, and both are said here so that no other module compares
profile names:

- a run stopped on purpose (the cancel route, a ``cancelled`` answer that
  ends the turn, shutdown, a client that left): 1.0 closes it with
  ``RUN_FINISHED`` and ``outcome: {"type": "cancelled"}``
  (``events/lifecycle.mdx#cancelled-runs``); the reference ends it with
  ``RUN_ERROR`` code ``CANCELLED``;
- a content part the adapter cannot use (an image by URL or provider file
  handle, a document, audio, video): 1.0 skips it and the run goes on
  (``basic/run-input.mdx#messages``); the reference refuses the request
  with ``INVALID_INPUT``.
"""

from __future__ import annotations

import enum
from typing import Final


class Profile(enum.Enum):
    """The wire profile a server serves."""

    #: AG-UI 1.0 as released (the default).
    AGUI_1_0 = "ag-ui-1.0"
    #: The protocol reference of ``iac-code agui`` (``--compat iac-code-agui``).
    IAC_CODE_AGUI = "iac-code-agui"

    @property
    def stops_as_errors(self) -> bool:
        """A run stopped on purpose ends ``RUN_ERROR CANCELLED`` (else ``RUN_FINISHED`` cancelled)."""
        return self is Profile.IAC_CODE_AGUI

    @property
    def refuses_unusable_parts(self) -> bool:
        """A content part the adapter cannot use refuses the request (else it is skipped)."""
        return self is Profile.IAC_CODE_AGUI


DEFAULT_PROFILE: Final = Profile.AGUI_1_0

#: What ``--compat`` and ``IAC_CODE_AGUI_COMPAT`` accept, by the profile they choose.
COMPAT_CHOICES: Final = tuple(profile.value for profile in Profile)


def parse_profile(text: str | Profile | None) -> Profile:
    """A profile from its name (``iac-code-agui``, ``ag-ui-1.0``; empty or
    ``None``: the default); ``ValueError`` for anything else."""
    if isinstance(text, Profile):
        return text
    raw = (text or "").strip().lower()
    if not raw:
        return DEFAULT_PROFILE
    for profile in Profile:
        if raw == profile.value:
            return profile
    raise ValueError(f"not a compatibility profile: {text!r} (choose one of {', '.join(COMPAT_CHOICES)})")
