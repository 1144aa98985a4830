"""Warning response headers, as kube-apiserver sends them (RFC 7234 5.5, `299 - "text"`):
deprecation warnings for a deprecated group version, and admission-like warnings from rules.

- `--deprecated GROUP/VERSION` (repeatable): every request for a resource under
  /apis/GROUP/VERSION/ (or /api/v1/ for `v1`) answers with
  `Warning: 299 - "GROUP/VERSION KIND is deprecated"` (KIND from the served type, else the
  plural), as kube-apiserver does for a deprecated version; discovery documents get none.
- `POST /_fake/warnings` adds rules `{"path": regex, "method"?: "POST", "text": "..."}` (a rule
  or a list); each request whose path the regex searches (and whose method matches) gets one
  Warning per matching rule, until `DELETE /_fake/warnings`. `GET` lists them.

The handler asks for_request(method, path) once per API request and writes the values as
`Warning:` headers; control endpoints never get warnings.
"""

import re
import threading

from .objects import ApiError


def add_args(a):
    a("--deprecated", action="append", default=[], metavar="GROUP/VERSION",
      help="answer requests of this group version with a deprecation Warning header "
           "(repeatable; 'v1' for the core group)")


def header_value(text):
    """`299 - "text"` with the quoted-string escapes."""
    return '299 - "%s"' % text.replace("\\", "\\\\").replace('"', '\\"')


_PATH = re.compile(r"^/(?:api/(v1)|apis/([^/]+)/([^/]+))(?:/namespaces/[^/]+)?(?:/([^/]+))?")


class Warnings:
    def __init__(self, opts, registry):
        self.registry = registry
        self.deprecated = set(getattr(opts, "deprecated", None) or [])
        self.lock = threading.Lock()
        self.rules = []

    def for_request(self, method, path):
        out = []
        if self.deprecated:
            m = _PATH.match(path)
            if m:
                group, version = (m.group(2) or ""), (m.group(1) or m.group(3))
                gv = "%s/%s" % (group, version) if group else version
                plural = m.group(4)
                if gv in self.deprecated and plural:  # resources, not discovery documents
                    rt = self.registry.get(group, version, plural)
                    out.append(header_value("%s %s is deprecated"
                                            % (gv, rt.kind if rt is not None else plural)))
        with self.lock:
            rules = list(self.rules)
        for r in rules:
            if r["method"] and r["method"] != method:
                continue
            if r["re"].search(path):
                out.append(header_value(r["text"]))
        return out

    def control(self, x):
        """POST / GET / DELETE /_fake/warnings."""
        if x.method == "POST":
            body = x.json_body()
            rules = body if isinstance(body, list) else [body]
            parsed = []
            for r in rules:
                if not isinstance(r, dict) or not isinstance(r.get("text"), str) or not r["text"]:
                    raise ApiError(400, "BadRequest",
                                   'POST /_fake/warnings wants {"path": regex, "text": "..."}')
                try:
                    rx = re.compile(r.get("path") or "")
                except re.error as e:
                    raise ApiError(400, "BadRequest", "bad path regex: %s" % e)
                parsed.append({"path": r.get("path") or "", "method": r.get("method"),
                               "text": r["text"], "re": rx})
            with self.lock:
                self.rules.extend(parsed)
                n = len(self.rules)
            return x.send_json(200, {"active": n})
        if x.method == "GET":
            with self.lock:
                return x.send_json(200, [{k: v for k, v in r.items() if k != "re"}
                                         for r in self.rules])
        if x.method == "DELETE":
            with self.lock:
                n = len(self.rules)
                self.rules = []
            return x.send_json(200, {"cleared": n})
        raise ApiError(405, "MethodNotAllowed", "GET, POST or DELETE")
