"""Source: a GPU vendor's exporter's Prometheus text over HTTP, each fetch on a connection of its own, within a deadline and a size cap."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple, Optional, Tuple

# Of one answer, decoded: 4x the 1.8 MB of a large MIG node (6,400 series), and small enough that the rewrite
# of any answer within it stays inside the memory bound (README, Operations).
DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024


class FetchWords(NamedTuple):
    """How a fetch's failures name the vendor's exporter and the flags a user would change."""

    name: str  # the exporter as its users know it ("dcgm-exporter")
    url_flag: str  # the flag giving its address
    timeout_flag: str  # the flag bounding one fetch


@dataclass(frozen=True)
class Endpoint:
    """An exporter's URL in the parts a fetch needs; its collector reads and checks it, the source never does."""

    scheme: str  # "http" or "https"
    host: str
    port: Optional[int]  # None: the scheme's own
    path: str  # with its query, if any
    shown: str  # the URL as logs and messages show it: its password, if any, replaced by ***
    # (user, password), unquoted, for an exporter behind basic auth; kept out of repr, so out of logs.
    credentials: Optional[Tuple[str, str]] = field(default=None, repr=False)


def redact_url(url: str) -> str:
    """The URL with its password replaced by *** (`http://user:***@host/…`), for logs and messages;
    kept as it is when it holds no credentials."""
    scheme, separator, rest = url.partition("://")
    authority = rest.split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
    if not separator or "@" not in authority:
        return url
    credentials, _, host = authority.rpartition("@")
    user = credentials.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}{rest[len(authority):]}"
