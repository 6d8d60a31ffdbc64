"""What the kernel says a local TCP server has done with its connections (/proc/net/tcp), for tests to wait on."""

from __future__ import annotations

import socket
from typing import Dict, Iterable, Tuple

_LISTEN = "0A"


def _sockets() -> Iterable[Tuple[int, int, str, int]]:
    """(local port, remote port, state, bytes received but not yet read) of every TCP socket, IPv4 and IPv6."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as handle:
                rows = handle.read().splitlines()[1:]
        except FileNotFoundError:
            continue
        for row in rows:
            fields = row.split()
            local, remote, state, queues = fields[1], fields[2], fields[3], fields[4]
            yield int(local.rsplit(":", 1)[1], 16), int(remote.rsplit(":", 1)[1], 16), state, int(queues.split(":")[1], 16)


def all_accepted(server_port: int) -> bool:
    """Whether the server listening on `server_port` has accepted every connection made to it so far
    (a listening socket's receive queue is its backlog of connections not yet accepted)."""
    return all(unread == 0 for local, _, state, unread in _sockets() if local == server_port and state == _LISTEN)


def all_read(server_port: int, clients: Iterable[socket.socket]) -> bool:
    """Whether the server on `server_port` has accepted each of these client connections and read every
    byte they sent."""
    unread_by_client: Dict[int, int] = {remote: unread for local, remote, state, unread in _sockets()
                                        if local == server_port and state != _LISTEN}
    ports = [client.getsockname()[1] for client in clients]
    return all_accepted(server_port) and all(unread_by_client.get(port) == 0 for port in ports)
