"""A bearer token read from its file again whenever the file changes and at least every minute, as client-go does.

The kubelet rewrites a projected service-account token well before it expires; the API server keeps
accepting the old one for a while, so a client that re-reads only on a 401 keeps using a stale token.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Callable, Optional

TOKEN_REREAD_SECONDS = 60.0


def rotating_token_auth(path: str, clock: Callable[[], float] = time.monotonic):
    """An httpx Auth for lightkube's client (httpx is imported here: only with the API on)."""
    from lightkube.core.generic_client import httpx

    class RotatingTokenAuth(httpx.Auth):
        def __init__(self):
            self._lock = threading.Lock()
            self._bearer: Optional[str] = None
            self._read_at = 0.0
            self._seen = None  # (inode, mtime, size) of the file when last read

        def _current(self, force: bool = False) -> str:
            with self._lock:
                now = clock()
                seen = _identity(path)
                if force or self._bearer is None or seen != self._seen or now - self._read_at >= TOKEN_REREAD_SECONDS:
                    try:
                        with open(path) as handle:
                            self._bearer = f"Bearer {handle.read().strip()}"
                        self._seen = seen
                    except OSError:
                        if self._bearer is None:
                            raise
                        # keep the last token: the kubelet replaces the file by a rename, never leaves it missing long
                    self._read_at = now
                return self._bearer

        def auth_flow(self, request):
            request.headers["Authorization"] = self._current()
            response = yield request
            if response.status_code == 401:  # rotated sooner than our timer: read it now, once
                request.headers["Authorization"] = self._current(force=True)
                yield request

    return RotatingTokenAuth()


def _identity(path: str):
    # The kubelet writes a new token beside the old and swaps a symlink: stat follows it to the new file.
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_ino, found.st_mtime_ns, found.st_size


def use_rotating_token(client) -> None:
    """Replace lightkube's token-file auth (which re-reads only on a 401) on `client`'s connection, when
    its credentials are a token file (the service account's, or a kubeconfig's `tokenFile`)."""
    generic = client._client  # lightkube keeps its resolved config and httpx client here
    user = generic.config.user
    if user is not None and user.token_file:
        generic._client.auth = rotating_token_auth(user.token_file)
