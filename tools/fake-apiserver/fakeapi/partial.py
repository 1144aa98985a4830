"""Metadata-only responses (meta.k8s.io/v1 PartialObjectMetadata), which client-go's metadata
client and controller-runtime's metadata cache ask for:

    Accept: application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json
            (lists)
    Accept: application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json
            (watches and single objects)

Answered as kube-apiserver's transform does: every object becomes
{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{...}} with its whole
metadata (labels, annotations, ownerReferences, managedFields...) and nothing else, each list
item carrying that kind and apiVersion too; a list is a PartialObjectMetadataList with the
list's resourceVersion, continue and remainingItemCount; watch events (bookmarks included) carry
PartialObjectMetadata objects. The Content-Type names the form served. A form that does not fit
the request (PartialObjectMetadata for a list, the List form for a watch or one object) is 406
NotAcceptable, as kube-apiserver's transform answers it (for a watch it ends the stream; here the
406 comes before it starts).

An object's reduced bytes are cut from its stored bytes (no re-serialization: the stored JSON
starts with its metadata) once per stored version and cached, so a list of 100k pods is reduced
once, not per request.
"""

import json

from .objects import ApiError
from .resources import dumps

LIST_FORM = "PartialObjectMetadataList"
OBJECT_FORM = "PartialObjectMetadata"
LIST_CT = "application/json;as=%s;g=meta.k8s.io;v=v1" % LIST_FORM
OBJECT_CT = "application/json;as=%s;g=meta.k8s.io;v=v1" % OBJECT_FORM
# An object's bytes after its '{', up to its metadata.
_HEAD = b'"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":'
LIST_PREFIX = b'{"kind":"PartialObjectMetadataList","apiVersion":"meta.k8s.io/v1","metadata":'
_META_KEY = '"metadata":'
_DECODER = json.JSONDecoder()
_CACHE_MAX = 1 << 20  # entries (one per object key); cleared when full

# (resource name, key) -> (the stored version it was cut from, its reduced tail)
_cache = {}


def requested(accept):
    """The PartialObjectMetadata form the first Accept entry this server can serve asks for
    (LIST_FORM or OBJECT_FORM), or None (plain JSON, or a Table)."""
    for part in (accept or "").split(","):
        params = [p.strip() for p in part.split(";")]
        if params[0] not in ("application/json", "*/*"):
            continue
        opts = dict(p.split("=", 1) for p in params[1:] if "=" in p)
        form = opts.get("as")
        if form is None or form == "Table":
            return None  # plain JSON, or tables.py's
        if form in (LIST_FORM, OBJECT_FORM) and opts.get("g") == "meta.k8s.io" \
                and opts.get("v") == "v1":
            return form
        # a form (or version) not served here: the next entry
    return None


def negotiate(accept, rt, is_list):
    """True when the request asks for the metadata-only form; 406 when it asks for the form
    that does not fit (is_list: a collection GET that is not a watch)."""
    form = requested(accept)
    if form is None:
        return False
    version = rt.api_version.rsplit("/", 1)[-1]
    if is_list and form == OBJECT_FORM:
        raise ApiError(406, "NotAcceptable", "you requested PartialObjectMetadata, but the "
                       "requested object is a list (*%s.%s)" % (version, rt.list_kind))
    if not is_list and form == LIST_FORM:
        raise ApiError(406, "NotAcceptable", "you requested PartialObjectMetadataList, but the "
                       "requested object is not a list (*%s.%s)" % (version, rt.kind))
    return True


def tail(rt, obj):
    """obj as PartialObjectMetadata, without its opening '{' (as Obj.tail)."""
    k = (rt.name, obj.key)
    hit = _cache.get(k)
    if hit is not None and hit[0] is obj:
        return hit[1]
    text = obj.tail.decode("utf-8")
    if text.startswith(_META_KEY):  # stored objects are normalized: metadata first
        start = len(_META_KEY)
        end = _DECODER.raw_decode(text, start)[1]
        meta = text[start:end].encode("utf-8")
    else:
        meta = dumps(json.loads("{" + text).get("metadata") or {})
    out = _HEAD + meta + b"}"
    if len(_cache) >= _CACHE_MAX:
        _cache.clear()
    _cache[k] = (obj, out)
    return out


class _Item:
    """A reduced object with what the list writer uses of an Obj (tail, pieces, size)."""

    __slots__ = ("tail",)

    def __init__(self, t):
        self.tail = t

    def pieces(self):
        return (self.tail,)

    def size(self):
        return len(self.tail)


def items(rt, objs):
    return [_Item(tail(rt, o)) for o in objs]


def body(rt, obj):
    """A single GET's answer."""
    return b"{" + tail(rt, obj)


def watch_line(rt, type_, obj):
    return [b'{"type":"' + type_.encode() + b'","object":{', tail(rt, obj), b"}\n"]


def bookmark_line(md):
    return [b'{"type":"BOOKMARK","object":{' + _HEAD + dumps(md) + b"}}\n"]
