"""A unix-socket relay that waits before it passes each connection on: a kubelet slow to answer a new
connection, as on a busy node, in front of the real FakeKubelet."""

from __future__ import annotations

import contextlib
import socket
import threading
import time


class SlowUnixRelay:
    """Listens on `path`; each connection is joined to `target` after `delay_seconds`, then its bytes
    flow both ways unchanged until either side closes."""

    def __init__(self, path: str, target: str, delay_seconds: float) -> None:
        self.path, self._target, self._delay_seconds = path, target, delay_seconds
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(path)
        self._listener.listen()
        threading.Thread(target=self._accept, daemon=True).start()

    def __enter__(self) -> SlowUnixRelay:
        return self

    def __exit__(self, *exc) -> None:
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._relay, args=(client,), daemon=True).start()

    def _relay(self, client: socket.socket) -> None:
        time.sleep(self._delay_seconds)  # the slowness relayed, not a wait of the test's
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        upstream.connect(self._target)
        threading.Thread(target=_pipe, args=(client, upstream), daemon=True).start()
        _pipe(upstream, client)


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    for end in (source, sink):
        with contextlib.suppress(OSError):
            end.shutdown(socket.SHUT_RDWR)
