#!/usr/bin/env python3
"""Replay a recorded watch stream as fast as the kernel can send it (sendfile from a file), so
the watch benchmark measures kinformer rather than the Python fake server's delivery rate.

    python3 bench/stream_replay.py record URL PATH_AND_QUERY COUNT FILE
        reads COUNT event lines of a watch (HTTP/1.0: plain lines) from the fake API server
        into FILE, e.g. PATH_AND_QUERY = "/api/v1/pods?watch=true&resourceVersion=123"
    python3 bench/stream_replay.py serve FILE RESOURCE_VERSION
        prints http://127.0.0.1:PORT, then answers
          GET ...?...watch=...   -> 200, waits for the next POST /_fake/release, sends FILE
                                    (sendfile), then keeps the connection open until the client
                                    closes it
          GET anything else      -> 200, an empty PodList at RESOURCE_VERSION
          POST /_fake/release    -> releases the watches waiting at that moment
          POST anything else     -> 200 {} (so /_fake/modify from the bench is accepted)

Standard library only. One thread per connection.
"""

import json
import os
import socket
import socketserver
import sys
import threading
from urllib.parse import urlsplit


def record(url, path, count, out):
    u = urlsplit(url)
    s = socket.create_connection((u.hostname, u.port))
    s.sendall(("GET %s HTTP/1.0\r\nHost: %s\r\n\r\n" % (path, u.netloc)).encode())
    data = bytearray()
    head = None
    lines = 0
    while lines < count:
        chunk = s.recv(1 << 20)
        if not chunk:
            break
        if head is None:
            data += chunk
            i = data.find(b"\r\n\r\n")
            if i < 0:
                continue
            head = bytes(data[:i])
            del data[: i + 4]
            if b" 200 " not in head.split(b"\r\n")[0]:
                sys.exit("record: server answered " + head.split(b"\r\n")[0].decode())
            lines = data.count(b"\n")
            continue
        data += chunk
        lines += chunk.count(b"\n")
    s.close()
    lines = bytes(data).split(b"\n")[:count]
    with open(out, "wb") as f:
        f.write(b"\n".join(lines) + b"\n")
    print("recorded %d events, %.1f MB" % (len(lines), os.path.getsize(out) / 1e6))


class Handler(socketserver.BaseRequestHandler):
    def handle(self):
        srv = self.server
        sock = self.request
        buf = b""
        while b"\r\n\r\n" not in buf:
            chunk = sock.recv(65536)
            if not chunk:
                return
            buf += chunk
        line = buf.split(b"\r\n", 1)[0].decode("latin-1")
        method, target = line.split(" ")[:2]
        if method == "POST":
            if target.startswith("/_fake/release"):
                with srv.cond:
                    srv.generation += 1
                    srv.cond.notify_all()
            body = b"{}"
            sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 2\r\nConnection: close\r\n\r\n" + body)
            return
        if "watch=" in target:
            with srv.cond:
                gen = srv.generation
            sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         b"Connection: close\r\n\r\n")
            with srv.cond:
                srv.cond.wait_for(lambda: srv.generation > gen)
            with open(srv.file, "rb") as f:
                sock.sendfile(f)
            # Stay open (a real watch does): the client decides when it has seen enough.
            try:
                while sock.recv(65536):
                    pass
            except OSError:
                pass
            return
        body = json.dumps({"kind": "PodList", "apiVersion": "v1",
                           "metadata": {"resourceVersion": srv.rv}, "items": []}).encode()
        sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


def serve(path, rv):
    srv = Server(("127.0.0.1", 0), Handler)
    srv.file = path
    srv.rv = rv
    srv.cond = threading.Condition()
    srv.generation = 0
    print("http://127.0.0.1:%d" % srv.server_address[1], flush=True)
    srv.serve_forever()


def main():
    if len(sys.argv) == 6 and sys.argv[1] == "record":
        record(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
    elif len(sys.argv) == 4 and sys.argv[1] == "serve":
        serve(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
