"""Log setup: one line per event, as text (``key=value``) or JSON.

A line with structured fields is logged by :func:`log_fields`: its message
carries them as ``key=value`` (so they show under any formatter, a host's
``logging.basicConfig`` included) and ``extra={"fields": {...}}`` carries
them for :class:`JsonFormatter`, which writes them as keys. A filter masks
anything shaped like a credential before a line is written, as a second
line of defence: the adapter itself never logs request bodies or headers.
A record stays one line whatever the values it quotes hold: a thread id may
be any string, newlines included, and must not forge a line of its own.
When tracing is on, each line also carries the ``trace_id`` and ``span_id``
current when it was logged (set by :class:`aguiadapter.telemetry.tracing.TraceIdsFilter`).
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar, Token
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

_SECRET_PATTERNS = (
    re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]+"),
    re.compile(
        r"(?i)((?:api[_-]?key|access[_-]?key[_-]?secret|security[_-]?token|token|secret|password|passwd)"
        r"[\"']?\s*[:=]\s*[\"']?)[^\s\"',}&]+"
    ),
    re.compile(r"\b(sk-)[A-Za-z0-9_-]{8,}"),
    # The user info of a URL: scheme://user:password@host.
    re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)[^/\s@]+@"),
)
#: Query parameters of a URL whose values are credentials.
_SECRET_PARAMETER = re.compile(r"(?i)key|token|secret|passw|pwd|auth|sig|credential|session")


def mask_url(url: str) -> str:
    """``url`` with its user info and secret-looking query values masked (banners, ``/health``, logs)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return redact(url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = "***@" + netloc.rsplit("@", 1)[1]
    query = "&".join(
        f"{name}={'***' if _SECRET_PARAMETER.search(name) else value}" if sep else name
        for name, sep, value in (item.partition("=") for item in parts.query.split("&") if item)
    )
    return urlunsplit(parts._replace(netloc=netloc, query=query))


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


_SHORT_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def one_line(text: str) -> str:
    """``text`` with its control and line-breaking characters escaped.

    ``\\n``, ``\\r``, ``\\t``, else ``\\uXXXX``: escapes JSON reads too, so a
    JSON line stays valid JSON.
    """
    return _CONTROL.sub(lambda match: _SHORT_ESCAPES.get(match.group(), f"\\u{ord(match.group()):04x}"), text)


#: The secret values of the request being served (its ``llmApiKey``...), masked
#: wherever they appear in a line logged while it is served, runtime quotes included.
_REQUEST_SECRETS: ContextVar[tuple[str, ...]] = ContextVar("aguiadapter_request_secrets", default=())
#: Shorter values are not masked: they would mask ordinary words.
MIN_SECRET_LENGTH = 6


@contextmanager
def secrets_hidden(values: Iterable[str | None]) -> Iterator[None]:
    """Mask these values in every line logged inside (and by the tasks started inside)."""
    token = _REQUEST_SECRETS.set(_REQUEST_SECRETS.get() + _maskable(values))
    try:
        yield
    finally:
        _REQUEST_SECRETS.reset(token)


def _maskable(values: Iterable[str | None]) -> tuple[str, ...]:
    """The values long enough to mask, longest first (a key that contains another is masked whole)."""
    return tuple(sorted({value for value in values if value and len(value) >= MIN_SECRET_LENGTH}, key=len,
                        reverse=True))


class SecretsHidden:
    """:func:`secrets_hidden` for values known only inside the block: ``with
    SecretsHidden() as hidden: ... hidden.hide(values)``. One slot, where an
    ``ExitStack`` around :func:`secrets_hidden` keeps a queue, a generator and
    its frame for as long as the block lasts (a stream's whole life)."""

    __slots__ = ("_token",)

    def __init__(self) -> None:
        self._token: Token[tuple[str, ...]] | None = None

    def __enter__(self) -> SecretsHidden:
        return self

    def hide(self, values: Iterable[str | None]) -> None:
        """Mask ``values`` until the block ends (once per block)."""
        self._token = _REQUEST_SECRETS.set(_REQUEST_SECRETS.get() + _maskable(values))

    def __exit__(self, *exc: object) -> None:
        token, self._token = self._token, None
        if token is not None:
            _REQUEST_SECRETS.reset(token)


class KnownSecrets:
    """The secret values this process was given, masked in every line it
    logs whatever context logs it: a runtime that quotes a key during an
    interrupt's expiry, an adoption, or a later turn of the thread that sent
    it is no longer inside that request's :func:`secrets_hidden`.

    Bounded: the most recently given :attr:`max_values` values of at most
    :attr:`max_chars` characters in all are kept (given again, a value is
    kept longer). Looking for them costs one dictionary look-up per
    character of the text, however many are kept: values are indexed by
    their first :data:`MIN_KNOWN_SECRET_LENGTH` characters. Only in memory.
    """

    def __init__(self, *, max_values: int = 4096, max_chars: int = 4 * 1024 * 1024) -> None:
        self.max_values = max_values
        self.max_chars = max_chars
        self._kept: OrderedDict[str, None] = OrderedDict()
        self._chars = 0
        #: First characters -> the values that begin with them (tuples: read
        #: without a lock by threads that log).
        self._by_prefix: dict[str, tuple[str, ...]] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._kept)

    def remember(self, values: Iterable[str | None]) -> None:
        """Mask these values in every line from now on."""
        with self._lock:
            for value in values:
                if not value or len(value) < MIN_KNOWN_SECRET_LENGTH or len(value) > self.max_chars:
                    continue
                if value in self._kept:
                    self._kept.move_to_end(value)
                    continue
                self._kept[value] = None
                self._chars += len(value)
                prefix = value[:MIN_KNOWN_SECRET_LENGTH]
                self._by_prefix[prefix] = (*self._by_prefix.get(prefix, ()), value)
                while len(self._kept) > self.max_values or self._chars > self.max_chars:
                    self._drop(next(iter(self._kept)))

    def forget_all(self) -> None:
        """Forget every value (tests; a process never needs it)."""
        with self._lock:
            self._kept.clear()
            self._by_prefix = {}
            self._chars = 0

    def found_in(self, text: str) -> set[str]:
        """The kept values that occur in ``text``."""
        by_prefix = self._by_prefix
        if not by_prefix:
            return set()
        found: set[str] = set()
        width = MIN_KNOWN_SECRET_LENGTH
        for start in range(len(text) - width + 1):
            group = by_prefix.get(text[start:start + width])
            if group:
                found.update(value for value in group if text.startswith(value, start))
        return found

    def _drop(self, value: str) -> None:
        del self._kept[value]
        self._chars -= len(value)
        prefix = value[:MIN_KNOWN_SECRET_LENGTH]
        group = tuple(kept for kept in self._by_prefix.get(prefix, ()) if kept != value)
        if group:
            self._by_prefix[prefix] = group
        else:
            self._by_prefix.pop(prefix, None)


#: Shorter values are not remembered process-wide: a caller could otherwise
#: mask ordinary words in every line of the log by sending them as a key.
MIN_KNOWN_SECRET_LENGTH = 8
#: The process's known secrets (:class:`KnownSecrets`).
KNOWN_SECRETS = KnownSecrets()


def scrub(text: str, values: Iterable[str | None] = ()) -> str:
    """``text`` with ``values``, the current request's secrets and every
    secret this process knows (:data:`KNOWN_SECRETS`) replaced by ``***``
    (the longest first, so that no part of one is left shown)."""
    found = KNOWN_SECRETS.found_in(text)
    hidden = _REQUEST_SECRETS.get()
    if values or hidden:
        found.update(value for value in (*values, *hidden)
                     if value and len(value) >= MIN_SECRET_LENGTH and value in text)
    if not found:
        return text
    for value in sorted(found, key=len, reverse=True):
        text = text.replace(value, "***")
    return text


def redact(text: str) -> str:
    """Mask the request's secrets and credential-shaped substrings."""
    text = scrub(text)
    # A pattern is tried only on a text holding what it cannot match without:
    # most lines hold none, and a case-insensitive pattern costs tens of µs a line.
    folded = _folded(text)
    for pattern, needs in _PATTERN_NEEDS:
        for need in needs:  # a loop, not any(): a generator costs more than the look
            if need in folded:
                text = pattern.sub(_masked, text)
                break
    return text


#: What each of :data:`_SECRET_PATTERNS` cannot match without, in a
#: :func:`_folded` text. Masking only puts ``*`` where characters were, which
#: makes none of these appear: what the earlier patterns left needs no new look.
_PATTERN_NEEDS: Final = tuple(
    zip(_SECRET_PATTERNS, (("bearer",), ("key", "token", "secret", "passw"), ("sk-",), ("://",)), strict=True)
)


def _folded(text: str) -> str:
    """``text`` lowercased, the long s read as ``s``: what a case-insensitive
    pattern takes for an ASCII letter of a need is that letter here too (the
    Kelvin sign lowercases to ``k``; the long s is the one of these letters
    whose other case only the regex engine knows)."""
    folded = text.lower()
    return folded.replace("\u017f", "s") if "\u017f" in folded else folded


def _masked(match: re.Match[str]) -> str:
    return match.group(1) + "***" + ("@" if match.group().endswith("@") else "")


class RedactingFilter(logging.Filter):
    """Masks credentials in the rendered message of every record, and in
    its fields (with ``event_fields=False``, not in those of a
    :func:`log_fields` line: the text form shows them only inside its
    message, masked already: masking them again was 1.3 % of a short run)."""

    def __init__(self, *, event_fields: bool = True) -> None:
        super().__init__()
        self.event_fields = event_fields

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = redact(message)
        if masked != message:
            record.msg, record.args = masked, None
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict) and (self.event_fields or not hasattr(record, "event")):
            record.fields = {key: redact(value) if isinstance(value, str) else value for key, value in fields.items()}
        return True


def log_fields(logger: logging.Logger, level: int, event: str, fields: Mapping[str, Any]) -> None:
    """Log ``event`` with its ``fields`` (those that are ``None`` are left out)."""
    shown = {key: value for key, value in fields.items() if value is not None}
    if not logger.isEnabledFor(level):
        return
    logger.log(level, "%s %s", event, _key_values(shown), extra={"fields": shown, "event": event})


def _key_values(fields: Mapping[str, Any]) -> str:
    return " ".join(f"{key}={_plain(value)}" for key, value in fields.items() if value is not None)


class SecondStamp:
    """A time's text in ``fmt`` (``time.strftime``), made once a second: the
    log lines of a busy second share it instead of asking the calendar each."""

    __slots__ = ("_convert", "_fmt", "_last")

    def __init__(self, fmt: str, convert: Callable[[float | None], time.struct_time] = time.localtime) -> None:
        self._fmt = fmt
        self._convert = convert
        #: The second last asked for, and its text.
        self._last: tuple[int, str] = (-1, "")

    def __call__(self, when: float) -> str:
        second = int(when)
        last = self._last
        if last[0] != second:
            last = self._last = (second, time.strftime(self._fmt, self._convert(when)))
        return last[1]


class KeyValueFormatter(logging.Formatter):
    """``time level logger: message key=value ...``, on one line (a
    traceback, redacted, follows it)."""

    #: The time's text of the second being logged (made on first use, with
    #: this formatter's converter: a short run logs two lines within one).
    _stamp: SecondStamp | None = None

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        msec_format = self.default_msec_format
        if datefmt is not None or msec_format is None:
            return super().formatTime(record, datefmt)
        stamp = self._stamp
        if stamp is None:
            stamp = self._stamp = SecondStamp(self.default_time_format, self.converter)
        return msec_format % (stamp(record.created), record.msecs)

    def formatMessage(self, record: logging.LogRecord) -> str:
        return one_line(super().formatMessage(record))

    def format(self, record: logging.LogRecord) -> str:
        record.message = record.getMessage()
        if self.usesTime():
            record.asctime = self.formatTime(record, self.datefmt)
        line = self.formatMessage(record)
        # A log_fields message holds its fields already.
        fields = {} if hasattr(record, "event") else dict(getattr(record, "fields", None) or {})
        extra = _key_values({**fields, **_trace_ids(record)})
        if extra:
            line = f"{line} {extra}"
        trace = redacted_traceback(self, record)
        return f"{line}\n{trace}" if trace else line


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message and fields."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": getattr(record, "event", None) or record.getMessage(),
        }
        fields = getattr(record, "fields", None) or {}
        entry.update((key, value) for key, value in fields.items() if value is not None)
        entry.update(_trace_ids(record))
        trace = redacted_traceback(self, record)
        if trace:
            entry["exception"] = trace
        # json.dumps escapes the C0 controls; not U+2028, U+2029 or the C1 controls.
        return one_line(json.dumps(entry, ensure_ascii=False, default=str))


def redacted_traceback(formatter: logging.Formatter, record: logging.LogRecord) -> str:
    """The record's traceback and stack, as ``formatter`` writes them, redacted
    (the filter only sees the message: a traceback quotes what the failing
    code held, a runtime's error with the request's key in it included).
    Formatted here, never taken from ``record.exc_text``, which another
    handler may have filled unredacted."""
    parts = []
    if record.exc_info:
        parts.append(formatter.formatException(record.exc_info))
    elif record.exc_text:
        parts.append(record.exc_text)
    if record.stack_info:
        parts.append(formatter.formatStack(record.stack_info))
    return redact("\n".join(parts)) if parts else ""


def json_line(message: str, fields: Mapping[str, Any] | None = None, *, level: int = logging.INFO,
              logger: str = "aguiadapter") -> str:
    """One line as :class:`JsonFormatter` writes a log record (credentials masked):
    for what the command line prints itself (banner, drain, usage errors) under
    ``--log-format json``, so that every line of the process parses."""
    record = logging.LogRecord(logger, level, "", 0, message, None, None)
    record.event = message
    record.fields = dict(fields or {})
    RedactingFilter().filter(record)
    return JsonFormatter().format(record)


def configure_logging(level: str, fmt: str = "text", *, trace_ids: bool = False) -> None:
    """Install one stderr handler with the chosen format and the redactor
    (and, with ``trace_ids``, the trace and span ids: needs the otel extra)."""
    handler = logging.StreamHandler()
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(KeyValueFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    # The text form writes a log_fields line's fields in its message only.
    handler.addFilter(RedactingFilter(event_fields=fmt == "json"))
    if trace_ids:
        from .telemetry.tracing import TraceIdsFilter

        handler.addFilter(TraceIdsFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # Python's warnings (a library's deprecation...) as log lines, in the chosen format.
    logging.captureWarnings(True)


def lean_records() -> None:
    """Leave out of every log record what no line of this server shows: the
    caller's file and line (a walk up the stack for each line), its thread
    and its process. For the server's own process (the command line), not
    for an application that embeds the adapter and logs its own way."""
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False


def _trace_ids(record: logging.LogRecord) -> dict[str, str]:
    trace_id = getattr(record, "trace_id", None)
    if trace_id is None:
        return {}
    return {"trace_id": trace_id, "span_id": getattr(record, "span_id", "")}


def _plain(value: Any) -> str:
    text = str(value)
    if not text or " " in text or '"' in text or "=" in text or _CONTROL.search(text):
        return one_line(json.dumps(text, ensure_ascii=False))
    return text
