"""Source: dcgm-exporter's Prometheus text, over HTTP (http_source) or from its legacy textfile (file_source)."""

# Of one dcgm answer, decoded (--dcgm.max-body-size): 4x the 1.8 MB of a large MIG node (6,400
# series), and small enough that the rewrite of any answer within it stays inside the memory bound
# (README, Operations).
DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024


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
