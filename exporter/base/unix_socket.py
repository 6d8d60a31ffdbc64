"""A unix socket checked before a gRPC client dials it: gRPC's own words for a missing, forbidden or wrong file
are cryptic, so each case gets one plain line and a reason for the logs and counters."""

from __future__ import annotations

import os
import stat
from typing import Callable, NamedTuple


class SocketWords(NamedTuple):
    """What a client says of its socket when the check fails: `where` names it ("kubelet socket /x.sock"), the
    rest is what to do about each case."""

    where: str
    absent: str  # after "not found: "
    permission: str  # after "permission denied"
    error: str  # after any other error's own words
    not_socket: str = ""  # after "exists but is not a unix socket"


def stat_socket(path: str, words: SocketWords, error: Callable[[str, str], Exception]) -> os.stat_result:
    """The socket file's stat, or `error(line, reason)` raised: reason "absent", "permission" or "error"."""
    try:
        info = os.stat(path)
    except FileNotFoundError as exc:
        raise error(f"{words.where} not found: {words.absent}", "absent") from exc
    except PermissionError as exc:
        raise error(f"{words.where}: permission denied{words.permission}", "permission") from exc
    except OSError as exc:
        raise error(f"{words.where}: {exc.strerror}: {words.error}", "error") from exc
    if not stat.S_ISSOCK(info.st_mode):
        raise error(f"{words.where} exists but is not a unix socket{words.not_socket}", "error")
    return info
