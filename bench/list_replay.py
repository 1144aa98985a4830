#!/usr/bin/env python3
"""Replay a recorded paginated list with sendfile, so that a list benchmark measures the client
rather than the Python fake server (which otherwise takes a core's share of the floor).

    python3 bench/list_replay.py record URL PATH LIMIT DIR [EVENTS]
        walks PATH (e.g. /api/v1/pods) on the fake API server at URL in pages of LIMIT,
        following `continue`, and writes DIR/page-NNNNN.json (each response body as sent) and
        DIR/index.json (the path, the tokens, the list's resourceVersion); with EVENTS, then
        makes EVENTS MODIFIED events (/_fake/modify) and records them from a watch at the
        list's resourceVersion into DIR/burst.jsonl (the server needs --history > EVENTS)
    python3 bench/list_replay.py urls DIR BASE_URL
        prints a curl config (`curl -K -`) fetching every page in order, to /dev/null: the floor
    python3 bench/list_replay.py serve DIR
        prints http://127.0.0.1:PORT, then answers (HTTP/1.1, keep-alive):
          GET PATH?...            -> the first page, or with continue=T the page T leads to
                                     (sendfile from DIR; tokens are not checked for expiry)
          GET PATH?watch=...      -> 200; with a recorded burst, waits for the next
                                     POST /_fake/release and sends it (sendfile); then nothing
                                     more until the client closes
          GET ...watch=...        -> 200 and nothing more until the client closes: an idle watch
          GET anything else       -> 200, an empty list at the recorded resourceVersion
                                     (other resources' lists, for many informers on one client)
          POST /_fake/release     -> 200 {}, releases the bursts of the watches waiting then
          POST anything else      -> 200 {}

Standard library only. One thread per connection; a page costs the server a sendfile call.
"""

import json
import os
import socket
import socketserver
import sys
import threading
import urllib.request
from urllib.parse import parse_qs, quote, urlsplit


def record(url, path, limit, out, events=0):
    os.makedirs(out, exist_ok=True)
    tokens, token, n, total, rv = {}, "", 0, 0, ""
    while True:
        q = "limit=%d" % limit + ("&continue=" + quote(token, safe="") if token else "")
        with urllib.request.urlopen("%s%s?%s" % (url, path, q)) as r:
            body = r.read()
        with open(os.path.join(out, "page-%05d.json" % n), "wb") as f:
            f.write(body)
        total += len(body)
        meta = json.loads(body[:body.index(b',"items":')] + b"}")["metadata"]
        rv = rv or meta["resourceVersion"]
        n += 1
        token = meta.get("continue", "")
        if not token:
            break
        tokens[token] = n
    if events > 0:
        import stream_replay
        req = urllib.request.Request(url + "/_fake/modify", method="POST", data=json.dumps(
            {"resource": path.rsplit("/", 1)[1], "count": events}).encode(),
            headers={"Content-Type": "application/json"})
        urllib.request.urlopen(req).read()
        stream_replay.record(url, "%s?watch=true&resourceVersion=%s" % (path, rv), events,
                             os.path.join(out, "burst.jsonl"))
    with open(os.path.join(out, "index.json"), "w") as f:
        json.dump({"path": path, "limit": limit, "pages": n, "bytes": total, "rv": rv,
                   "tokens": tokens}, f)
    print("recorded %d pages, %.1f MB" % (n, total / 1e6))


def urls(d, base):
    with open(os.path.join(d, "index.json")) as f:
        idx = json.load(f)
    by_page = {p: t for t, p in idx["tokens"].items()}
    for i in range(idx["pages"]):
        q = "limit=%d" % idx["limit"] + ("&continue=" + quote(by_page[i], safe="") if i else "")
        print('url = "%s%s?%s"\noutput = "/dev/null"' % (base, idx["path"], q))


class Handler(socketserver.BaseRequestHandler):
    def handle(self):
        srv, sock, buf = self.server, self.request, b""
        while True:
            while b"\r\n\r\n" not in buf:
                chunk = sock.recv(65536)
                if not chunk:
                    return
                buf += chunk
            head, buf = buf.split(b"\r\n\r\n", 1)
            lines = head.decode("latin-1").split("\r\n")
            method, target = lines[0].split(" ")[:2]
            length = 0
            for h in lines[1:]:
                k, _, v = h.partition(":")
                if k.strip().lower() == "content-length":
                    length = int(v)
            while len(buf) < length:
                chunk = sock.recv(65536)
                if not chunk:
                    return
                buf += chunk
            buf = buf[length:]
            u = urlsplit(target)
            q = parse_qs(u.query)
            if method != "GET":
                if u.path == "/_fake/release":
                    with srv.cond:
                        srv.generation += 1
                        srv.cond.notify_all()
                self.send(b"{}")
            elif "watch" in q and q["watch"][0] not in ("0", "false"):
                sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                             b"Connection: close\r\n\r\n")
                if u.path == srv.index["path"] and os.path.exists(srv.burst):
                    with srv.cond:
                        gen = srv.generation
                        srv.cond.wait_for(lambda: srv.generation > gen)
                    with open(srv.burst, "rb") as f:
                        sock.sendfile(f)
                try:
                    while sock.recv(65536):
                        pass
                except OSError:
                    pass
                return
            elif u.path == srv.index["path"]:
                page = srv.index["tokens"].get(q.get("continue", [""])[0], 0)
                name = os.path.join(srv.dir, "page-%05d.json" % page)
                with open(name, "rb") as f:
                    size = os.fstat(f.fileno()).st_size
                    sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                 b"Content-Length: %d\r\n\r\n" % size)
                    sock.sendfile(f)
            else:
                self.send(b'{"kind":"List","apiVersion":"v1","metadata":{"resourceVersion":"%s"}'
                          b',"items":[]}' % srv.index["rv"].encode())

    def send(self, body):
        self.request.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                             b"Content-Length: %d\r\n\r\n" % len(body) + body)


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128


def serve(d):
    srv = Server(("127.0.0.1", 0), Handler)
    srv.dir = d
    srv.burst = os.path.join(d, "burst.jsonl")
    srv.cond = threading.Condition()
    srv.generation = 0
    with open(os.path.join(d, "index.json")) as f:
        srv.index = json.load(f)
    srv.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    print("http://127.0.0.1:%d" % srv.server_address[1], flush=True)
    srv.serve_forever()


def main():
    a = sys.argv[1:]
    if len(a) in (5, 6) and a[0] == "record":
        record(a[1], a[2], int(a[3]), a[4], int(a[5]) if len(a) == 6 else 0)
    elif len(a) == 3 and a[0] == "urls":
        urls(a[1], a[2])
    elif len(a) == 2 and a[0] == "serve":
        serve(a[1])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
