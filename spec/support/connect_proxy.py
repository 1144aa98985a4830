"""A tiny HTTP CONNECT proxy for specs (Python standard library only).

    python3 connect_proxy.py [USER:PASSWORD]

Listens on a free 127.0.0.1 port and prints "PORT" as its first stdout line. Each CONNECT
host:port is logged to stdout as "CONNECT host:port" (flushed); with USER:PASSWORD a request
without the matching Proxy-Authorization: Basic header gets 407. Exits when stdin closes.
"""
import base64
import socket
import sys
import threading


def pipe(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def serve(conn, auth):
    f = conn.makefile("rb")
    request = f.readline().decode("latin-1").split()
    headers = {}
    while True:
        line = f.readline().decode("latin-1").strip()
        if not line:
            break
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    if len(request) < 2 or request[0] != "CONNECT":
        conn.sendall(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
        conn.close()
        return
    if auth and headers.get("proxy-authorization") != "Basic " + base64.b64encode(auth.encode()).decode():
        sys.stdout.write("DENIED %s\n" % request[1])
        sys.stdout.flush()
        conn.sendall(b"HTTP/1.1 407 Proxy Authentication Required\r\n"
                     b"Proxy-Authenticate: Basic realm=\"spec\"\r\nContent-Length: 0\r\n\r\n")
        conn.close()
        return
    sys.stdout.write("CONNECT %s\n" % request[1])
    sys.stdout.flush()
    host, _, port = request[1].rpartition(":")
    try:
        upstream = socket.create_connection((host.strip("[]"), int(port)), timeout=5)
    except OSError:
        conn.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
        conn.close()
        return
    upstream.settimeout(None)
    conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
    threading.Thread(target=pipe, args=(conn, upstream), daemon=True).start()
    threading.Thread(target=pipe, args=(upstream, conn), daemon=True).start()


def main():
    auth = sys.argv[1] if len(sys.argv) > 1 else None
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(64)
    sys.stdout.write("%d\n" % lsock.getsockname()[1])
    sys.stdout.flush()

    def accept():
        while True:
            conn, _ = lsock.accept()
            threading.Thread(target=serve, args=(conn, auth), daemon=True).start()
    threading.Thread(target=accept, daemon=True).start()
    sys.stdin.read()  # until the spec closes our stdin (or dies)


if __name__ == "__main__":
    main()
