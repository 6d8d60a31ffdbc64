"""Fetching a vendor exporter's Prometheus text over HTTP: one deadline per fetch, a size cap, a connection of its own."""

from __future__ import annotations

import contextlib
import functools
import http.client
import socket
import time
from typing import Optional

from exporter.base.errors import UpstreamError
from exporter.sources.upstream import Endpoint, FetchWords
from exporter.sources.upstream.http_body import CappedBody
from exporter.sources.upstream.http_connection import DeadlineResponse, Target
from exporter.sources.upstream.http_framing import FramingError, read_body

_GZIP_ENCODINGS = ("gzip", "x-gzip")
_IDENTITY_ENCODINGS = ("", "identity")


class HttpSource:
    """A vendor's exporter's /metrics over HTTP, with a size cap and a deadline whatever the server does.

    The whole fetch — connecting, sending, the status line, headers and body — must be done by
    timeout_seconds after it began, however slowly the server trickles its answer.
    Plain http.client rather than requests: requests' per-request and per-chunk overhead made the
    fetch of a 1.5 MB scrape ~3x slower (benchmarks/perf.py), and we need none of its features.

    Every fetch opens a connection of its own and closes it after the answer ("Connection: close").
    HTTP/1.1 ties an answer to a request only by order on its connection: on a kept-alive one, bytes
    an upstream sends after its answer (a second answer nobody asked for) cannot be told from the
    answer to the next request once that request is on its way, however often the connection is
    checked before reuse. The first answer on a new connection can only be ours. A connection per
    scrape costs one TCP handshake (a TLS one with https) every scrape interval.
    """

    def __init__(self, endpoint: Endpoint, timeout_seconds: float, max_body_bytes: int, words: FetchWords) -> None:
        # The options come checked (exporter.config): the URL parsed, the timeout and cap positive.
        self.timeout_seconds = float(timeout_seconds)
        self.max_bytes = int(max_body_bytes)
        self._words = words  # how its failures name the exporter and the flags to change
        self._shown = endpoint.shown
        self._target = Target(endpoint)
        self._expected_bytes = 0  # decoded length of the last chunked or unsized answer, and some room

    def describe(self) -> str:
        return self._shown  # for logs and messages: never the password

    def fetch(self) -> bytes:
        deadline = time.monotonic() + self.timeout_seconds
        connection = self._target.connect()
        try:
            response = self._send(connection, deadline)
            try:
                return self._read_body(response)
            finally:
                response.close()  # its socket file too, failed or not
        finally:
            connection.close()  # whatever came after the answer is never read: it was not asked for

    def _send(self, connection: http.client.HTTPConnection, deadline: float):
        """The response, once its status line and headers are in."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise self._timeout()
        try:
            connection.timeout = remaining  # for connecting; each read then waits for what is left
            # getresponse() builds its response with the connection's response_class.
            connection.response_class = functools.partial(DeadlineResponse, deadline=deadline)
            connection.request("GET", self._target.path, headers=self._target.headers)
            response = connection.getresponse()
        except socket.timeout as exc:
            raise self._timeout() from exc
        except ConnectionRefusedError as exc:
            raise self._error(f"refused the connection: is {self._words.name} running and listening "
                              f"there (see {self._words.url_flag})?", "refused") from exc
        except (ConnectionResetError, BrokenPipeError) as exc:
            raise self._error(f"could not be reached ({exc!r}): check {self._words.url_flag}", "error") from exc
        except (OSError, http.client.HTTPException) as exc:
            raise self._error(f"could not be asked ({exc!r}): check {self._words.url_flag}", "error") from exc
        if response.status != 200:
            raise self._error(f"answered HTTP {response.status} instead of 200: check {self._words.name}'s "
                              f"logs and that {self._words.url_flag} names its /metrics path", "status")
        return response

    def _read_body(self, response: http.client.HTTPResponse) -> bytes:
        encoding = (response.getheader("Content-Encoding") or "").strip().lower()
        if encoding not in _GZIP_ENCODINGS + _IDENTITY_ENCODINGS:
            raise self._error(f"sent Content-Encoding {encoding!r}, which we did not ask for", "error")
        if encoding in _IDENTITY_ENCODINGS and (response.length or 0) > self.max_bytes:
            raise self._too_large()  # refuse before reading a byte of it
        if encoding in _IDENTITY_ENCODINGS and response.length is not None:
            text = self._read_sized(response)
        else:
            text = self._read_in_chunks(response, gzipped=encoding in _GZIP_ENCODINGS)
        if not text:
            raise self._error(f"answered 200 with an empty body; {self._words.name} always sends at least "
                              "HELP/TYPE lines, so it is probably still starting or failing", "empty")
        return text

    def _read_sized(self, response: http.client.HTTPResponse) -> bytes:
        """A plain body of known length (within the cap), read straight into one buffer of that size:
        no chunks to collect and join, which matters at 1.5 MB per scrape."""
        with self._body_errors(received=None):
            return response.read()

    def _read_in_chunks(self, response: http.client.HTTPResponse, gzipped: bool) -> bytes:
        """A chunked, gzip-encoded or unsized body, given up as soon as it passes the cap."""
        body = CappedBody(self.max_bytes, gzipped, self._error, self._expected_bytes, self._words)
        with self._body_errors(received=body):
            try:
                # What the reader took in with the headers (or, if nothing, one socket read's worth): read
                # alone first. A sized body of no bytes has nothing to wait for.
                buffered = 0 if response.length == 0 else len(response.fp.peek())
                whole = read_body(response.fp.readinto1, body.feed, response.chunked, response.length, buffered)
            except FramingError as exc:
                raise self._error(f"{exc}: is {self._words.url_flag} really {self._words.name}'s /metrics?",
                                  "error") from exc
        if not whole:
            raise self._truncated(body.wire_bytes)
        text = body.finish()
        # The next answer is sized like this one (the same series, new values): its buffer is made
        # that large at once. Concurrent fetches may each set it; any of their lengths will do.
        self._expected_bytes = len(text) + len(text) // 64
        return text

    @contextlib.contextmanager
    def _body_errors(self, received: Optional[CappedBody]):
        """Reading a response body: its failures as UpstreamErrors. `received` is the body being collected,
        whose count says what came before the failure; None when a single read takes the whole body (then
        only a cut-short read knows).

        The response's reader bounds each socket read by the fetch's deadline (http_connection.DeadlineResponse).
        """
        try:
            yield
        except socket.timeout as exc:
            raise self._timeout(None if received is None else received.wire_bytes) from exc
        except http.client.IncompleteRead as exc:  # a sized body cut short
            raise self._truncated(len(exc.partial) if received is None else received.wire_bytes) from exc
        except (OSError, http.client.HTTPException) as exc:
            raise self._error(f"failed while sending its response ({exc!r})", "error") from exc

    def _timeout(self, received: Optional[int] = None) -> UpstreamError:
        progress = "" if received is None else f" (got {received} bytes)"
        return self._error(f"did not send a complete response within {self.timeout_seconds:g}s"
                           f"{progress}: is {self._words.name} overloaded or hung? raise "
                           f"{self._words.timeout_flag} if its scrapes are just slow", "timeout")

    def _truncated(self, received: int) -> UpstreamError:
        return self._error(f"closed the connection after {received} bytes, before the end of its "
                           f"response: is {self._words.name} restarting?", "truncated")

    def _too_large(self) -> UpstreamError:
        return self._error(f"sent more than {self.max_bytes} bytes: is {self._words.url_flag} really "
                           f"{self._words.name}'s /metrics?", "too_large")

    def _error(self, what: str, reason: str) -> UpstreamError:
        return UpstreamError(f"{self._words.name} at {self.describe()} {what}", reason=reason)
