"""Response compression, as kube-apiserver does it.

kube-apiserver gzips a response when the request carries `Accept-Encoding: gzip` and the
serialized object (its first write: for a list, the whole list) is at least 128 KiB
(`defaultGzipThresholdBytes` in apiserver's endpoints/handlers/responsewriters), at gzip level 1
(`defaultGzipContentEncodingLevel`: least CPU for a ratio close to the higher levels). Watch
streams are never compressed. The response then carries `Content-Encoding: gzip` and
`Vary: Accept-Encoding`, and goes out chunked.

Hook: handler.App.send_list asks `wanted(x, size)` and, when true, hands the list to
`send_list` here instead of writing it itself.
"""

import zlib

THRESHOLD = 128 * 1024   # bytes of the uncompressed body
LEVEL = 1
CHUNK = 1 << 20          # uncompressed bytes compressed per chunk written


def accepts_gzip(value):
    """Whether an Accept-Encoding header value accepts gzip (an explicit q=0 refuses it)."""
    for item in (value or "").split(","):
        name, _, params = item.strip().partition(";")
        if name.strip().lower() not in ("gzip", "*"):
            continue
        q = 1.0
        for p in params.split(";"):
            k, _, v = p.strip().partition("=")
            if k.strip().lower() == "q":
                try:
                    q = float(v)
                except ValueError:
                    q = 0.0
        return q > 0
    return False


def wanted(x, size):
    """A response of size bytes to exchange x is compressed."""
    return size >= THRESHOLD and accepts_gzip(x.h.headers.get("Accept-Encoding"))


def send_list(x, head, items, tail=b"]}"):
    """Writes head, the items (comma-separated JSON objects) and tail gzip-compressed, as one
    chunked 200 response. A cut fault (handler.CUT_FAULTS) stops it half way, as for plain
    lists: the compressed stream then ends early."""
    from .handler import CUT_FAULTS, JSON
    f = x.fault
    x.sock.sendall(x._head(200, JSON, None, {"Content-Encoding": "gzip",
                                             "Vary": "Accept-Encoding"}))
    z = zlib.compressobj(LEVEL, zlib.DEFLATED, 31)  # wbits 31: the gzip format
    buf, size, sent, sep = [head + b"{"] if items else [head], len(head), 0, b""
    cut = None
    if f is not None and f.kind in CUT_FAULTS:
        cut = (len(head) + sum(o.size() for o in items)) // 2
    for o in items:
        if sep:
            buf.append(sep)
        buf.extend(o.pieces())
        size += len(sep) + o.size()
        sep = b",{"
        if size >= CHUNK:
            x.send_chunk(z.compress(b"".join(buf)) + z.flush(zlib.Z_SYNC_FLUSH))
            sent += size
            buf, size = [], 0
            if cut is not None and sent >= cut:
                x.cut(f)
    buf.append(tail)
    x.send_chunk(z.compress(b"".join(buf)) + z.flush())
    x.end_stream()
