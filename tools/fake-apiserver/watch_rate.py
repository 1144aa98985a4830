#!/usr/bin/env python3
"""Measure how fast the fake API server delivers watch events (a raw-socket client that
counts lines cheaply, so it measures the server, not itself).

    python3 tools/fake-apiserver/watch_rate.py URL PATH_AND_QUERY COUNT

Prints events, bytes, seconds and events/s once COUNT event lines arrived, then closes. Time
and bytes are counted from the first byte after the response headers.
"""

import socket
import sys
import time
from urllib.parse import urlsplit


def main():
    url, path, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    u = urlsplit(url)
    s = socket.create_connection((u.hostname, u.port))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    t0 = time.monotonic()
    # HTTP/1.0: the server streams plain lines without chunk framing, so counting b"\n"
    # (a fast single-byte count) counts events.
    s.sendall(("GET %s HTTP/1.0\r\nHost: %s\r\n\r\n" % (path, u.netloc)).encode())
    lines = total = 0
    buf = bytearray(16 << 20)
    view = memoryview(buf)
    # The clock starts at the first event byte, not at the request: a benchmark may hold the
    # events back (/_fake/modify with "hold") and release them later.
    head = bytearray()
    while True:
        n = s.recv_into(view)
        if n == 0:
            break
        head += buf[:n]
        i = head.find(b"\r\n\r\n")
        if i >= 0 and len(head) > i + 4:
            t0 = time.monotonic()
            total = len(head) - i - 4
            lines = head.count(b"\n", i + 4)
            break
    while lines < count:
        n = s.recv_into(view)
        if n == 0:
            break
        total += n
        lines += buf.count(b"\n", 0, n)
    dt = time.monotonic() - t0
    s.close()
    print("%d events, %.1f MB in %.3f s: %.0f events/s, %.0f MB/s"
          % (lines, total / 1e6, dt, lines / dt, total / 1e6 / dt))


if __name__ == "__main__":
    main()
