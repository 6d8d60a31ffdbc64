"""A gRPC server on a unix socket that a simulated node runs as another program's service: bound, served, stopped, its socket removed."""

from __future__ import annotations

import os
from concurrent import futures
from typing import Optional

import grpc


class UnixSocketGrpcServer:
    """Serves what `_register` adds on `socket_path`; a stopped server can be started again (a new server),
    as the program it plays comes back after a restart. Subclasses register their services, and may
    tighten the socket's mode as the real program does."""

    _workers = 4
    _socket_mode: Optional[int] = None  # e.g. 0o600; None keeps the umask's

    def __init__(self, socket_path: str, label: str):
        self.socket_path = os.path.abspath(socket_path)
        self._label = label  # what it plays, for errors and thread names
        self._server: Optional[grpc.Server] = None

    def _register(self, server: grpc.Server) -> None:
        """Add the services it answers to `server`."""
        raise NotImplementedError

    def start(self):
        """Bind the socket and serve."""
        if self._server is not None:
            raise RuntimeError(f"{self._label} on {self.socket_path} is already running")
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=self._workers,
                                                        thread_name_prefix=self._label.replace(" ", "-")))
        self._register(server)
        # A stale socket file makes bind fail. Removed just before binding: a client meanwhile finds no socket.
        if os.path.exists(self.socket_path):
            os.unlink(self.socket_path)
        if server.add_insecure_port("unix:" + self.socket_path) == 0:
            raise OSError(f"{self._label} could not bind {self.socket_path}")
        if self._socket_mode is not None:
            os.chmod(self.socket_path, self._socket_mode)
        server.start()
        self._server = server
        return self

    def stop(self) -> None:
        """Stop serving and delete the socket, as the program it plays does when it shuts down."""
        server, self._server = self._server, None
        if server is not None:
            server.stop(grace=None).wait()
        try:
            os.unlink(self.socket_path)
        except FileNotFoundError:
            pass

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
