"""Stored objects and API errors.

An Obj is immutable: every write makes a new one, so the store, the watch history and
responses being written by other threads can share records without copying or locking.
Its JSON is kept as bytes (`tail`: the serialized object without kind/apiVersion and without
the opening '{'), so a list item is b'{' + tail and a watch line is a precomputed prefix +
tail + b'}\\n'. Nothing on the list/watch paths re-serializes an object.
"""

import json

from .resources import dumps

# Canonical order of metadata fields (the API server's own order). It matters beyond looks:
# only string-valued fields precede resourceVersion, so the first '"resourceVersion":"' in an
# object's bytes is always metadata.resourceVersion and can be spliced without parsing.
_META_ORDER = ("name", "generateName", "namespace", "selfLink", "uid", "resourceVersion",
               "generation", "creationTimestamp", "deletionTimestamp",
               "deletionGracePeriodSeconds", "labels", "annotations", "ownerReferences",
               "finalizers", "managedFields")

_RV_MARK = b'"resourceVersion":"'
TOUCH_ANNOTATION = "fake.kinformer.io/touched-at"
_TOUCH_MARK = ('"%s":"' % TOUCH_ANNOTATION).encode()


class ApiError(Exception):
    """An error answered as a metav1.Status object."""

    def __init__(self, code, reason, message, details=None, retry_after=None):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.retry_after = retry_after

    def status(self):
        return status_dict(self.code, self.reason, self.message, self.details)


DEFAULT_REASONS = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound",
                   405: "MethodNotAllowed", 409: "Conflict", 410: "Expired", 415:
                   "UnsupportedMediaType", 422: "Invalid", 429: "TooManyRequests",
                   500: "InternalError", 503: "ServiceUnavailable", 504: "Timeout"}

DEFAULT_MESSAGES = {401: "Unauthorized", 403: "forbidden",
                    404: "the server could not find the requested resource",
                    410: "The resourceVersion for the provided list is too old.",
                    429: "Too many requests, please try again later.",
                    500: "Internal error occurred: injected fault",
                    503: "the server is currently unable to handle the request",
                    504: "Timeout: request did not complete within the allotted timeout"}


def status_dict(code, reason, message, details=None):
    d = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
         "message": message, "reason": reason}
    if details:
        d["details"] = details
    d["code"] = code
    return d


def qualified(rt):
    """'pods' or 'deployments.apps', as error messages name a resource."""
    return rt.name


def _details(rt, name):
    d = {"name": name}
    if rt.group:
        d["group"] = rt.group
    d["kind"] = rt.plural
    return d


def not_found(rt, name):
    return ApiError(404, "NotFound", '%s "%s" not found' % (qualified(rt), name),
                    _details(rt, name))


def already_exists(rt, name):
    return ApiError(409, "AlreadyExists", '%s "%s" already exists' % (qualified(rt), name),
                    _details(rt, name))


def conflict(rt, name, why="the object has been modified; please apply your changes to the "
                           "latest version and try again"):
    return ApiError(409, "Conflict", 'Operation cannot be fulfilled on %s "%s": %s'
                    % (qualified(rt), name, why), _details(rt, name))


def bad_request(message):
    return ApiError(400, "BadRequest", message)


def invalid(kind, name, causes, group=None):
    """422 Invalid, e.g. invalid("Pod", "", [("metadata.name", "Required value: ...")])."""
    qual = kind if not group else "%s.%s" % (kind, group)
    msg = '%s "%s" is invalid: %s' % (qual, name, ", ".join("%s: %s" % c for c in causes))
    det = {"name": name}
    if group is not None:
        det["group"] = group
    det["kind"] = kind
    det["causes"] = [{"reason": "FieldValueInvalid", "message": m, "field": f} for f, m in causes]
    return ApiError(422, "Invalid", msg, det)


def expired(message):
    return ApiError(410, "Expired", message)


def too_large_rv(requested, current):
    return ApiError(504, "Timeout",
                    "Timeout: Too large resource version: %d, current: %d" % (requested, current),
                    {"causes": [{"reason": "ResourceVersionTooLarge",
                                 "message": "Too large resource version"}],
                     "retryAfterSeconds": 1}, retry_after=1)


def normalize(d):
    """Reorder an object dict the way the API server writes it (metadata first, its fields in
    canonical order), dropping kind/apiVersion. Returns a new top-level dict."""
    md = d.get("metadata") or {}
    meta = {k: md[k] for k in _META_ORDER if k in md}
    for k, v in md.items():
        if k not in meta:
            meta[k] = v
    out = {"metadata": meta}
    for k, v in d.items():
        if k not in ("kind", "apiVersion", "metadata"):
            out[k] = v
    return out


class Obj:
    """An immutable stored object version. key is "ns/name" or "name".

    Its JSON is either `_tail` (bytes) or, for versions made by /_fake/modify, a splice of a
    shared base: `_splice` = (memoryview(base), cut1, cut2, cut3, cut4, piece_a, piece_b),
    meaning base[:cut1] + piece_a + base[cut2:cut3] + piece_b + base[cut4:]. A touched version then
    costs a few small objects instead of a fresh 9 KB copy, which is what lets the server
    produce 200k MODIFIED events per second; watch streams send the pieces with sendmsg.
    """

    __slots__ = ("key", "ns", "name", "uid", "rv", "labels", "fields", "_tail", "_splice")

    def __init__(self, key, ns, name, uid, rv, labels, fields, tail, splice=None):
        self.key = key
        self.ns = ns
        self.name = name
        self.uid = uid
        self.rv = rv
        self.labels = labels
        self.fields = fields
        self._tail = tail
        self._splice = splice

    @classmethod
    def from_dict(cls, rt, d):
        """Build from an object dict whose metadata (name, namespace, uid, resourceVersion) is
        already final. kind/apiVersion, if present, are dropped (they live in rt)."""
        d = normalize(d)
        md = d["metadata"]
        ns = md.get("namespace", "") if rt.namespaced else ""
        name = md["name"]
        raw = dumps(d)
        return cls(ns + "/" + name if ns else name, ns, name, md.get("uid", ""),
                   int(md["resourceVersion"]), md.get("labels") or {}, rt.field_values(d), raw[1:])

    @property
    def tail(self):
        """The JSON without its opening '{' (spliced versions are joined on each access and
        not cached, so a long history of touches stays small)."""
        t = self._tail
        return t if t is not None else b"".join(self.pieces())

    def pieces(self):
        """Buffers whose concatenation is tail (no copy)."""
        if self._tail is not None:
            return (self._tail,)
        mv, c1, c2, c3, c4, pa, pb = self._splice
        return (mv[:c1], pa, mv[c2:c3], pb, mv[c4:])

    def size(self):
        if self._tail is not None:
            return len(self._tail)
        mv, c1, c2, c3, c4, pa, pb = self._splice
        return len(mv) - (c2 - c1) - (c4 - c3) + len(pa) + len(pb)

    def raw(self):
        """The object as a list item (no kind/apiVersion)."""
        return b"{" + self.tail

    def full(self, rt):
        """The object as a standalone response or watch object (with kind/apiVersion)."""
        return rt.kind_prefix + self.tail

    def to_dict(self):
        """A fresh, mutable dict of this object (no kind/apiVersion)."""
        return json.loads(b"{" + self.tail)

    def _new(self, rv, tail=None, splice=None):
        return Obj(self.key, self.ns, self.name, self.uid, rv, self.labels, self.fields, tail,
                   splice)

    def with_rv(self, rv):
        """This object with only metadata.resourceVersion changed, spliced in the bytes."""
        tail = self.tail
        i = tail.index(_RV_MARK) + len(_RV_MARK)
        j = tail.index(b'"', i)
        mv = memoryview(tail)
        return self._new(rv, b"".join((mv[:i], str(rv).encode(), mv[j:])))

    def touched(self, rv, stamp):
        """A /_fake/modify update: new resourceVersion and the touched-at annotation set to
        `stamp` (a string). Spliced over the same base bytes as this version when possible;
        re-serialized when the object has no touched-at annotation yet."""
        if self._splice is not None:
            mv, c1, c2, c3, c4, pa, pb = self._splice
            rv_first = mv.obj.startswith(_RV_MARK, c1 - len(_RV_MARK))
        else:
            base = self._tail
            i = base.find(_TOUCH_MARK)
            if i < 0:
                d = self.to_dict()
                d["metadata"].setdefault("annotations", {})[TOUCH_ANNOTATION] = stamp
                d["metadata"]["resourceVersion"] = str(rv)
                return self._new(rv, dumps(normalize(d))[1:])
            i += len(_TOUCH_MARK)
            j = base.index(b'"', i)
            r = base.index(_RV_MARK) + len(_RV_MARK)
            e = base.index(b'"', r)
            rv_first = r < i
            c1, c2, c3, c4 = (r, e, i, j) if rv_first else (i, j, r, e)
            mv = memoryview(base)
        rvb, stb = str(rv).encode(), stamp.encode()
        pa, pb = (rvb, stb) if rv_first else (stb, rvb)
        return Obj(self.key, self.ns, self.name, self.uid, rv, self.labels, self.fields, None,
                   (mv, c1, c2, c3, c4, pa, pb))


class Preview:
    """What a dry-run create answers: the object as it would be stored, never stored. It has no
    resourceVersion (the real API server clears it before storage and a dry run never gets
    one), so it is not an Obj."""

    __slots__ = ("_tail",)

    def __init__(self, d):
        self._tail = dumps(normalize(d))[1:]

    def full(self, rt):
        return rt.kind_prefix + self._tail


class Event:
    """One write in the global history. rv is unique: every write bumps the counter once.
    obj is the new state (for DELETED: the last state, carrying the deletion's rv); prev is
    the state before (None for ADDED), used to undo writes for snapshots and to turn a
    MODIFIED into ADDED/DELETED for watchers whose selector the object enters or leaves."""

    __slots__ = ("rv", "rt", "type", "obj", "prev")

    def __init__(self, rv, rt, type_, obj, prev):
        self.rv = rv
        self.rt = rt
        self.type = type_
        self.obj = obj
        self.prev = prev
