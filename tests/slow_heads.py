"""A flood of connections that send part of a request head and nothing
more, each from a loopback address of its own choosing (127.0.0.0/8)."""

import select
import socket
import threading

SLOW_HEAD = b"POST /v1/jobs HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nx-slow: "


class SlowHeaders:
    """Keeps `per_source` connections to (host, port) open from each of
    `sources`, each having sent SLOW_HEAD and nothing more, until the block
    ends: a connection the server answers or closes is replaced."""

    def __init__(self, host: str, port: int, sources: list[str], per_source: int):
        self.target = (host, port)
        self.per_source = per_source
        self.open: dict[str, list[socket.socket]] = {ip: [] for ip in sources}
        self.opened = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "SlowHeaders":
        self._top_up()
        self._thread.start()
        return self

    def __exit__(self, *_) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        for sockets in self.open.values():
            for sock in sockets:
                sock.close()

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            self._top_up()

    def _top_up(self) -> None:
        for ip, sockets in self.open.items():
            readable = select.select(sockets, [], [], 0)[0] if sockets else []
            for sock in readable:  # answered or closed by the server
                sockets.remove(sock)
                sock.close()
            while len(sockets) < self.per_source:
                try:
                    sock = socket.create_connection(self.target, timeout=2, source_address=(ip, 0))
                    sock.sendall(SLOW_HEAD)
                except OSError:
                    break
                sockets.append(sock)
                self.opened += 1
