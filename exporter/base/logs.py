"""One-line structured logs (logfmt or JSON), and the one way to log a repeated event once (`LogOnce`, `DependencyReporter`)."""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from typing import Dict, Hashable, Iterable, Optional, Set

LOGGER_NAME = "pod_gpu_exporter"
_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING, "error": logging.ERROR}
LOG_LEVELS = tuple(_LEVELS)  # --log.level's choices
_LEVEL_NAMES = {logging.DEBUG: "debug", logging.INFO: "info", logging.WARNING: "warn", logging.ERROR: "error"}


def get_logger() -> logging.Logger:
    return logging.getLogger(LOGGER_NAME)


def log(level: str, msg: str, exc_info: object = False, **fields) -> None:
    """Log one event; fields become key=value pairs (logfmt) or JSON members."""
    get_logger().log(_LEVELS[level], msg, exc_info=exc_info, extra={"fields": fields})


def _record_fields(record: logging.LogRecord) -> Dict[str, object]:
    fields = {
        "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
        "level": _LEVEL_NAMES.get(record.levelno, record.levelname.lower()),
        "msg": record.getMessage(),
    }
    fields.update(getattr(record, "fields", {}))
    if record.exc_info:  # unexpected failures only: expected ones are logged without a trace
        fields["error"] = logging.Formatter().formatException(record.exc_info)
    return fields


class LogfmtFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return " ".join(f"{key}={_logfmt_value(value)}" for key, value in _record_fields(record).items())


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(_record_fields(record), default=str)


def _logfmt_value(value: object) -> str:
    text = str(value)
    if text and not any(char in text for char in ' ="\\\n\t'):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


_FORMATTERS = {"logfmt": LogfmtFormatter, "json": JsonFormatter}
LOG_FORMATS = tuple(_FORMATTERS)  # --log.format's choices


def setup_logging(level: str, fmt: str, stream=None) -> None:
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(_FORMATTERS[fmt]())
    logger = get_logger()
    logger.handlers[:] = [handler]
    logger.setLevel(_LEVELS[level])
    logger.propagate = False


class LogOnce:
    """Logs each distinct event once, however often it happens; `forget` lets it be logged again.

    The one mechanism for "log this once": a warning about a flag that cannot act, a lookup that keeps
    failing, a condition met on every scrape. Keys are whatever names the event (a string, a tuple).
    Safe to call from many threads; a key is logged by exactly one of them.
    """

    def __init__(self, most: Optional[int] = None):
        self._seen: Set[Hashable] = set()
        self._lock = threading.Lock()
        # Keys made from outside data (an owner's kind) could otherwise grow without bound: past `most`
        # distinct keys nothing new is logged.
        self._most = most

    def log(self, key: Hashable, level: str, msg: str, **fields) -> bool:
        """Log `msg` unless `key` was logged already (and not forgotten since); True when it logged."""
        if not self.first(key):
            return False
        log(level, msg, **fields)
        return True

    def first(self, key: Hashable) -> bool:
        """True the first time `key` is seen (and marks it seen): for callers that log more than one line."""
        with self._lock:
            if key in self._seen or (self._most is not None and len(self._seen) >= self._most):
                return False
            self._seen.add(key)
            return True

    def forget(self, key: Hashable) -> bool:
        """Let `key` be logged again; True when it had been logged."""
        with self._lock:
            if key not in self._seen:
                return False
            self._seen.discard(key)
            return True

    def retain(self, keys: Iterable[Hashable]) -> None:
        """Forget every key not among `keys` (those of things that still exist), so that keys that come
        and go stay bounded, and one that comes back is logged again."""
        with self._lock:
            self._seen &= set(keys)


class DependencyReporter:
    """Logs a dependency's failure once when it starts or changes reason, and once when it recovers.

    Scrapes may fail every few seconds for hours; the log must say so once, not on every scrape.
    """

    def __init__(self, name: str):
        self.name = name
        self._reason: Optional[str] = None
        self._message: Optional[str] = None
        self._lock = threading.Lock()

    @property
    def failure(self) -> Optional[str]:
        """Why the dependency fails now, in one line (the last failure's message), or None while it answers."""
        return self._message

    def failed(self, reason: str, message: str, **fields) -> None:
        with self._lock:
            changed, self._reason = self._reason != reason, reason
            self._message = " ".join(message.split())
        if changed:
            log("warn", message, dependency=self.name, reason=reason, **fields)

    def succeeded(self, message: str = "", **fields) -> None:
        with self._lock:
            recovered, self._reason, self._message = self._reason is not None, None, None
        if recovered:
            log("info", message or f"{self.name} reachable again", dependency=self.name, **fields)
