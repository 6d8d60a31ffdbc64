"""List and watch requests read with bounds: a cap on each watch line, a bound on silence, objects decoded one by one.

lightkube's own watch reads lines without a limit, has no read timeout and reopens an ended watch at
once; its list decodes a page as a whole, so one odd object fails it. These requests go through the
same lightkube client (its kubeconfig, TLS and credentials) but are read here. Imports lightkube
only when called, so that the exporter with the API off never loads it.
"""

from __future__ import annotations

import functools
import threading
from typing import Iterable, Iterator, List, Optional, Tuple

from exporter.base.bounded_body import BodyTooLarge, BodyTooSlow, read_bounded, read_head

# The API server refuses requests over 3 MiB and etcd objects over 1.5 MiB: a watch line (one event,
# the object wrapped in {"type":…,"object":…}) longer than this is not from a working API server.
MAX_WATCH_LINE_BYTES = 4 * 1024 * 1024
_MAX_ERROR_BODY_BYTES = 64 * 1024  # of a non-200 answer's Status object
_REQUEST_TIMEOUT_SECONDS = 10.0  # connect, write, and every read of a list (lightkube's default)
# One get's answer (an owner's metadata, a group/version's discovery, a ResourceClaim) is a few to tens
# of kilobytes; a working API server sends it in milliseconds.
MAX_ANSWER_BYTES = 4 * 1024 * 1024
ANSWER_SECONDS = 10.0
# msgspec (lightkube's decoder) works out how to decode into a type the first time it meets it,
# reading the type's annotations through Python as it goes; two threads doing that at once for
# lightkube's models crash the whole process with a segfault (msgspec 0.22: the pods and the
# ResourceSlices watches decoding their first objects together, tests/unit/test_kubernetes_bounds.py
# shows it). So every decode of ours holds this lock. Decoding never lets go of the GIL, so the
# lock takes away no parallelism.
_DECODE_LOCK = threading.Lock()


class WatchLineTooLong(Exception):
    """A watch line went past MAX_WATCH_LINE_BYTES without its newline."""

    def __init__(self, limit: int):
        super().__init__(f"a watch line exceeded {limit} bytes; the connection was dropped")


class WatchSilent(Exception):
    """Nothing (no event, no bookmark) arrived on a watch for the silence bound."""

    def __init__(self, seconds: float):
        super().__init__(f"nothing arrived on the watch for {seconds:g} s; the connection was dropped")


class AnswerRefused(Exception):
    """A get's answer too large or too slow to be read whole (see read_answer)."""


def bounded_lines(chunks: Iterable[bytes], limit: int) -> Iterator[bytes]:
    """Newline-delimited lines of a byte stream; raises WatchLineTooLong rather than hold more than `limit`
    bytes of one line. Empty lines are skipped; a last line without its newline is dropped (cut stream)."""
    pending = bytearray()
    for chunk in chunks:
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            if end < 0:
                break
            if len(pending) + end - start > limit:
                raise WatchLineTooLong(limit)
            pending += chunk[start:end]
            if pending.strip():
                yield bytes(pending)
            pending.clear()
            start = end + 1
        if len(pending) + len(chunk) - start > limit:
            raise WatchLineTooLong(limit)
        pending += chunk[start:]


def _generic(client):
    # lightkube.Client keeps its request builder (base URL, credentials, TLS) in `_client`; a wrapper
    # that delegates to a Client (as tests use) keeps the Client there.
    while not hasattr(client, "prepare_request"):
        client = client._client
    return client


def http_client(client):
    """The httpx client under a lightkube Client: its base URL, TLS and credentials (with the token
    re-read on a timer, token.use_rotating_token), for the requests lightkube has no call for."""
    return _generic(client)._client


def _api_error(response):
    """An ApiError from a non-200 answer, reading at most _MAX_ERROR_BODY_BYTES of it."""
    import msgspec
    from lightkube.core.exceptions import ApiError
    from lightkube.models.meta_v1 import Status

    body = read_head(response.iter_raw(), _MAX_ERROR_BODY_BYTES)
    try:
        status = _decode(body, Status)
    except (msgspec.DecodeError, msgspec.ValidationError):
        status = None
    if status is None or not isinstance(status.code, int):
        status = Status(code=response.status_code, message=f"HTTP {response.status_code}")
    return ApiError(status=status)


def _send(client, resource, namespace, params: dict, watch: bool, read_timeout: float):
    from lightkube.core.generic_client import httpx

    generic = _generic(client)
    prepared = generic.prepare_request("list", res=resource, namespace=namespace, watch=watch, params=params)
    timeout = httpx.Timeout(_REQUEST_TIMEOUT_SECONDS, read=read_timeout)
    # identity: a compressed body would be inflated chunk by chunk, out of the line cap's sight.
    request = generic._client.build_request("GET", prepared.url, params=prepared.params,
                                            headers={"Accept-Encoding": "identity"}, timeout=timeout)
    response = generic.send(request, stream=True)
    if response.status_code != 200:
        try:
            raise _api_error(response)
        finally:
            response.close()
    return response


def read_answer(http, path: str, accept: str = "application/json", seconds: float = ANSWER_SECONDS) -> bytes:
    """The body of one GET on `http` (http_client's), read within `seconds` and MAX_ANSWER_BYTES whatever the
    server sends: gets run on the mapping refresher, which a trickled answer would otherwise hold for good (the
    client's timeout bounds each read, not the answer). AnswerRefused past either; ApiError for a non-200."""
    import time

    deadline = time.monotonic() + seconds
    # identity: a compressed answer would be inflated out of the cap's sight.
    with http.stream("GET", path, headers={"Accept": accept, "Accept-Encoding": "identity"}) as response:
        if response.status_code != 200:
            raise _api_error(response)
        try:
            return read_bounded(response.iter_raw(), MAX_ANSWER_BYTES, deadline)
        except BodyTooLarge:
            raise AnswerRefused(f"{path}: the answer is larger than {MAX_ANSWER_BYTES} bytes") from None
        except BodyTooSlow:
            raise AnswerRefused(f"{path}: the answer took longer than {seconds:g} s") from None


def watch_lines(client, resource, namespace, params: dict, silence_seconds: float,
                max_line: int = MAX_WATCH_LINE_BYTES) -> Iterator[bytes]:
    """The lines of one watch request, until the server ends it. Raises WatchSilent when nothing comes
    for `silence_seconds`, WatchLineTooLong past `max_line`, lightkube's ApiError for a non-200 answer."""
    from lightkube.core.generic_client import httpx

    response = _send(client, resource, namespace, {**params, "watch": "true"}, True, silence_seconds)
    try:
        yield from bounded_lines(response.iter_raw(), max_line)
    except httpx.ReadTimeout:
        raise WatchSilent(silence_seconds) from None
    finally:
        response.close()


def decode_event(line: bytes) -> Tuple[str, bytes]:
    """(type, the object's raw JSON) of a watch line; an ERROR event is raised as lightkube's ApiError."""
    from lightkube.core import decoders
    from lightkube.core.exceptions import ApiError

    with _DECODE_LOCK:
        event = decoders.decode_watch_event(line)
        status = decoders.decode_status(event.object) if event.type == "ERROR" else None
    if status is not None:
        raise ApiError(status=status)
    return event.type, bytes(event.object)


def decode_object(raw: bytes, resource):
    from lightkube.core import decoders

    with _DECODE_LOCK:
        return decoders.decode_object(raw, resource)


def event_version(raw: bytes) -> Optional[str]:
    """metadata.resourceVersion of an event's object (a BOOKMARK carries nothing else); None if absent."""
    import msgspec

    try:
        metadata = _decode(raw, _structs()[2]).metadata
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    return (metadata.resourceVersion or None) if metadata is not None else None


def list_pages(client, resource, namespace, params: dict, page_size: int) -> Iterator[Tuple[str, List[bytes]]]:
    """(resourceVersion, the raw JSON of each item) of each page of a list, following `continue`."""
    params = {**params, "limit": str(page_size)}
    while True:
        response = _send(client, resource, namespace, params, False, _REQUEST_TIMEOUT_SECONDS)
        try:
            page = _decode(response.read(), _structs()[1])
        finally:
            response.close()
        metadata = page.metadata or _structs()[0]()
        yield metadata.resourceVersion or "", [bytes(item) for item in page.items]
        if not metadata.continue_:
            return
        params["continue"] = metadata.continue_


def _decode(data: bytes, struct_type):
    """msgspec's JSON decode into `struct_type`, one thread at a time (see _DECODE_LOCK)."""
    import msgspec

    with _DECODE_LOCK:
        return msgspec.json.decode(data, type=struct_type)


@functools.lru_cache(maxsize=None)
def _structs():
    """(ListMeta, Page, Versioned): the msgspec structs, made on first use (msgspec comes with lightkube)."""
    import msgspec

    list_meta = msgspec.defstruct("ListMeta", [
        ("resourceVersion", Optional[str], None),
        ("continue_", Optional[str], msgspec.field(name="continue", default=None))])
    page = msgspec.defstruct("Page", [("items", List[msgspec.Raw], msgspec.field(default_factory=list)),
                                      ("metadata", Optional[list_meta], None)])
    object_meta = msgspec.defstruct("ObjectMeta", [("resourceVersion", Optional[str], None)])
    versioned = msgspec.defstruct("Versioned", [("metadata", Optional[object_meta], None)])
    return list_meta, page, versioned
