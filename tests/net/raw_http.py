"""Reads an HTTP/1.1 answer from a raw socket, for tests that send what an
HTTP client would not (broken framing, stalls, floods)."""

import socket


def read_answer(sock: socket.socket) -> tuple[int, dict, bytes]:
    """One answer from `sock`: (status, headers with lower-case names, body
    of the length the headers declare). Fails if the connection closes
    before all of it arrived."""
    buffer = b""
    while b"\r\n\r\n" not in buffer:
        chunk = sock.recv(65536)
        assert chunk, f"the connection closed without an answer: {buffer!r}"
        buffer += chunk
    head, _, body = buffer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, "the connection closed in the middle of the answer"
        body += chunk
    return status, headers, body
