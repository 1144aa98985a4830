"""HTTP handling: routing, the Kubernetes verbs, list, watch, control endpoints, faults.

One thread per connection (ThreadingHTTPServer). Responses are written straight to the socket
with as few, as large, writes as possible: small bodies as one sendall with their headers,
large lists and watch streams as chunked transfer in ~2 MiB chunks sent with sendmsg (the
chunk framing and the payload go out as one scatter/gather write, no extra copy).
"""

import base64
import bisect
import json
import select
import socket
import ssl
import struct
import sys
import threading
import time
import traceback
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, unquote, urlsplit

from . import aggregated, compression, crds, lifecycle, partial, ssa, subresources, tables
from .faults import LINE_FAULTS
from .impersonation import Authz
from .warning_headers import Warnings
from .generate import huge_pod
from .objects import ApiError, Obj, bad_request, expired, invalid, too_large_rv
from .patch import APPLY, apply_body, apply_patch
from .resources import dumps
from .selection import combine, parse_field_selector, parse_label_selector

CHUNK = 2 << 20           # chunked-transfer chunk size for large lists and watch batches
SMALL_BODY = 1 << 20      # lists below this go out with Content-Length in one write
JSON = "application/json"
TABLE_CT = "application/json;as=Table;v=v1;g=meta.k8s.io"
IDLE_POLL = 0.5           # a quiet watch checks this often whether its client went away
# Faults that cut a list body half way (a truncated chunk when the list is chunked).
CUT_FAULTS = ("drop", "drop_mid_line", "reset_mid_line", "truncated_chunk", "restart")
GRAB = 4096               # events a watch takes from the history per round

REASONS = {200: "OK", 201: "Created", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden",
           404: "Not Found", 405: "Method Not Allowed", 406: "Not Acceptable", 409: "Conflict",
           410: "Gone",
           415: "Unsupported Media Type", 422: "Unprocessable Entity",
           429: "Too Many Requests", 500: "Internal Server Error", 503: "Service Unavailable",
           504: "Gateway Timeout"}

_TRUE = ("1", "t", "T", "true", "TRUE", "True")
_FALSE = ("", "0", "f", "F", "false", "FALSE", "False")

VERSION = {"major": "1", "minor": "32", "gitVersion": "v1.32.0-fake",
           "gitCommit": "0000000000000000000000000000000000000000", "gitTreeState": "clean",
           "buildDate": "2024-12-11T00:00:00Z", "goVersion": "go1.23.4", "compiler": "gc",
           "platform": "linux/amd64"}



def dry_run(x, verb, options=None):
    """The request's dryRun: the query parameter, or for DELETE also the DeleteOptions body
    (kubectl and client-go send it there). Absent -> False, "All" -> True; anything else is
    refused as the real API server does (422 on the verb's options: CreateOptions, ...)."""
    values = []
    if x.query.get("dryRun") is not None:
        values.append(x.query["dryRun"])
    body = options.get("dryRun") if isinstance(options, dict) else None
    if isinstance(body, list):
        values.extend(body)
    elif body is not None:
        values.append(body)
    bad = [v for v in values if v != "All"]
    if bad:
        shown = "[%s]" % ",".join(json.dumps(v) for v in bad)
        raise ApiError(422, "Invalid", '%sOptions.meta.k8s.io "" is invalid: dryRun: Unsupported '
                       'value: %s: supported values: "All"' % (verb, shown),
                       {"group": "meta.k8s.io", "kind": verb + "Options",
                        "causes": [{"reason": "FieldValueNotSupported", "field": "dryRun",
                                    "message": 'Unsupported value: %s: supported values: "All"'
                                    % shown}]})
    return bool(values)

class Dropped(Exception):
    """The response was cut on purpose (fault injection) or the client went away."""


CONTINUE_EXPIRED = (
    "The provided continue parameter is too old to display a consistent list result. You can "
    "start a new list without the continue parameter, or use the continue token in this "
    "response to retrieve the remainder of the results. Continuing with the provided token "
    "results in an inconsistent list - objects that were created, modified, or deleted "
    "between the time the first chunk was returned and now may show up in the list.")


def field_manager(x):
    """The field manager of a write that is not an apply: the fieldManager parameter, else
    kube-apiserver's default from the User-Agent (fakeapi/ssa.py)."""
    return x.query.get("fieldManager") or ssa.manager_from_user_agent(
        x.h.headers.get("User-Agent"))


def _invalid_options(field, message, kind="Forbidden: "):
    """422 for bad list/watch options, as metainternalversion validation reports them."""
    return invalid("ListOptions", "", [(field, kind + message)], "meta.k8s.io")


def parse_bool(query, name):
    v = query.get(name)
    if v is None:
        return None
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise bad_request('invalid boolean value %r for parameter "%s"' % (v, name))


def parse_int(query, name, default=0):
    v = query.get(name)
    if v in (None, ""):
        return default
    try:
        return int(v)
    except ValueError:
        raise bad_request('invalid value %r for parameter "%s": must be an integer' % (v, name))


IOV_MAX = 1024  # buffers per sendmsg call (Linux)


def _sendmsg_all(sock, bufs):
    """Write a list of buffers with scatter/gather I/O: the kernel copies straight from the
    cached object bytes, no join in user space. Handles partial writes."""
    total = sum(map(len, bufs))
    n = sock.sendmsg(bufs)
    if n == total:
        return
    views = [memoryview(b) for b in bufs if len(b)]
    while True:
        while n:
            if n >= len(views[0]):
                n -= len(views[0])
                views.pop(0)
            else:
                views[0] = views[0][n:]
                n = 0
        if not views:
            return
        n = sock.sendmsg(views)


class Exchange:
    """One request and its response."""

    def __init__(self, app, h):
        self.app = app
        self.h = h
        self.sock = h.connection
        self.method = h.command
        url = urlsplit(h.path)
        self.path = unquote(url.path)
        self.query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        self.fault = None
        self.warnings = []  # Warning header values (warning_headers.py)
        self.started = False
        self.chunked = h.request_version != "HTTP/1.0"
        self.tls = isinstance(self.sock, ssl.SSLSocket)
        self.body = self._read_body()

    def _read_body(self):
        h = self.h
        if "chunked" in (h.headers.get("Transfer-Encoding") or "").lower():
            out = []
            while True:
                size = int(h.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while h.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(out)
                out.append(h.rfile.read(size))
                h.rfile.readline()
        n = int(h.headers.get("Content-Length") or 0)
        return h.rfile.read(n) if n > 0 else b""

    def json_body(self):
        try:
            return json.loads(self.body or b"null")
        except ValueError as e:
            raise bad_request("the body of the request could not be decoded as JSON: %s" % e)

    # -- writing -----------------------------------------------------------------------------

    def _head(self, code, ctype, length, extra=None):
        lines = ["HTTP/1.1 %d %s" % (code, REASONS.get(code, "Unknown")),
                 "Cache-Control: no-cache, private", "Content-Type: " + ctype,
                 "Date: " + formatdate(usegmt=True)]
        if length is not None:
            lines.append("Content-Length: %d" % length)
        elif self.chunked:
            lines.append("Transfer-Encoding: chunked")
        else:
            self.h.close_connection = True  # HTTP/1.0: the body ends with the connection
        for k, v in (extra or {}).items():
            lines.append("%s: %s" % (k, v))
        for w in self.warnings:
            lines.append("Warning: " + w)
        if self.h.close_connection:
            lines.append("Connection: close")
        self.started = True
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def send_bytes(self, code, body, ctype=JSON, extra=None):
        f = self.fault
        if f is not None and f.kind in CUT_FAULTS:
            # The body stops half way (Content-Length promised all of it).
            self.sock.sendall(self._head(code, ctype, len(body), extra) + body[:len(body) // 2])
            self.cut(f)
        if f is not None and f.kind == "malformed_line":
            body = body[:max(1, len(body) // 2)]  # truncated JSON, correct Content-Length
        self.sock.sendall(self._head(code, ctype, len(body), extra) + body)

    def send_json(self, code, obj, extra=None):
        self.send_bytes(code, dumps(obj), extra=extra)

    def send_status(self, err):
        extra = {}
        if err.retry_after is not None:
            extra["Retry-After"] = str(int(err.retry_after))
        self.send_bytes(err.code, dumps(err.status()), extra=extra)

    def start_stream(self, code=200, ctype=JSON):
        self.sock.sendall(self._head(code, ctype, None))

    def send_chunk(self, data):
        if not data:
            return
        if self.chunked:
            self._send((b"%x\r\n" % len(data), data, b"\r\n"))
        else:
            self.sock.sendall(data)

    def send_parts(self, parts, size):
        """One chunk made of len(parts) <= IOV_MAX - 2 buffers totalling size bytes."""
        if not size:
            return
        if self.chunked:
            parts.insert(0, b"%x\r\n" % size)
            parts.append(b"\r\n")
        self._send(parts)

    def _send(self, bufs):
        if self.tls:  # SSLSocket has no sendmsg
            self.sock.sendall(b"".join(bufs))
        else:
            _sendmsg_all(self.sock, bufs)

    def end_stream(self):
        if self.chunked:
            self.sock.sendall(b"0\r\n\r\n")

    def send_truncated_chunk(self, data, keep):
        """A chunk whose size line announces all of data but whose bytes stop after keep."""
        if self.chunked:
            self.sock.sendall(b"%x\r\n" % len(data) + data[:keep])
        else:
            self.sock.sendall(data[:keep])

    def cut(self, f):
        """End the response the way fault f says, once its partial body was sent."""
        if f.kind == "restart":
            self.app.begin_outage(f.seconds, f.restore)()
        self.abort(rst=f.kind == "reset_mid_line")

    def abort(self, rst=False):
        """Cut the connection: FIN without finishing the body, or RST."""
        self.h.close_connection = True
        try:
            if rst:
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.sock.close()
            else:
                self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        raise Dropped()

    def client_gone(self):
        try:
            r, _, _ = select.select([self.sock], [], [], 0)
            if not r:
                return False
            # Peek at the TCP level (for TLS too: SSLSocket.recv takes no flags).
            return socket.socket.recv(self.sock, 1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    def sleep(self, seconds):
        """Wait without sending; returns early (raising Dropped) if the client goes away."""
        end = time.monotonic() + seconds
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(0.1, left))
            if self.client_gone():
                raise Dropped()


class App:
    """Everything a request needs: store, registry, options, request log, faults."""

    def __init__(self, store, faults, opts, cluster=None):
        self.store = store
        self.registry = store.registry
        self.faults = faults
        self.opts = opts
        self.cluster = cluster
        self.requests = []
        self.requests_lock = threading.Lock()
        self.server_address = ""
        # Accepted credentials; POST /_fake/auth replaces them (token rotation in specs).
        self.auth_lock = threading.Lock()
        # Named tokens, impersonation, deny rules (impersonation.py) and RBAC (rbac.py).
        self.authz = Authz(opts, store)
        self.warnings = Warnings(opts, self.registry)  # Warning headers (warning_headers.py)
        self.tokens = set(opts.token or []) | self.authz.tokens()
        self.basic = set(getattr(opts, "basic_auth", None) or [])
        # Outages (/_fake/restart and the "restart" fault). main sets httpd and listen_again.
        self.httpd = None
        self.listen_again = None
        self.conns = set()             # open connection sockets, cut when the server goes down
        self.conns_lock = threading.Lock()
        self.outage_lock = threading.Lock()
        self.down = False              # from going down until main serves again
        self.back = threading.Event()  # set when an outage is over (main serves again)
        self.saved = None              # the state POST /_fake/snapshot saved, for restores

    def log(self, fmt, *args):
        if self.opts.verbose:
            sys.stderr.write("fake-apiserver: " + (fmt % args) + "\n")

    # -- entry -------------------------------------------------------------------------------

    def handle(self, h):
        x = Exchange(self, h)
        try:
            if x.path.startswith("/_fake/"):
                self.control(x)
                return
            self.log("%s %s", x.method, h.path)
            auth, user = self.authenticate(x)
            entry = {"method": x.method, "path": x.path, "query": x.query, "time": time.time()}
            accept = h.headers.get_all("Accept")
            if accept:  # every Accept line, joined as HTTP combines them: a repeat shows
                entry["accept"] = ", ".join(accept)
            if auth != "anonymous":  # only servers with authentication say who asked
                entry["auth"], entry["user"] = auth or "none", user
            entry.update(self.authz.log_fields(x))
            with self.requests_lock:
                self.requests.append(entry)
                if len(self.requests) > self.opts.max_requests:
                    del self.requests[:len(self.requests) // 2]
            if auth is None:
                raise ApiError(401, "Unauthorized", "Unauthorized")
            is_watch = "/watch/" in x.path or x.query.get("watch") in _TRUE
            try:
                self.authz.authorize(x, auth, user, is_watch)
            except ApiError as e:
                if e.code == 403:  # specs find denied requests by this
                    with self.requests_lock:
                        entry["forbidden"] = True
                raise
            x.warnings = self.warnings.for_request(x.method, x.path)
            x.fault = self.faults.take(x.method, x.path, x.query, is_watch)
            answered = False
            if x.fault is not None:
                self.log("fault %s on %s %s", x.fault.kind, x.method, h.path)
                answered = self.pre_fault(x, is_watch)
            if not answered:
                self.route(x)
        except ApiError as e:
            if x.started:  # too late for a status: the client sees a cut stream
                h.close_connection = True
                return
            x.fault = None
            x.send_status(e)
        except Dropped:
            h.close_connection = True
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, ssl.SSLError):
            # ssl.SSLError: a TLS client that went away mid-stream (SSLEOFError and kin).
            h.close_connection = True
        except Exception:
            traceback.print_exc()
            if not x.started:
                x.fault = None
                x.send_status(ApiError(500, "InternalError", "Internal error occurred: %s"
                                       % sys.exc_info()[1]))
            else:
                h.close_connection = True

    # -- outages ---------------------------------------------------------------------------------

    def begin_outage(self, seconds, restore=False):
        """Go down for `seconds`, as a restarted API server does: stop listening (new
        connections are refused), cut every open connection, then listen again on the same
        port. With restore the state comes back as POST /_fake/snapshot saved it (an etcd
        restore: older resourceVersions, other objects, no history). From now on every new
        request is reset; the returned function starts the outage proper."""
        with self.outage_lock:
            if self.down:
                raise ApiError(409, "Conflict", "the server is already down")
            if restore and self.saved is None:
                raise ApiError(409, "Conflict", "nothing to restore: POST /_fake/snapshot first")
            self.down = True
        self.log("down for %.1f s%s", seconds, " (restore)" if restore else "")
        return lambda: threading.Thread(target=self._outage, args=(seconds, restore),
                                        name="outage", daemon=True).start()

    def _outage(self, seconds, restore):
        t0 = time.monotonic()
        self.httpd.shutdown()  # serve_forever returns; main waits for self.back
        self.httpd.socket.close()
        self.cut_connections()
        if restore:
            self.store.restore(self.saved)
        time.sleep(max(0.0, seconds - (time.monotonic() - t0)))
        while True:
            try:
                self.listen_again()
                break
            except OSError as e:  # the port is still held by a closing socket: retry
                self.log("cannot listen again yet: %s", e)
                time.sleep(0.1)
        self.log("up again")
        self.back.set()  # main clears `down` and serves again

    def track(self, sock, open_):
        with self.conns_lock:
            if open_:
                self.conns.add(sock)
            else:
                self.conns.discard(sock)

    def cut_connections(self):
        with self.conns_lock:
            conns = list(self.conns)
        for sock in conns:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def authenticate(self, x):
        """(method, user) of the request, or (None, "") when it must get a 401. Like
        kube-apiserver's union authenticator: a client certificate first, then the
        Authorization header; with no authentication configured everything is anonymous."""
        with self.auth_lock:
            tokens, basic = set(self.tokens), set(self.basic)
        if not tokens and not basic and not self.opts.client_ca:
            return "anonymous", ""
        if self.opts.client_ca and x.tls:
            cert = x.sock.getpeercert()
            if cert:
                cn = [v for rdn in cert.get("subject", ()) for k, v in rdn if k == "commonName"]
                return "x509", cn[0] if cn else ""
        header = x.h.headers.get("Authorization") or ""
        if header.startswith("Bearer ") and header[7:] in tokens:
            return "bearer", self.authz.token_user(header[7:])
        if header.startswith("Basic ") and basic:
            try:
                pair = base64.b64decode(header[6:], validate=True).decode("utf-8")
            except ValueError:
                pair = None
            if pair in basic:
                return "basic", pair.split(":", 1)[0]
        return None, ""

    def pre_fault(self, x, is_watch):
        """Faults that act before the response starts."""
        f = x.fault
        if f.kind == "status" or (f.kind == "error_event" and not is_watch):
            x.fault = None
            raise ApiError(f.code, f.reason, f.message,
                           {"retryAfterSeconds": int(f.retry_after)} if f.retry_after else None,
                           retry_after=f.retry_after if f.retry_after is not None else
                           (1 if f.code in (429, 503) else None))
        if f.kind == "reset":
            x.abort(rst=True)
        if f.kind == "stall" and (not is_watch or f.after_events == 0):
            x.fault = None
            x.sleep(f.seconds)
        if f.kind == "close_immediately" and not is_watch:
            x.abort()
        if f.kind == "respond":  # a body of the rule's choosing, in place of the real answer
            x.fault = None
            if f.seconds > 0:
                x.sleep(f.seconds)
            x.send_bytes(f.code, f.body)
            return True
        return False

    # -- routing -----------------------------------------------------------------------------

    def route(self, x):
        p = x.path.rstrip("/") or "/"
        if x.method == "GET":
            if aggregated.answer(self, x, p):
                return
            doc = self.discovery(p)
            if doc is not None:
                x.send_json(200, doc)
                return
            if p in ("/healthz", "/livez", "/readyz"):
                x.send_bytes(200, b"ok", "text/plain; charset=utf-8")
                return
            if p == "/openapi/v3":
                x.send_json(200, self.registry.openapi_root())
                return
            doc = None
            if p.startswith("/openapi/v3/"):
                doc = self.registry.openapi_gv(p[len("/openapi/v3/"):])
            if doc is not None:
                x.send_json(200, doc)
                return
            if p.startswith("/openapi/"):
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
        r = self.parse_resource_path(p)
        if r is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        rt, ns, name, sub, watch_path = r
        m = x.method
        watch = watch_path or parse_bool(x.query, "watch")
        if m == "GET" and watch:
            return Watch(self, x, rt, ns, name).run()
        if sub == "scale":
            return subresources.scale(self, x, rt, ns or "", name, dry_run)
        if m == "GET" and name is None:
            return self.do_list(x, rt, ns)
        if m == "GET":
            obj = self.store.get(rt, ns or "", name)
            if partial.negotiate(x.h.headers.get("Accept"), rt, False):
                return x.send_bytes(200, partial.body(rt, obj), partial.OBJECT_CT)
            return x.send_bytes(200, obj.full(rt))
        if m == "POST" and name is None:
            if rt.namespaced and ns is None:
                raise ApiError(405, "MethodNotAllowed",
                               "the server does not allow this method on the requested resource")
            dry = dry_run(x, "Create")
            obj = self.store.create(rt, ns, crds.admit(rt, x.json_body()), dry_run=dry,
                                    manager=field_manager(x))
            crds.created(self, rt, obj, dry)
            return x.send_bytes(201, obj.full(rt))
        if m == "PUT" and name is not None:
            obj = self.store.update(rt, ns or "", name, x.json_body(), sub,
                                    dry_run=dry_run(x, "Update"), manager=field_manager(x))
            return x.send_bytes(200, obj.full(rt))
        if m == "PATCH" and name is not None:
            return self.do_patch(x, rt, ns or "", name, sub)
        if m == "DELETE" and name is not None and sub is None:
            pre, opts = None, None
            if x.body:
                opts = x.json_body() or {}
                pre = opts.get("preconditions") if isinstance(opts, dict) else None
            obj = self.store.delete(rt, ns or "", name, pre, dry_run=dry_run(x, "Delete", opts),
                                    policy=lifecycle.policy_of(opts, x.query))
            return x.send_bytes(200, obj.full(rt))
        if m == "DELETE" and name is None:
            return self.do_delete_collection(x, rt, ns)
        raise ApiError(405, "MethodNotAllowed",
                       "the server does not allow this method on the requested resource")

    def parse_resource_path(self, p):
        """-> (rt, namespace or None, name or None, subresource or None, legacy watch) or None."""
        segs = [s for s in p.split("/") if s]
        if segs[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", segs[2:]
        elif len(segs) >= 3 and segs[0] == "apis":
            group, version, rest = segs[1], segs[2], segs[3:]
        else:
            return None
        watch_path = bool(rest) and rest[0] == "watch"
        if watch_path:
            rest = rest[1:]
        ns = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            inner = self.registry.get(group, version, rest[2])
            if inner is not None:
                if not inner.namespaced:
                    return None
                ns, rest = rest[1], rest[2:]
        if not rest or len(rest) > 3:
            return None
        rt = self.registry.get(group, version, rest[0])
        if rt is None:
            return None
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if sub is not None and not subresources.served(rt, sub):
            return None
        if rt.namespaced and ns is None and name is not None:
            return None
        return rt, ns, name, sub, watch_path

    def discovery(self, p):
        reg = self.registry
        if p == "/version":
            return VERSION
        if p == "/api":
            return reg.api_versions(self.server_address)
        if p == "/apis":
            return reg.api_group_list()
        segs = [s for s in p.split("/") if s]
        if segs == ["api", "v1"]:
            return reg.api_resource_list("", "v1")
        if len(segs) == 2 and segs[0] == "apis":
            return reg.api_group(segs[1])
        if len(segs) == 3 and segs[0] == "apis":
            return reg.api_resource_list(segs[1], segs[2])
        return None

    # -- list ---------------------------------------------------------------------------------

    def _token(self, rv, start, issued):
        raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start + "\x00",
                          "issued": issued}, separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    def _untoken(self, token):
        try:
            d = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
            return int(d["rv"]), d["start"], float(d["issued"])
        except (ValueError, KeyError, TypeError) as e:
            raise bad_request("invalid continue token: %s" % e)

    def do_list(self, x, rt, ns):
        q = x.query
        metadata_only = partial.negotiate(x.h.headers.get("Accept"), rt, True)
        pred = combine(parse_label_selector(q.get("labelSelector")),
                       parse_field_selector(q.get("fieldSelector"), rt))
        rv = q.get("resourceVersion", "")
        match = q.get("resourceVersionMatch", "")
        limit = max(0, parse_int(q, "limit"))
        cont = q.get("continue", "")
        if "sendInitialEvents" in q:
            raise _invalid_options("sendInitialEvents", "sendInitialEvents is forbidden for list")
        if match and not rv:
            raise _invalid_options("resourceVersionMatch", "resourceVersionMatch is forbidden "
                                   "unless resourceVersion is provided")
        if match not in ("", "Exact", "NotOlderThan"):
            raise _invalid_options("resourceVersionMatch", 'Unsupported value: "%s": supported '
                                   'values: "Exact", "NotOlderThan", ""' % match, "")
        if match == "Exact" and rv == "0":
            raise _invalid_options("resourceVersionMatch", 'resourceVersionMatch "exact" is '
                                   'forbidden for resourceVersion "0"')
        if cont and rv not in ("", "0"):
            raise bad_request("specifying resource version is not allowed when using continue")
        n = None
        if rv not in ("", "0"):
            try:
                n = int(rv)
            except ValueError:
                raise bad_request('invalid resource version "%s"' % rv)
        store = self.store
        with store.lock:
            if cont:
                snap_rv, start, issued = self._untoken(cont)
                if time.time() - issued > self.opts.continue_ttl or snap_rv < store.floor:
                    raise expired(CONTINUE_EXPIRED)
            else:
                start, issued = "", time.time()
                if n is not None and n > store.head and self.opts.rv_wait > 0:
                    store.cond.wait_for(lambda: store.head >= n, self.opts.rv_wait)
                if n is not None and n > store.head:
                    raise too_large_rv(n, store.head)
                # Exact when asked, and (legacy rule) for a paginated list at a given rv.
                exact = n is not None and (match == "Exact" or (match == "" and limit > 0))
                snap_rv = n if exact else store.head
                if rv == "0" and self.opts.watch_cache:
                    limit = 0  # the watch cache ignores limit for resourceVersion=0
            objs, keys = store.snapshot_locked(rt, snap_rv)
            lo, hi = 0, len(keys)
            if ns is not None and rt.namespaced:
                lo, hi = bisect.bisect_left(keys, ns + "/"), bisect.bisect_left(keys, ns + "0")
            if start:
                lo = max(lo, bisect.bisect_left(keys, start))
            remaining = None
            if pred is None:
                end = min(hi, lo + limit) if limit else hi
                items = [objs[k] for k in keys[lo:end]]
                more = end < hi
                remaining = hi - end
            else:
                items, i = [], lo
                while i < hi:
                    o = objs[keys[i]]
                    i += 1
                    if pred(o):
                        items.append(o)
                        if limit and len(items) >= limit:
                            break
                more = bool(limit) and i < hi
        meta = {"resourceVersion": str(snap_rv)}
        if more:
            meta["continue"] = self._token(snap_rv, items[-1].key, issued)
            if remaining is not None:
                meta["remainingItemCount"] = remaining
        if x.fault is not None and x.fault.kind == "oversized":
            items.append(Obj.from_dict(rt, huge_pod(x.fault.bytes)))
        if tables.wants_table(x.h.headers.get("Accept")):
            t = tables.table(rt, [o.to_dict() for o in items], meta,
                             q.get("includeObject", "Metadata"))
            return x.send_bytes(200, dumps(t), TABLE_CT)
        if metadata_only:
            return self.send_list(x, rt, meta, partial.items(rt, items), partial.LIST_PREFIX,
                                  partial.LIST_CT)
        self.send_list(x, rt, meta, items)

    def send_list(self, x, rt, meta, items, prefix=None, ctype=JSON):
        head = (prefix or rt.list_prefix) + dumps(meta) + b',"items":['
        total = len(head) + sum(o.size() for o in items) + 2 * len(items) + 2
        if compression.wanted(x, total):
            return compression.send_list(x, head, items)
        if total < SMALL_BODY:
            body = head + (b"{" + b",{".join(o.tail for o in items) if items else b"") + b"]}"
            return x.send_bytes(200, body, ctype)
        f = x.fault
        cut = total // 2 if f is not None and f.kind in CUT_FAULTS else None
        x.start_stream(ctype=ctype)
        # Chunks of [sep, item, sep, item, ...] written with sendmsg: the kernel copies from
        # the cached bytes directly.
        parts, size, sent, sep = [], 0, 0, head + b"{"
        for o in items:
            parts.append(sep)
            parts.extend(o.pieces())
            size += len(sep) + o.size()
            sep = b",{"
            if size >= CHUNK or len(parts) >= IOV_MAX - 10:
                sent = self._send_part(x, parts, size, cut, sent)
                parts, size = [], 0
        parts.append(b"]}")
        self._send_part(x, parts, size + 2, cut, sent)
        if f is not None and f.kind == "malformed_line":
            x.send_chunk(b"\x00 this is not JSON")
        x.end_stream()

    def _send_part(self, x, parts, size, cut, sent):
        if cut is not None and sent + size >= cut:
            data = b"".join(parts)
            if x.fault.kind == "truncated_chunk":
                x.send_truncated_chunk(data, max(1, cut - sent))
            else:
                x.send_chunk(data[:max(1, cut - sent)])
            x.cut(x.fault)  # the body stops in the middle
        x.send_parts(parts, size)
        return sent + size

    # -- other verbs ----------------------------------------------------------------------------

    def do_patch(self, x, rt, ns, name, sub):
        ctype = x.h.headers.get("Content-Type") or ""
        dry = dry_run(x, "Patch")
        if ctype.split(";")[0].strip().lower() == APPLY:
            return self.do_apply(x, rt, ns, name, sub, dry)
        obj = self.store.modify(rt, ns, name, lambda d: apply_patch(ctype, d, x.body), sub,
                                dry_run=dry, manager=field_manager(x))
        x.send_bytes(200, obj.full(rt))

    def do_apply(self, x, rt, ns, name, sub, dry):
        """Server-side apply (fakeapi/ssa.py): fieldManager required, force takes the fields
        other managers own; creates what does not exist yet."""
        manager = x.query.get("fieldManager")
        if not manager:
            raise invalid("PatchOptions", "", [("fieldManager", "Required value: is required "
                                                "for apply patch")], "meta.k8s.io")
        force = bool(parse_bool(x.query, "force"))
        body = apply_body(x.body)
        try:
            obj = self.store.modify(rt, ns, name,
                                    lambda d: ssa.apply(rt, d, body, manager, force, sub), sub,
                                    dry_run=dry)
        except ApiError as e:
            if e.code != 404 or sub is not None:
                raise
            d = ssa.apply(rt, {}, body, manager, force)
            d.setdefault("metadata", {})["name"] = name
            obj = self.store.create(rt, ns, d, dry_run=dry)
            return x.send_bytes(201, obj.full(rt))
        x.send_bytes(200, obj.full(rt))

    def do_delete_collection(self, x, rt, ns):
        pred = combine(parse_label_selector(x.query.get("labelSelector")),
                       parse_field_selector(x.query.get("fieldSelector"), rt))
        dry = dry_run(x, "Delete", x.json_body() if x.body else None)
        with self.store.lock:
            victims = [o for o in self.store.objects[rt].values()
                       if (ns is None or o.ns == ns) and (pred is None or pred(o))]
            victims.sort(key=lambda o: o.key)
            deleted = [self.store.delete(rt, o.ns, o.name, dry_run=dry) for o in victims
                       if o.key in self.store.objects[rt]]  # the collector may have taken it
            head = self.store.head
        meta = dumps({"resourceVersion": str(head)})
        body = rt.list_prefix + meta + b',"items":[' + b",".join(o.raw() for o in deleted) + b"]}"
        x.send_bytes(200, body)

    # -- control endpoints ---------------------------------------------------------------------

    def control(self, x):
        store, m, p = self.store, x.method, x.path.rstrip("/")
        try:
            if p == "/_fake/requests" and m == "GET":
                with self.requests_lock:
                    return x.send_json(200, list(self.requests))
            if p == "/_fake/requests" and m == "DELETE":
                with self.requests_lock:
                    n = len(self.requests)
                    self.requests = []
                return x.send_json(200, {"cleared": n})
            if p == "/_fake/faults" and m == "POST":
                return x.send_json(200, {"active": self.faults.add(x.json_body())})
            if p == "/_fake/faults" and m == "GET":
                return x.send_json(200, self.faults.list())
            if p == "/_fake/faults" and m == "DELETE":
                return x.send_json(200, {"cleared": self.faults.clear()})
            if p == "/_fake/objects" and m == "POST":
                return self.control_objects(x)
            if p == "/_fake/modify" and m == "POST":
                return self.control_modify(x)
            if p == "/_fake/release" and m == "POST":
                first, last, n = store.release_held()
                return x.send_json(200, {"released": n, "first_resourceVersion": str(first),
                                         "last_resourceVersion": str(last),
                                         "resourceVersion": str(last)})
            if p == "/_fake/snapshot" and m == "POST":
                self.saved = store.save()
                return x.send_json(200, {"resourceVersion": str(self.saved["head"]),
                                         "objects": sum(map(len, self.saved["objects"].values()))})
            if p == "/_fake/restart" and m == "POST":
                body = x.json_body() or {}
                if not isinstance(body, dict):
                    raise bad_request("POST /_fake/restart wants {\"seconds\": S, \"restore\": bool}")
                seconds = float(body.get("seconds", 5))
                restore = bool(body.get("restore"))
                go = self.begin_outage(seconds, restore)
                with store.lock:
                    head = store.head
                x.h.close_connection = True
                x.send_json(200, {"down": seconds, "restore": restore,
                                  "resourceVersion": str(self.saved["head"] if restore else head)})
                return go()
            if p == "/_fake/compact" and m == "POST":
                return x.send_json(200, {"resourceVersion": str(store.compact())})
            if p == "/_fake/watches" and m == "GET":
                with store.lock:
                    return x.send_json(200, dict(store.watches))
            if p == "/_fake/state" and m == "GET":
                return self.control_state(x)
            if p == "/_fake/info" and m == "GET":
                with store.lock:
                    info = {"resourceVersion": str(store.head), "floor": str(store.floor),
                            "history": store.history, "events_kept": len(store.log),
                            "watches": dict(store.watches),
                            "objects": {rt.name: len(o) for rt, o in store.objects.items() if o},
                            "churn_ops": self.cluster.churn_ops if self.cluster else 0}
                return x.send_json(200, info)
            if p == "/_fake/auth" and m == "POST":
                body = x.json_body() or {}
                if not isinstance(body, dict):
                    raise bad_request("POST /_fake/auth wants {\"tokens\": [...], \"basic\": [...]}")
                with self.auth_lock:
                    if "tokens" in body:
                        self.tokens = set(str(t) for t in body["tokens"] or [])
                    if "basic" in body:
                        self.basic = set(str(b) for b in body["basic"] or [])
                    counts = {"tokens": len(self.tokens), "basic": len(self.basic)}
                return x.send_json(200, counts)
            if p == "/_fake/auth" and m == "GET":
                with self.auth_lock:
                    return x.send_json(200, {"tokens": len(self.tokens), "basic": len(self.basic),
                                             "client_ca": bool(self.opts.client_ca)})
            if p == "/_fake/authz":
                return self.authz.control(x)
            if p == "/_fake/warnings":
                return self.warnings.control(x)
            if p == "/_fake/churn" and m == "POST":
                body = x.json_body() or {}
                self.cluster.set_churn(float(body.get("rate", 0)))
                return x.send_json(200, {"rate": self.cluster.churn_rate})
            raise ApiError(404, "NotFound", "no control endpoint %s %s" % (m, p))
        except ApiError as e:
            x.send_status(e)

    def _rt_arg(self, name):
        rt = self.registry.lookup(name or "")
        if rt is None:
            raise bad_request("unknown resource %r" % name)
        return rt

    def control_objects(self, x):
        body = x.json_body()
        default_rt = self._rt_arg(x.query["resource"]) if "resource" in x.query else None
        if isinstance(body, dict):
            if "resource" in body:
                default_rt = self._rt_arg(body["resource"])
            body = body.get("items", [])
        if not isinstance(body, list):
            raise bad_request("POST /_fake/objects wants a list of objects or {items: [...]}")
        pairs = []
        for d in body:
            rt = self.registry.for_object(d) if isinstance(d, dict) else None
            rt = rt or default_rt
            if rt is None:
                raise bad_request("cannot tell the resource of an object without kind/apiVersion "
                                  "(pass ?resource=pods)")
            pairs.append((rt, d))
        created, updated = self.store.put_objects(pairs)
        x.send_json(200, {"created": created, "updated": updated,
                          "resourceVersion": str(self.store.head)})

    def control_modify(self, x):
        body = x.json_body() or {}
        rt = self._rt_arg(body.get("resource", "pods"))
        pred = parse_label_selector(body.get("label_selector"))
        count = int(body.get("count", 1))
        rate = float(body.get("rate", 0))
        if rate > 0:
            # Paced in the background: batches every 10 ms, for latency measurements.
            def pace():
                done, t0 = 0, time.monotonic()
                while done < count:
                    due = min(count, int((time.monotonic() - t0) * rate) + 1)
                    if due > done:
                        self.store.touch(rt, due - done, body.get("namespace"), pred, offset=done)
                        done = due
                    time.sleep(0.01)
            threading.Thread(target=pace, daemon=True).start()
            with self.store.lock:
                return x.send_json(200, {"scheduled": count, "rate": rate,
                                         "resourceVersion": str(self.store.head)})
        if body.get("hold"):
            n = self.store.hold_touches(rt, count, body.get("namespace"), pred)
            return x.send_json(200, {"held": n, "resourceVersion": str(self.store.head)})
        first, last, n = self.store.touch(rt, count, body.get("namespace"), pred)
        x.send_json(200, {"modified": n, "first_resourceVersion": str(first) if first else None,
                          "last_resourceVersion": str(last) if last else None,
                          "resourceVersion": str(self.store.head)})

    def control_state(self, x):
        rt = self._rt_arg(x.query.get("resource", "pods"))
        ns = x.query.get("namespace")
        with self.store.lock:
            head = self.store.head
            items = [self.store.objects[rt][k] for k in self.store.sorted_keys_locked(rt)]
        if ns:
            items = [o for o in items if o.ns == ns]
        if x.query.get("brief") in _TRUE:
            return x.send_json(200, {"resourceVersion": str(head),
                                     "objects": {o.key: str(o.rv) for o in items}})
        body = (b'{"resourceVersion":"%d","items":[' % head + b",".join(o.raw() for o in items)
                + b"]}")
        x.send_bytes(200, body)


class Watch:
    """One watch stream. Reads the shared history from a cursor (the last resourceVersion it
    has dealt with), so every watcher sees every write in order, filtered for itself."""

    def __init__(self, app, x, rt, ns, name):
        self.app, self.x, self.rt, self.ns = app, x, rt, ns
        self.store = app.store
        self.opts = app.opts
        q = x.query
        name_pred = (lambda o: o.name == name) if name else None
        self.pred = combine(parse_label_selector(q.get("labelSelector")),
                            parse_field_selector(q.get("fieldSelector"), rt), name_pred)
        self.table = tables.wants_table(x.h.headers.get("Accept"))
        self.partial = partial.negotiate(x.h.headers.get("Accept"), rt, False)
        self.include_object = q.get("includeObject", "Metadata")
        self.bookmarks = bool(parse_bool(q, "allowWatchBookmarks"))
        self.rv = q.get("resourceVersion", "")
        self.send_initial = parse_bool(q, "sendInitialEvents")
        match = q.get("resourceVersionMatch", "")
        if self.send_initial is not None:
            errs = []
            if match != "NotOlderThan":
                errs.append(("resourceVersionMatch", "Forbidden: sendInitialEvents requires "
                             "setting resourceVersionMatch to NotOlderThan"))
            if not self.bookmarks:
                errs.append(("allowWatchBookmarks", "Forbidden: sendInitialEvents requires "
                             "setting allowWatchBookmarks to true"))
            if errs:
                raise invalid("ListOptions", "", errs, "meta.k8s.io")
        elif match:
            raise _invalid_options("resourceVersionMatch", "resourceVersionMatch is forbidden "
                                   "for watch unless sendInitialEvents is provided")
        self.n = None
        if self.rv not in ("", "0"):
            try:
                self.n = int(self.rv)
            except ValueError:
                raise bad_request('invalid resource version "%s"' % self.rv)
        timeout = parse_int(q, "timeoutSeconds", 0)
        self.deadline = time.monotonic() + (timeout if timeout > 0 else self.opts.watch_timeout)
        self.fault = x.fault
        self.events_sent = 0
        self.cursor = 0
        self.held = None  # out_of_order: the event held back until the next one was sent

    # -- lines ---------------------------------------------------------------------------------

    def _line(self, type_, obj):
        if self.partial:
            return partial.watch_line(self.rt, type_, obj)
        if self.table:
            t = tables.table(self.rt, [obj.to_dict()], {"resourceVersion": str(obj.rv)},
                             self.include_object)
            return [b'{"type":"' + type_.encode() + b'","object":' + dumps(t) + b"}\n"]
        return [self.rt.event_prefix[type_], *obj.pieces(), b"}\n"]

    def _bookmark(self, rv, initial_end=False):
        md = {"resourceVersion": str(rv)}
        if initial_end:
            md["annotations"] = {"k8s.io/initial-events-end": "true"}
        if self.partial:
            return partial.bookmark_line(md)
        return [b'{"type":"BOOKMARK","object":' + self.rt.kind_prefix + b'"metadata":'
                + dumps(md) + b"}}\n"]

    def _error(self, err):
        return [b'{"type":"ERROR","object":' + dumps(err.status()) + b"}\n"]

    def _translate(self, ev):
        """The event as this watcher sees it: (type, obj) or None."""
        o = ev.obj
        if self.ns is not None and o.ns != self.ns:
            return None
        pred = self.pred
        if pred is None:
            return ev.type, o
        if ev.type == "MODIFIED":
            now, before = pred(o), pred(ev.prev)
            if now:
                return ("MODIFIED" if before else "ADDED"), o
            # Left the selection: DELETED with the previous content at the event's rv.
            return ("DELETED", ev.prev.with_rv(ev.rv)) if before else None
        return (ev.type, o) if pred(o) else None

    # -- sending -------------------------------------------------------------------------------

    def _send_lines(self, lines):
        """lines: [(parts, is_event)]. False when the stream was ended by a fault."""
        x = self.x
        if self.fault is None:
            buf, size = [], 0
            for parts, _ in lines:
                buf.extend(parts)
                size += sum(map(len, parts))
                if size >= CHUNK or len(buf) >= IOV_MAX - 10:
                    x.send_parts(buf, size)
                    buf, size = [], 0
            if buf:
                x.send_parts(buf, size)
            return True
        for parts, is_event in lines:
            f = self.fault
            if f is not None and f.kind in LINE_FAULTS and self.events_sent >= f.after_events:
                data = b"".join(parts)
                half = max(1, len(data) // 2)
                if f.kind in ("drop_mid_line", "reset_mid_line"):
                    x.send_chunk(data[:half])
                    x.cut(f)
                if f.kind == "truncated_chunk":
                    x.send_truncated_chunk(data, half)
                    x.cut(f)
                if f.kind == "duplicate_event" and is_event:
                    x.send_chunk(data + data)  # the same event twice
                    self.events_sent += 1
                    self.fault = None
                    continue
                if f.kind == "out_of_order":
                    if not is_event:
                        continue  # no bookmark may pass the held event
                    if self.held is None:
                        self.held = data
                        continue
                    x.send_chunk(data + self.held)  # the newer event first
                    self.held = None
                    self.events_sent += 2
                    self.fault = None
                    continue
            x.send_chunk(b"".join(parts))
            if is_event:
                self.events_sent += 1
            if not self._fault_check():
                return False
        return True

    def _send_events(self, events):
        rt = self.rt
        if self.fault is not None or self.table or self.partial or self.pred is not None:
            lines = []
            for ev in events:
                if ev.rt is rt:
                    t = self._translate(ev)
                    if t is not None:
                        lines.append((self._line(*t), True))
            return self._send_lines(lines)
        # Hot path: no selector, no fault: prefix + cached bytes, ~2 MiB per write.
        prefix = rt.event_prefix
        plen = {k: len(v) + 2 for k, v in prefix.items()}
        ns = self.ns
        buf, size = [], 0
        send = self.x.send_parts
        limit = IOV_MAX - 10
        for ev in events:
            if ev.rt is not rt:
                continue
            o = ev.obj
            if ns is not None and o.ns != ns:
                continue
            buf.append(prefix[ev.type])
            buf += o.pieces()
            buf.append(b"}\n")
            size += plen[ev.type] + o.size()
            if size >= CHUNK or len(buf) >= limit:
                send(buf, size)
                buf, size = [], 0
        if buf:
            send(buf, size)
        return True

    def _fault_check(self):
        """Act on a pending fault once events_sent reached its after_events. False when the
        stream is over."""
        f = self.fault
        if f is None or f.kind in LINE_FAULTS or self.events_sent < f.after_events:
            return True
        self.fault = None
        x = self.x
        if f.kind == "drop":
            x.abort()
        if f.kind == "restart":
            x.cut(f)
        if f.kind == "reset":
            x.abort(rst=True)
        if f.kind == "stall":
            x.sleep(f.seconds)
        elif f.kind == "malformed_line":
            x.send_chunk(b'{"type":"MODIFIED","object":{"kind":"Pod" this is not JSON}\n')
        elif f.kind == "oversized":
            pod = huge_pod(f.bytes)
            pod["metadata"]["resourceVersion"] = str(self.cursor)
            x.send_chunk(b'{"type":"ADDED","object":' + dumps(pod) + b"}\n")
            self.events_sent += 1
        elif f.kind == "close_immediately":
            x.end_stream()
            return False
        elif f.kind == "error_event":
            x.send_chunk(b"".join(self._error(ApiError(f.code, f.reason, f.message))))
            x.end_stream()
            return False
        return True

    # -- the stream ----------------------------------------------------------------------------

    def run(self):
        store, x = self.store, self.x
        err = None
        initial = None
        with store.lock:
            n = self.n
            if n is not None and n > store.head and self.opts.rv_wait > 0:
                store.cond.wait_for(lambda: store.head >= n, self.opts.rv_wait)
            if n is not None and n > store.head:
                err = too_large_rv(n, store.head)
            elif self.send_initial or (self.send_initial is None and n is None):
                # "Get state and start at most recent": every current object as ADDED.
                objs = store.objects[self.rt]
                keys = store.sorted_keys_locked(self.rt)
                if self.ns is not None and self.rt.namespaced:
                    # keys sort as "ns/name": a namespace is the range ["ns/", "ns0")
                    keys = keys[bisect.bisect_left(keys, self.ns + "/"):
                                bisect.bisect_left(keys, self.ns + "0")]
                initial = [objs[k] for k in keys]
                if self.pred is not None:
                    initial = [o for o in initial if self.pred(o)]
                self.cursor = store.head
            elif n is None:
                self.cursor = store.head  # sendInitialEvents=false: start at the current rv
            elif n < store.floor:
                err = expired("too old resource version: %d (%d)" % (n, store.floor))
            else:
                self.cursor = n
            if err is None:
                store.set_cursor(self, self.cursor)
        try:
            x.start_stream(ctype=TABLE_CT if self.table else
                           partial.OBJECT_CT if self.partial else JSON)
            store.watch_started(self.rt)
            try:
                self._stream(err, initial)
            finally:
                store.watch_ended(self.rt)
        finally:
            with store.lock:
                store.set_cursor(self, None)

    def _stream(self, err, initial):
        store, x = self.store, self.x
        if not self._fault_check():
            return
        if err is not None:
            x.send_chunk(b"".join(self._error(err)))
            x.end_stream()
            return
        if initial is not None:
            if not self._send_lines([(self._line("ADDED", o), True) for o in initial]):
                return
            if self.send_initial:
                if not self._send_lines([(self._bookmark(self.cursor, True), False)]):
                    return
        interval = self.opts.bookmark_interval
        next_bm = time.monotonic() + interval
        while True:
            now = time.monotonic()
            if now >= self.deadline:
                x.end_stream()
                return
            events = None
            with store.cond:
                if store.head == self.cursor:
                    wait = min(self.deadline - now, IDLE_POLL)
                    if self.bookmarks:
                        wait = min(wait, next_bm - now)
                    if wait > 0:
                        store.cond.wait(wait)
                if self.cursor < store.events_kept_after():
                    err = expired("too old resource version: %d (%d)" % (self.cursor, store.floor))
                elif store.head > self.cursor:
                    # At most GRAB events at a time, so the cursor (which keeps the history
                    # this watch still needs from being trimmed) follows what was really sent.
                    events = store.events_after_locked(self.cursor, GRAB)
                    self.cursor = events[-1].rv
                    store.set_cursor(self, self.cursor)
            if err is not None:
                # Fell more than --watch-slack events behind: like the watch cache, end it.
                x.send_chunk(b"".join(self._error(err)))
                x.end_stream()
                return
            if events:
                if not self._send_events(events):
                    return
            elif x.client_gone():
                raise Dropped()
            if self.bookmarks and time.monotonic() >= next_bm:
                if not self._send_lines([(self._bookmark(self.cursor), False)]):
                    return
                next_bm = time.monotonic() + interval


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-apiserver"
    app = None  # set by main on a subclass

    def setup(self):
        if isinstance(self.request, ssl.SSLSocket):
            self.request.settimeout(10)
            self.request.do_handshake()  # failures end here, reported by Server.handle_error
            self.request.settimeout(None)
        super().setup()
        # Small writes (headers, single watch events) must not wait for delayed ACKs.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.app.track(self.connection, True)

    def handle(self):
        if self.app.down:
            # Accepted while the server was going down: reset it, as a dying process would.
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            return
        super().handle()

    def finish(self):
        self.app.track(self.connection, False)
        super().finish()

    def _dispatch(self):
        self.app.handle(self)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _dispatch

    def log_message(self, fmt, *args):
        if self.app.opts.verbose:
            sys.stderr.write("fake-apiserver: %s - %s\n" % (self.address_string(), fmt % args))

    def log_request(self, code="-", size="-"):
        pass  # we write responses ourselves; requests are logged by App when verbose
