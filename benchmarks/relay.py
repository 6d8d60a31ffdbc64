"""The floor for a buffering proxy in Python: receive the upstream's whole answer, then send it on.

No rewrite, no checks, no cache; `python relay.py UPSTREAM_PORT` prints the port it listens on.
benchmarks/perf.py times it beside the exporter, so the exporter's figures can be read against
what any proxy that must hold a complete answer before replying costs here.
"""

import socket
import sys
import threading

_REQUEST = b"GET /metrics HTTP/1.1\r\nHost: dcgm\r\n\r\n"


def _response_head(upstream: socket.socket) -> "tuple[int, bytes]":
    """(Content-Length, body bytes already received with the head)."""
    received = b""
    while b"\r\n\r\n" not in received:
        chunk = upstream.recv(65536)
        if not chunk:
            raise ConnectionError("upstream closed the connection")
        received += chunk
    head, _, rest = received.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value), rest
    raise ValueError("the upstream answer has no Content-Length")


def _serve(client: socket.socket, upstream_port: int) -> None:
    client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    upstream = socket.create_connection(("127.0.0.1", upstream_port))
    requests = client.makefile("rb")
    with client, upstream:
        while True:
            line = requests.readline()
            if not line:
                return
            while line not in (b"\r\n", b""):  # the rest of the request head
                line = requests.readline()
            upstream.sendall(_REQUEST)
            length, first = _response_head(upstream)
            body = bytearray(length)
            body[: len(first)] = first
            view, received = memoryview(body), len(first)
            while received < length:
                received += upstream.recv_into(view[received:])
            client.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n" % length)
            client.sendall(body)


def main() -> None:
    upstream_port = int(sys.argv[1])
    listener = socket.create_server(("127.0.0.1", 0))
    print(listener.getsockname()[1], flush=True)
    while True:
        client, _ = listener.accept()
        threading.Thread(target=_serve, args=(client, upstream_port), daemon=True).start()


if __name__ == "__main__":
    main()
