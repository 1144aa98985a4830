"""Fault injection rules.

A rule matches a request by method, path (regular expression, searched), watch-ness and a
subset of query parameters; the first active matching rule is consumed (times -1 = forever)
and its action decides what the client sees. See docs/fake-apiserver.md for the format.
"""

import json
import re
import threading

from .objects import DEFAULT_MESSAGES, DEFAULT_REASONS, bad_request

ACTIONS = ("status", "drop", "reset", "drop_mid_line", "reset_mid_line", "truncated_chunk",
           "stall", "malformed_line", "oversized", "close_immediately", "error_event",
           "duplicate_event", "out_of_order", "restart", "respond")
# Watch faults that act on the next line to send (rather than between lines).
LINE_FAULTS = ("drop_mid_line", "reset_mid_line", "truncated_chunk", "duplicate_event",
               "out_of_order")
_PARAMS = ("status", "code", "reason", "message", "retry_after", "seconds", "bytes", "restore",
           "body")


class Fault:
    """An action chosen for one request."""

    def __init__(self, kind, after_events=0, **params):
        self.kind = kind
        self.after_events = after_events
        self.code = int(params.get("status") or params.get("code") or 500)
        self.reason = params.get("reason") or DEFAULT_REASONS.get(self.code, "InternalError")
        self.message = params.get("message") or DEFAULT_MESSAGES.get(
            self.code, "injected fault (%d %s)" % (self.code, self.reason))
        self.retry_after = params.get("retry_after")
        self.seconds = float(params.get("seconds", {"restart": 5, "respond": 0}.get(kind, 10)))
        self.restore = bool(params.get("restore"))
        self.bytes = int(params.get("bytes", 20 * 1024 * 1024))
        body = params.get("body", "")
        self.body = (body if isinstance(body, str) else json.dumps(body)).encode("utf-8")

    def __repr__(self):
        return "<Fault %s after %d>" % (self.kind, self.after_events)


class Rule:
    def __init__(self, spec):
        if not isinstance(spec, dict):
            raise bad_request("a fault rule must be a JSON object")
        self.spec = spec
        self.method = (spec.get("method") or "").upper() or None
        try:
            self.path = re.compile(spec["path"]) if spec.get("path") else None
        except re.error as e:
            raise bad_request("bad path regex %r: %s" % (spec.get("path"), e))
        self.watch = spec.get("watch")
        self.query = spec.get("query") or {}
        self.times = int(spec.get("times", 1))
        self.after_events = int(spec.get("after_events", 0))
        action = spec.get("action")
        params = {k: spec[k] for k in _PARAMS if k in spec}
        if isinstance(action, dict):
            params.update({k: v for k, v in action.items() if k != "type"})
            kind = action.get("type")
            if kind == "respond":
                params.setdefault("code", 200)
            if kind is None and ("status" in action or "code" in action):
                kind = "status"
        else:
            kind = action
        if kind is None and "status" in params:
            kind = "status"
        if kind not in ACTIONS:
            raise bad_request("unknown fault action %r (one of %s)" % (kind, ", ".join(ACTIONS)))
        self.kind = kind
        self.params = params

    def matches(self, method, path, query, is_watch):
        if self.method and self.method != method:
            return False
        if self.path and not self.path.search(path):
            return False
        if self.watch is not None and bool(self.watch) != is_watch:
            return False
        for k, v in self.query.items():
            if v is None:
                if k in query:
                    return False
            elif query.get(k) != (v if isinstance(v, str) else _str(v)):
                return False
        return True

    def describe(self):
        return dict(self.spec, times=self.times)


def _str(v):
    if v is True:
        return "true"
    if v is False:
        return "false"
    return str(v)


class Faults:
    def __init__(self):
        self.lock = threading.Lock()
        self.rules = []

    def add(self, specs):
        if isinstance(specs, dict):
            specs = [specs]
        if not isinstance(specs, list):
            raise bad_request("faults must be a rule object or a list of them")
        rules = [Rule(s) for s in specs]
        with self.lock:
            self.rules.extend(rules)
            return len(self.rules)

    def clear(self):
        with self.lock:
            n = len(self.rules)
            self.rules = []
            return n

    def list(self):
        with self.lock:
            return [r.describe() for r in self.rules]

    def take(self, method, path, query, is_watch):
        """The Fault for this request, consuming one use of the first matching rule."""
        with self.lock:
            for r in self.rules:
                if r.matches(method, path, query, is_watch):
                    if r.times > 0:
                        r.times -= 1
                        if r.times == 0:
                            self.rules.remove(r)
                    return Fault(r.kind, r.after_events, **r.params)
        return None
