"""Fetching dcgm-exporter's Prometheus text: over HTTP (deadline, size cap) or from the legacy textfile."""

from __future__ import annotations

import os
import queue
import stat
import time
import zlib
from typing import Callable, List, Optional

import requests
import requests.adapters
import urllib3.exceptions

from exporter import __version__
from exporter.errors import ConfigError, UpstreamError

DEFAULT_MAX_BYTES = 32 * 1024 * 1024
_READ_CHUNK_BYTES = 64 * 1024
# Idle Sessions kept for reuse. Scrapes beyond this many at once still work: they get a fresh
# Session, which is closed afterwards instead of being kept.
_IDLE_SESSIONS = 4
_HEADERS = {
    # We parse only the 0.0.4 text format; client_golang's promhttp serves it for text/plain.
    "Accept": "text/plain",
    # promhttp only compresses with gzip; we decode it ourselves to bound the decoded size.
    "Accept-Encoding": "gzip",
    "User-Agent": f"pod-gpu-metrics-exporter/{__version__}",
}
# A file modified less than this long ago may have been rewritten within one timestamp tick.
_RECENT_WRITE_NS = 100_000_000
_GZIP_ENCODINGS = ("gzip", "x-gzip")
_IDENTITY_ENCODINGS = ("", "identity")


def _new_session() -> requests.Session:
    session = requests.Session()
    # Proxy variables are meant for egress traffic, not for the node-local dcgm-exporter; trust_env
    # would also look up ~/.netrc on every request.
    session.trust_env = False
    session.headers.update(_HEADERS)
    # No retries: a retry would restart the clock and break the total deadline of one fetch.
    adapter = requests.adapters.HTTPAdapter(pool_connections=1, pool_maxsize=1, max_retries=0)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


class _SessionPool:
    """Lends each fetch a requests.Session of its own for the length of that fetch.

    requests does not promise that one Session is safe to share between threads (psf/requests#2766:
    the cookie jar and adapters are shared state), and the HTTP server answers every scrape on a new
    thread, so a threading.local Session would never be reused. Lending Sessions out of a LIFO queue
    is safe and still reuses keep-alive connections to dcgm-exporter from one scrape to the next.
    """

    def __init__(self, idle_max: int) -> None:
        self._idle: queue.LifoQueue = queue.LifoQueue(maxsize=idle_max)

    def acquire(self) -> requests.Session:
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            return _new_session()

    def release(self, session: requests.Session) -> None:
        try:
            self._idle.put_nowait(session)
        except queue.Full:
            session.close()

    def close(self) -> None:
        while True:
            try:
                self._idle.get_nowait().close()
            except queue.Empty:
                return


class _Body:
    """Collects a response body, decoding gzip on the fly and never growing past max_bytes decoded.

    Decoding here rather than in urllib3 lets us cap each inflate step (`max_length`), so a small
    gzip bomb cannot allocate more than the cap before we notice.
    """

    def __init__(self, max_bytes: int, gzipped: bool, error: Callable[[str, str], UpstreamError]) -> None:
        self._max_bytes = max_bytes
        self._error = error
        self._parts: List[bytes] = []
        self._size = 0
        self._inflater = _gunzipper() if gzipped else None
        self._member_open = False  # a gzip member has begun but not yet ended
        self.wire_bytes = 0

    def feed(self, data: bytes) -> None:
        self.wire_bytes += len(data)
        if self._inflater is None:
            self._keep(data)
            return
        try:
            self._inflate(data)
        except zlib.error as exc:
            raise self._error(f"sent a gzip body that does not decode ({exc})", "error") from exc

    def _inflate(self, data: bytes) -> None:
        while data:
            self._member_open = True
            self._keep(self._inflater.decompress(data, self._max_bytes - self._size + 1))
            if self._inflater.eof:
                # Concatenated gzip members are one valid gzip stream (RFC 1952 section 2.2).
                data = self._inflater.unused_data
                self._inflater = _gunzipper()
                self._member_open = False
            else:
                data = self._inflater.unconsumed_tail

    def _keep(self, data: bytes) -> None:
        self._size += len(data)
        if self._size > self._max_bytes:
            raise self._error(f"sent more than {self._max_bytes} bytes once decoded: is --dcgm.url "
                              "really dcgm-exporter's /metrics?", "too_large")
        if data:
            self._parts.append(data)

    def finish(self) -> bytes:
        if self._member_open:
            raise self._error(f"ended its response in the middle of a gzip stream after {self.wire_bytes} "
                              "bytes: is dcgm-exporter restarting?", "truncated")
        return b"".join(self._parts)


def _gunzipper():
    return zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)


def _caused_by(exc: BaseException, kind: type) -> bool:
    """Whether `kind` is anywhere in the chain requests/urllib3 wrap a socket error in."""
    seen = set()
    pending: List[Optional[BaseException]] = [exc]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, kind):
            return True
        pending.extend([current.__cause__, current.__context__, getattr(current, "reason", None)])
        pending.extend(arg for arg in current.args if isinstance(arg, BaseException))
    return False


class HttpSource:
    """dcgm-exporter's /metrics over HTTP, with a size cap and a deadline whatever the server does.

    Connecting, and then waiting for each read of the headers, take at most timeout_seconds each;
    the body must be complete by timeout_seconds after the fetch began, however it trickles in.
    """

    def __init__(self, url: str, timeout_seconds: float, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        if not url.lower().startswith(("http://", "https://")):
            raise ConfigError(f"--dcgm.url {url!r} must start with http:// or https://")
        if timeout_seconds <= 0:
            raise ConfigError(f"--dcgm.timeout must be positive, got {timeout_seconds!r}")
        if max_bytes <= 0:
            raise ConfigError(f"the dcgm response size cap must be positive, got {max_bytes!r}")
        self.url = url
        self.timeout_seconds = float(timeout_seconds)
        self.max_bytes = int(max_bytes)
        self._sessions = _SessionPool(_IDLE_SESSIONS)

    def describe(self) -> str:
        return self.url

    def close(self) -> None:
        """Closes idle keep-alive connections; fetching again later opens new ones."""
        self._sessions.close()

    def fetch(self) -> bytes:
        deadline = time.monotonic() + self.timeout_seconds
        session = self._sessions.acquire()
        try:
            response = self._send(session)
            try:
                return self._read_body(response, deadline)
            finally:
                # After a complete read the connection is already back in the pool; after an
                # error this closes it, so a half-read connection is never reused.
                response.close()
        finally:
            self._sessions.release(session)

    def _send(self, session: requests.Session) -> requests.Response:
        # requests' timeouts bound the connect and each socket read, which covers the headers;
        # the body is read against the total deadline in _read_body.
        timeouts = (self.timeout_seconds, self.timeout_seconds)
        try:
            response = session.get(self.url, stream=True, allow_redirects=False, timeout=timeouts)
        except requests.exceptions.Timeout as exc:
            raise self._timeout() from exc
        except requests.exceptions.ConnectionError as exc:
            if _caused_by(exc, ConnectionRefusedError):
                raise self._error("refused the connection: is dcgm-exporter running and listening "
                                  "there (see --dcgm.url)?", "refused") from exc
            raise self._error(f"could not be reached ({exc}): check --dcgm.url", "error") from exc
        except requests.exceptions.RequestException as exc:
            raise self._error(f"could not be asked ({exc}): check --dcgm.url", "error") from exc
        if response.status_code != 200:
            response.close()
            raise self._error(f"answered HTTP {response.status_code} instead of 200: check "
                              "dcgm-exporter's logs and that --dcgm.url names its /metrics path", "status")
        return response

    def _read_body(self, response: requests.Response, deadline: float) -> bytes:
        encoding = response.headers.get("Content-Encoding", "").strip().lower()
        if encoding not in _GZIP_ENCODINGS + _IDENTITY_ENCODINGS:
            raise self._error(f"sent Content-Encoding {encoding!r}, which we did not ask for", "error")
        declared = response.headers.get("Content-Length", "")
        if encoding in _IDENTITY_ENCODINGS and declared.isdigit() and int(declared) > self.max_bytes:
            raise self._too_large()  # refuse before reading a byte of it
        body = _Body(self.max_bytes, encoding in _GZIP_ENCODINGS, self._error)
        while True:
            chunk = self._read_chunk(response, deadline, body.wire_bytes)
            if not chunk:
                break
            body.feed(chunk)
        text = body.finish()
        if not text:
            raise self._error("answered 200 with an empty body; dcgm-exporter always sends at least "
                              "HELP/TYPE lines, so it is probably still starting or failing", "empty")
        return text

    def _read_chunk(self, response: requests.Response, deadline: float, received: int) -> bytes:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise self._timeout(received)
        # Each socket read may wait only for what is left of the deadline, so a server trickling
        # bytes cannot stretch the fetch; urllib3 resets the timeout when it reuses the connection.
        sock = getattr(getattr(response.raw, "connection", None), "sock", None)
        if sock is not None:
            sock.settimeout(remaining)
        try:
            # read1 returns whatever one socket read brings instead of waiting to fill the chunk.
            return response.raw.read1(_READ_CHUNK_BYTES, decode_content=False)
        except urllib3.exceptions.ReadTimeoutError as exc:
            raise self._timeout(received) from exc
        except urllib3.exceptions.ProtocolError as exc:
            raise self._error(f"closed the connection after {received} bytes, before the end of its "
                              "response: is dcgm-exporter restarting?", "truncated") from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise self._error(f"failed while sending its response ({exc})", "error") from exc

    def _timeout(self, received: Optional[int] = None) -> UpstreamError:
        progress = "" if received is None else f" (got {received} bytes)"
        return self._error(f"did not send a complete response within {self.timeout_seconds:g}s"
                           f"{progress}: is dcgm-exporter overloaded or hung? raise --dcgm.timeout if its "
                           "scrapes are just slow", "timeout")

    def _too_large(self) -> UpstreamError:
        return self._error(f"sent more than {self.max_bytes} bytes: is --dcgm.url really "
                           "dcgm-exporter's /metrics?", "too_large")

    def _error(self, what: str, reason: str) -> UpstreamError:
        return UpstreamError(f"dcgm-exporter at {self.url} {what}", reason=reason)


class FileSource:
    """The legacy dcgm textfile (e.g. /run/prometheus/dcgm.prom), read whole on every fetch.

    Writers that replace the file by rename are always read whole: the open file keeps the inode
    it opened. Writers that rewrite it in place (truncate, then write) can be caught half way, and
    no lock tells us when they are done, so a read is accepted only if fstat shows the same size
    and mtime before and after it, it holds exactly that many bytes, it ends with a newline (a
    write() stalled part way leaves a stable but cut file), and, when the file changed within the
    last timestamp tick or so, a second read matches it. Otherwise it is retried a few times, then
    reported; a torn read is never handed on knowingly.
    """

    _ATTEMPTS = 4
    _RETRY_PAUSE_SECONDS = 0.01

    def __init__(self, path: str, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.path = os.fspath(path)
        self.max_bytes = int(max_bytes)

    def describe(self) -> str:
        return self.path

    def fetch(self) -> bytes:
        whole = False
        for attempt in range(self._ATTEMPTS):
            data, whole, mtime_ns = self._read_once()
            if whole and data and self._settled(data, mtime_ns):
                return data
            # Empty is retried too: an in-place rewrite shows it empty between truncate and write.
            if attempt + 1 < self._ATTEMPTS:
                time.sleep(self._RETRY_PAUSE_SECONDS * (attempt + 1))
        if whole:
            raise UpstreamError(f"dcgm textfile {self.path} is empty: has dcgm-exporter written its "
                                "first collection yet?", reason="empty")
        raise UpstreamError(f"dcgm textfile {self.path} was changing or cut short (no final newline) "
                            f"in {self._ATTEMPTS} reads in a row: if its writer rewrites it in place, "
                            "writing a temporary file and renaming it over this one avoids that",
                            reason="truncated")

    def _settled(self, data: bytes, mtime_ns: int) -> bool:
        """Whether `data` can be trusted although size and mtime did not change while it was read.

        File timestamps tick coarsely (a few ms), so a same-size rewrite inside one tick escapes
        the fstat check. Only a file modified that recently is read a second time, and the first
        copy is kept only if the second matches it.
        """
        if time.time_ns() - mtime_ns > _RECENT_WRITE_NS:
            return True
        again, whole, _ = self._read_once()
        return whole and again == data

    def _read_once(self):
        """Returns (bytes, whether they are known to be one whole version of the file, its mtime)."""
        try:
            with open(self.path, "rb") as handle:
                before = os.fstat(handle.fileno())
                regular = stat.S_ISREG(before.st_mode)
                if regular and before.st_size > self.max_bytes:
                    raise self._too_large()
                # One byte more than expected tells "grew while read" from "read to the end".
                data = handle.read((before.st_size if regular else self.max_bytes) + 1)
                after = os.fstat(handle.fileno())
        except FileNotFoundError as exc:
            raise UpstreamError(f"dcgm textfile {self.path} does not exist: is dcgm-exporter writing it, "
                                "and is its folder mounted into this container (see --dcgm.file)?",
                                reason="absent") from exc
        except PermissionError as exc:
            raise UpstreamError(f"dcgm textfile {self.path} is not readable (permission denied): check "
                                "the file's mode and the user this exporter runs as",
                                reason="permission") from exc
        except OSError as exc:
            raise UpstreamError(f"dcgm textfile {self.path} could not be read ({exc.strerror or exc}): "
                                "check --dcgm.file", reason="error") from exc
        if len(data) > self.max_bytes:
            raise self._too_large()
        if not regular:
            return data, True, 0
        unchanged = (before.st_size, before.st_mtime_ns) == (after.st_size, after.st_mtime_ns)
        # The text format ends every line, the last included, with "\n"; a writer caught in the
        # middle of a write() shows a stable size that almost never ends on one.
        whole = unchanged and len(data) == after.st_size and (data.endswith(b"\n") or not data)
        return data, whole, after.st_mtime_ns

    def _too_large(self) -> UpstreamError:
        return UpstreamError(f"dcgm textfile {self.path} is larger than {self.max_bytes} bytes: is "
                             "--dcgm.file the dcgm-exporter textfile?", reason="too_large")
