"""Content-Encoding of answers: gzip when the client accepts it (RFC 9110) and it pays."""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

from exporter.web.scrape import ScrapeBody

# Below ~1 KiB gzip costs more than it saves.
_GZIP_MIN_BYTES = 1024


def encode_for(body: "bytes | ScrapeBody", accept_encoding: str) -> Tuple[Sequence[bytes], Optional[str]]:
    """(parts to send, Content-Encoding or None): gzip when the client accepts it and it pays."""
    if not isinstance(body, ScrapeBody):
        body = ScrapeBody((body,))
    if len(body) >= _GZIP_MIN_BYTES and _accepts_gzip(accept_encoding):
        return body.gzip_parts(), "gzip"
    return body.parts, None


def _accepts_gzip(accept_encoding: str) -> bool:
    """RFC 9110 section 12.5.3: names and parameters are case-insensitive, q=0 means "not
    acceptable", and an explicit gzip entry wins over `*` whatever their order."""
    weights: Dict[str, float] = {}
    for item in accept_encoding.split(","):
        coding, *params = [part.strip().lower() for part in item.split(";")]
        weights.setdefault(coding, _quality(params))
    if "gzip" in weights:
        return weights["gzip"] > 0
    return weights.get("x-gzip", weights.get("*", 0.0)) > 0


def _quality(params: List[str]) -> float:
    for param in params:
        name, _, value = param.partition("=")
        if name.strip() == "q":
            try:
                return min(max(float(value.strip()), 0.0), 1.0)
            except ValueError:
                return 0.0  # an unreadable weight: not a clear yes
    return 1.0
