"""HTTP basic auth against bcrypt hashes, with the verification cache exporter-toolkit also keeps."""
from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import re
import threading
from typing import Iterable, Mapping


# What a 401 carries; Prometheus and browsers then send basic credentials.
WWW_AUTHENTICATE = 'Basic realm="pod-gpu-metrics-exporter", charset="UTF-8"'

# $2a$/$2b$/$2y$ (htpasswd writes 2y), cost 04..31, 22 salt + 31 hash characters.
_BCRYPT_HASH = re.compile(r"\$2[aby]\$(0[4-9]|[12][0-9]|3[01])\$[./A-Za-z0-9]{53}")
# bcrypt reads only the first 72 bytes; bcrypt>=5 raises on longer input instead of truncating,
# and hashes made by htpasswd or Go from a longer password were made from its first 72 bytes.
_BCRYPT_MAX_BYTES = 72


def is_bcrypt_hash(text: object) -> bool:
    return isinstance(text, str) and _BCRYPT_HASH.fullmatch(text) is not None


class BasicAuth:
    """Checks Authorization headers against ``{user: bcrypt hash}``; thread-safe."""

    def __init__(self, users: Mapping[str, bytes]):
        if not users:
            raise ValueError("BasicAuth needs at least one user")
        import bcrypt  # here, not at the top: a node without basic-auth users never loads it

        self._checkpw = bcrypt.checkpw
        self._users = dict(users)
        # user -> sha256 of the password bcrypt last accepted. Each user has one hash, hence one
        # valid password, so the cache is bounded by the number of users. Without it every
        # scrape would pay a full bcrypt (~100 ms at cost 10).
        self._verified: dict[str, bytes] = {}
        # bcrypt is CPU-bound; one at a time keeps a flood of wrong passwords from taking
        # every core (exporter-toolkit serialises it the same way).
        self._bcrypt_lock = threading.Lock()
        self._decoy_hash = _decoy_hash(self._users.values())

    def check(self, authorization_header: str | None) -> bool:
        credentials = _parse_basic(authorization_header)
        if credentials is None:
            return False
        user, password = credentials
        digest = hashlib.sha256(password).digest()
        known_hash = self._users.get(user)
        cached = self._verified.get(user)
        if known_hash is not None and cached is not None and hmac.compare_digest(cached, digest):
            return True
        # An unknown user is checked against a decoy hash, so the answer takes as long as for a
        # known user with a wrong password: timing must not tell which user names exist.
        with self._bcrypt_lock:
            matched = self._checkpw(password[:_BCRYPT_MAX_BYTES], known_hash or self._decoy_hash)
        if not matched or known_hash is None:
            return False
        self._verified[user] = digest  # a single dict store: atomic, no lock needed
        return True


def _parse_basic(header: str | None) -> tuple[str, bytes] | None:
    """(user, password bytes) from ``Basic <base64(user:password)>``, or None if malformed."""
    scheme, _, token = (header or "").strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        raw = base64.b64decode(token.strip(), validate=True)
        user, sep, password = raw.partition(b":")
        return (user.decode("utf-8"), password) if sep else None
    except (binascii.Error, ValueError):  # non-ASCII token, bad padding, user not UTF-8
        return None


def _decoy_hash(hashes: Iterable[bytes]) -> bytes:
    import bcrypt

    # As costly as the most expensive real hash, so a decoy check is never the quick one.
    cost = max(int(h[4:6]) for h in hashes)
    return bcrypt.hashpw(os.urandom(16), bcrypt.gensalt(rounds=cost))
