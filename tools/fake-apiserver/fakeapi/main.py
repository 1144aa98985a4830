"""Command line, start-up and shutdown of the fake API server."""

import argparse
import gc
import json
import os
import signal
import socket
import ssl
import sys
import threading
import time
from http.server import ThreadingHTTPServer

from . import configmaps, crds, impersonation, warning_headers
from .faults import Faults
from .generate import Cluster
from .handler import App, Handler
from .objects import ApiError
from .resources import Registry, builtin_types, parse_custom
from .store import Store


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="server.py", description="A fake Kubernetes API server for tests, demos and "
        "benchmarks. Prints its URL as the first line of stdout, then serves until killed.")
    a = p.add_argument
    a("--port", type=int, default=0, metavar="N",
      help="port on 127.0.0.1 (0 or absent: a free one)")
    a("--verbose", action="store_true", help="log requests and faults to stderr")
    a("--token", action="append", default=[], metavar="TOKEN",
      help="require Authorization: Bearer TOKEN on every API request (repeatable: any of them; "
           "POST /_fake/auth replaces the set at run time)")
    a("--basic-auth", action="append", default=[], metavar="USER:PASSWORD",
      help="accept HTTP basic authentication with this user and password (repeatable)")
    a("--tls-cert", metavar="FILE", help="serve HTTPS with this certificate (PEM; with --tls-key)")
    a("--tls-key", metavar="FILE", help="private key of --tls-cert (PEM)")
    a("--client-ca", metavar="FILE",
      help="accept client certificates signed by this CA as authentication (HTTPS only); "
           "with --client-ca every API request needs a valid certificate or the --token")
    a("--history", type=int, default=10000, metavar="N",
      help="write events kept for watches (default 10000)")
    a("--watch-slack", type=int, default=250000, metavar="N",
      help="events an open watch may lag behind before it is ended with 410 (default 250000)")
    a("--continue-ttl", type=float, default=300.0, metavar="SECONDS",
      help="seconds a list continue token stays valid (default 300)")
    a("--bookmark-interval", type=float, default=1.0, metavar="SECONDS",
      help="seconds between BOOKMARK events on watches that allow them (default 1)")
    a("--watch-timeout", type=float, default=1800.0, metavar="SECONDS",
      help="end watches without timeoutSeconds after this many seconds (default 1800)")
    a("--rv-wait", type=float, default=0.0, metavar="SECONDS",
      help="how long a request for a future resourceVersion waits before the 504 "
           "'Too large resource version' (a real server waits 3 s; default 0)")
    a("--watch-cache", action="store_true",
      help="serve resourceVersion=0 lists in one page, ignoring limit, like the watch cache")
    a("--resource", action="append", default=[], metavar="GROUP/VERSION/PLURAL/KIND[/cluster]",
      help="serve a custom resource (repeatable)")
    a("--crd", action="append", default=[], metavar="FILE",
      help="create this CustomResourceDefinition (JSON, one object or a list) at start-up, as "
           "a POST would (repeatable)")
    a("--widget-crd", action="store_true",
      help="create the Widget CRD (widgets.example.com, v1, namespaced, status and scale "
           "subresources, short name wd) at start-up")
    a("--no-aggregated-discovery", action="store_true",
      help="answer GET /api and /apis with the legacy documents only, like a server before "
           "Kubernetes 1.26 (default: aggregated discovery for clients that ask for it)")
    a("--fault", action="append", default=[], metavar="JSON",
      help="a fault rule or a JSON list of rules (repeatable)")
    a("--pods", type=int, default=0, metavar="N",
      help="generate N realistic pods (~9 KB JSON each)")
    a("--configmaps", type=int, default=0, metavar="N",
      help="generate N small ConfigMaps (~1 KB JSON each, fakeapi/configmaps.py)")
    a("--namespaces", type=int, default=10, metavar="K",
      help="namespaces for --pods and --configmaps (default 10)")
    a("--pods-per-deployment", type=int, default=100, metavar="N",
      help="Deployment size for --pods (default 100)")
    a("--sample-cluster", action="store_true",
      help="a small demo cluster: nodes, namespaces, deployments, pods, services, endpointslices")
    a("--churn", type=float, default=0.0, metavar="RATE",
      help="keep creating, updating and deleting pods at about RATE writes/s")
    a("--seed", type=int, default=1, metavar="N", help="random seed for generated data (default 1)")
    a("--no-default-namespaces", action="store_true",
      help="start empty instead of with default, kube-system, kube-public, kube-node-lease")
    a("--max-requests", type=int, default=100000, metavar="N",
      help="request log size cap (default 100000)")
    a("--exit-with-parent", action="store_true",
      help="exit when the parent process dies (for test helpers)")
    a("--exit-on-stdin-eof", action="store_true", help="exit when stdin reaches end of file")
    impersonation.add_args(a)
    warning_headers.add_args(a)
    return p.parse_args(argv)


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128
    verbose = False

    def handle_error(self, request, client_address):
        # Clients that vanish mid-request or fail the TLS handshake are normal in tests.
        if self.verbose:
            super().handle_error(request, client_address)


def wrap_listener(sock, opts):
    """HTTPS: wrap the listening socket. The handshake runs later in the connection's own
    thread (Handler.setup), so a slow or broken client cannot block accept()."""
    if not opts.tls_cert:
        return sock
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(opts.tls_cert, opts.tls_key)
    ctx.set_alpn_protocols(["http/1.1"])  # no HTTP/2 here; Go clients fall back to 1.1
    if opts.client_ca:
        ctx.load_verify_locations(opts.client_ca)
        # Optional at the TLS level, like kube-apiserver: a request without a certificate can
        # still authenticate with the token.
        ctx.verify_mode = ssl.CERT_OPTIONAL
    return ctx.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)


def _exit_now(*_):
    # Daemon threads may sit in blocking writes; the kernel closes every socket on exit.
    sys.stderr.flush()
    os._exit(0)


def _watch_parent():
    ppid = os.getppid()
    try:  # Linux: get SIGTERM the moment the parent dies.
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass

    def poll():
        while True:
            if os.getppid() != ppid:
                _exit_now()
            time.sleep(0.5)
    threading.Thread(target=poll, name="parent-watch", daemon=True).start()
    if os.getppid() != ppid:
        _exit_now()


def _watch_stdin():
    def read():
        try:
            while sys.stdin.buffer.read(65536):
                pass
        finally:
            _exit_now()
    threading.Thread(target=read, name="stdin-watch", daemon=True).start()


def main(argv=None):
    opts = parse_args(sys.argv[1:] if argv is None else argv)
    if opts.exit_with_parent:
        _watch_parent()
    if opts.exit_on_stdin_eof:
        _watch_stdin()
    signal.signal(signal.SIGTERM, _exit_now)
    signal.signal(signal.SIGINT, _exit_now)

    types = builtin_types()
    try:
        for spec in opts.resource:
            types.append(parse_custom(spec))
        registry = Registry(types)
    except ValueError as e:
        print("server.py: %s" % e, file=sys.stderr)
        return 2
    store = Store(registry, history=opts.history, watch_slack=opts.watch_slack)
    faults = Faults()
    try:
        for spec in opts.fault:
            faults.add(json.loads(spec))
    except (ValueError, ApiError) as e:
        print("server.py: bad --fault: %s" % e, file=sys.stderr)
        return 2

    try:
        defs = [crds.widget_crd()] if opts.widget_crd else []
        for path in opts.crd:
            with open(path) as f:
                d = json.load(f)
            defs.extend(d if isinstance(d, list) else [d])
        for d in defs:
            crds.install(store, d)
    except (OSError, ValueError, ApiError) as e:
        print("server.py: bad --crd: %s" % e, file=sys.stderr)
        return 2

    cluster = Cluster(store, seed=opts.seed)
    if not opts.no_default_namespaces:
        cluster.ensure_namespaces(["default", "kube-node-lease", "kube-public", "kube-system"])
    if opts.sample_cluster:
        cluster.sample_cluster()
    if opts.pods > 0:
        cluster.add_pods(opts.pods, opts.namespaces, opts.pods_per_deployment)
    if opts.configmaps > 0:
        configmaps.add_configmaps(store, opts.configmaps, opts.namespaces, opts.seed)
    # Everything generated so far lives as long as the server: keep the cyclic GC off it.
    gc.collect()
    gc.freeze()

    app = App(store, faults, opts, cluster)
    handler = type("BoundHandler", (Handler,), {"app": app})
    if any(":" not in b for b in opts.basic_auth):
        print("server.py: --basic-auth wants USER:PASSWORD", file=sys.stderr)
        return 2
    if bool(opts.tls_cert) != bool(opts.tls_key) or (opts.client_ca and not opts.tls_cert):
        print("server.py: --tls-cert and --tls-key go together; --client-ca needs them",
              file=sys.stderr)
        return 2
    try:
        httpd = Server(("127.0.0.1", opts.port), handler)
        httpd.socket = wrap_listener(httpd.socket, opts)
    except (OSError, ssl.SSLError) as e:
        print("server.py: cannot listen on 127.0.0.1:%d: %s" % (opts.port, e), file=sys.stderr)
        return 1
    httpd.verbose = opts.verbose
    port = httpd.server_address[1]
    app.server_address = "127.0.0.1:%d" % port
    app.httpd = httpd

    def listen_again():
        """After an outage: a new listening socket on the same port."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", port))
            sock.listen(httpd.request_queue_size)
        except OSError:
            sock.close()
            raise
        httpd.socket = wrap_listener(sock, opts)
    app.listen_again = listen_again
    if opts.churn > 0:
        cluster.set_churn(opts.churn)
    sys.stdout.write("%s://127.0.0.1:%d\n" % ("https" if opts.tls_cert else "http", port))
    sys.stdout.flush()
    app.log("serving %d objects at resourceVersion %d",
            sum(map(len, store.objects.values())), store.head)
    try:
        while True:
            httpd.serve_forever(poll_interval=0.5)
            if not app.down:
                break
            # An outage (App.begin_outage): wait until it listens again, then serve again.
            app.back.wait()
            app.back.clear()
            with app.outage_lock:
                app.down = False
    finally:
        httpd.server_close()
    return 0
