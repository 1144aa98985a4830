"""PATCH bodies: JSON merge patch (RFC 7386), JSON patch (RFC 6902), and an approximation of
strategic merge patch (applied as a merge patch: lists are replaced, not merged by key).
Server-side apply bodies are decoded here (apply_body) and applied by fakeapi/ssa.py."""

import copy
import json

from .objects import ApiError, bad_request

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY = "application/apply-patch+yaml"
APPLY_CBOR = "application/apply-patch+cbor"


def merge_patch(target, patch):
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if not isinstance(target, dict):
        target = {}
    out = dict(target)
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def _pointer(path):
    if path == "":
        return []
    if not path.startswith("/"):
        raise bad_request("invalid JSON pointer %r" % path)
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _walk(doc, parts):
    """-> (container, last key) for a pointer; raises on a missing intermediate."""
    cur = doc
    for p in parts[:-1]:
        if isinstance(cur, list):
            cur = cur[int(p)]
        elif isinstance(cur, dict):
            cur = cur[p]
        else:
            raise KeyError(p)
    return cur, parts[-1]


def _get(doc, path):
    parts = _pointer(path)
    if not parts:
        return doc
    c, k = _walk(doc, parts)
    return c[int(k)] if isinstance(c, list) else c[k]


def _remove(doc, path):
    c, k = _walk(doc, _pointer(path))
    if isinstance(c, list):
        return c.pop(int(k))
    return c.pop(k)


def _add(doc, path, value):
    parts = _pointer(path)
    if not parts:
        return value
    c, k = _walk(doc, parts)
    if isinstance(c, list):
        if k == "-":
            c.append(value)
        else:
            i = int(k)
            if not 0 <= i <= len(c):
                raise IndexError(k)
            c.insert(i, value)
    elif isinstance(c, dict):
        c[k] = value
    else:
        raise KeyError(k)
    return doc


def patch_failed(cause):
    """A JSON patch that does not apply, as kube-apiserver answers it (handlers/patch.go wraps
    the json-patch library's error in errors.NewGenericServerResponse(422, ...)): 422 Invalid,
    a generic message, the library's message as the cause."""
    return ApiError(422, "Invalid", "the server rejected our request due to an error in our "
                    "request", {"causes": [{"reason": "UnexpectedServerResponse",
                                            "message": cause}]})


def test_failed(path):
    return patch_failed("testing value %s failed: test failed" % path)


def json_patch(doc, ops):
    if not isinstance(ops, list):
        raise bad_request("json patch must be a list of operations")
    doc = copy.deepcopy(doc)
    for op in ops:
        try:
            kind, path = op["op"], op["path"]
            if kind == "add":
                doc = _add(doc, path, copy.deepcopy(op["value"]))
            elif kind == "remove":
                _remove(doc, path)
            elif kind == "replace":
                _get(doc, path)  # must exist
                if path == "":
                    doc = copy.deepcopy(op["value"])
                else:
                    _remove(doc, path)
                    doc = _add(doc, path, copy.deepcopy(op["value"]))
            elif kind == "move":
                v = _remove(doc, op["from"])
                doc = _add(doc, path, v)
            elif kind == "copy":
                doc = _add(doc, path, copy.deepcopy(_get(doc, op["from"])))
            elif kind == "test":
                if _get(doc, path) != op["value"]:
                    raise test_failed(path)
            else:
                raise bad_request("unknown json patch operation %r" % kind)
        except (KeyError, IndexError, ValueError, TypeError):
            if not isinstance(op, dict) or "op" not in op or "path" not in op:
                raise bad_request("a json patch operation needs op and path: %s"
                                  % json.dumps(op))
            raise patch_failed('%s operation does not apply: doc is missing path: "%s": '
                               "missing value" % (op["op"], op.get("from", op["path"])))
    return doc


def apply_body(body):
    """The configuration of a server-side apply request, as a dict."""
    try:
        d = json.loads(body or b"null")
    except ValueError:
        # YAML apply bodies that are not JSON would need a YAML parser (not in the stdlib).
        raise ApiError(415, "UnsupportedMediaType", "this server only accepts JSON patch bodies")
    if not isinstance(d, dict):
        raise bad_request("patch body must be a JSON object")
    return d


def apply_patch(content_type, current, body):
    """-> the patched dict. current is a dict (kind/apiVersion may be absent)."""
    ct = (content_type or "").split(";")[0].strip().lower()
    if ct not in (MERGE, STRATEGIC, JSON_PATCH, APPLY):
        raise ApiError(415, "UnsupportedMediaType",
                       "the body of the request was in an unknown format - accepted media types "
                       "include: application/json-patch+json, application/merge-patch+json, "
                       "application/strategic-merge-patch+json, application/apply-patch+yaml")
    try:
        patch = json.loads(body or b"null")
    except ValueError:
        # YAML apply bodies that are not JSON would need a YAML parser (not in the stdlib).
        raise ApiError(415, "UnsupportedMediaType", "this server only accepts JSON patch bodies")
    if ct == JSON_PATCH:
        return json_patch(current, patch)
    if not isinstance(patch, dict):
        raise bad_request("patch body must be a JSON object")
    return merge_patch(current, patch)
