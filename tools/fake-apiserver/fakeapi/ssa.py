"""Field ownership: metadata.managedFields and server-side apply, after structured-merge-diff.

Contract:
- A field set is a Python set of paths; a path is a tuple of path elements written as FieldsV1
  keys: 'f:name' (a field), 'k:{"name":"c"}' (an item of a list keyed by the schema),
  'v:"x"' (an item of a set-like list). to_fields_v1/from_fields_v1 convert to and from the
  nested FieldsV1 form ('.' marks a node that is itself a member and has members below it).
- Lists are merged by the keys of the built-in schemas (LIST_KEYS, SET_LISTS, _ports_keys);
  every other list is atomic (owned and replaced as a whole), as are the lists of custom
  resources (no x-kubernetes-list-type is read from CRD schemas).
- apply() and update() take the live object dict and return the new one with its
  managedFields rewritten; they run under the store's lock (Store.modify / Store.create) and
  never touch the store themselves.

Limits: conflicts are detected on leaves (scalars, atomic lists, empty maps) only; a field
value that is a map is merged, never owned as a whole; versions are not converted (every
entry carries the apiVersion it was written with).
"""

import copy
import datetime
import json

from .objects import ApiError

# Fields the field managers never own (structured-merge-diff's ignored and reset fields).
_IGNORED_META = ("name", "namespace", "uid", "resourceVersion", "generation",
                 "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds",
                 "selfLink", "managedFields")

# Associative lists of the built-in types, by field name (k8s.io/api's
# +listType=map / +listMapKey, and patchMergeKey where those are the same).
LIST_KEYS = {
    "containers": ("name",), "initContainers": ("name",), "ephemeralContainers": ("name",),
    "env": ("name",), "volumes": ("name",), "volumeMounts": ("mountPath",),
    "volumeDevices": ("devicePath",), "imagePullSecrets": ("name",), "hostAliases": ("ip",),
    "resourceClaims": ("name",), "ownerReferences": ("uid",),
    "topologySpreadConstraints": ("topologyKey", "whenUnsatisfiable"),
}
# Lists whose items are owned one by one by value (+listType=set).
SET_LISTS = ("finalizers",)
# Fields of type map[string]string in the built-in types: an Update that creates one owns the
# map itself ('.') as well as its keys; a new struct is not marked.
STRING_MAPS = ("labels", "annotations", "data", "binaryData", "stringData", "nodeSelector",
               "matchLabels", "selector", "limits", "requests")
# Atomic structs (+structType=atomic) of the built-in types: owned and replaced whole.
# LabelSelector is one: a Deployment's spec.selector is a leaf (a Service's is a string map).
ATOMIC_STRUCTS = ("selector", "labelSelector", "namespaceSelector")
# Key fields that the schema defaults (a key without them is filled in first).
_KEY_DEFAULTS = {"protocol": "TCP"}
_CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")


def _keys_for(kind, custom, names):
    """-> ('map', keys) | ('amap', keys) | ('set', None) | None (atomic) for the list at
    field-name path names (list items are left out of names, e.g. ('spec', 'containers',
    'ports')). 'amap': keyed, but each item is atomic (+structType=atomic: OwnerReference)."""
    last = names[-1]
    if names == ("metadata", "finalizers"):
        return ("set", None)
    if names == ("metadata", "ownerReferences"):
        return ("amap", ("uid",))
    if custom:
        return None
    if last == "ports":
        if len(names) >= 2 and names[-2] in _CONTAINER_LISTS:
            return ("map", ("containerPort", "protocol"))
        if kind == "Service" and names == ("spec", "ports"):
            return ("map", ("port", "protocol"))
        return None
    if last == "conditions" and names[0] == "status":
        return ("map", ("type",))
    if last in LIST_KEYS:
        return ("map", LIST_KEYS[last])
    if last in SET_LISTS:
        return ("set", None)
    return None


def _item_key(item, keys):
    if not isinstance(item, dict):
        return None
    parts = []
    for k in keys:
        v = item.get(k, _KEY_DEFAULTS.get(k))
        if v is None:
            continue
        parts.append((k, v))
    if not parts:
        return None
    # FieldsV1 writes key fields sorted by name, as compact JSON.
    return "k:" + json.dumps(dict(sorted(parts)), separators=(",", ":"))


def _set_key(item):
    return "v:" + json.dumps(item, separators=(",", ":"))


class Schema:
    """What the merge needs to know about one resource type."""

    def __init__(self, rt):
        self.kind = rt.kind
        self.custom = rt.custom

    def list_kind(self, names):
        return _keys_for(self.kind, self.custom, names)

    def atomic(self, names):
        """Whether the map at names is an atomic struct."""
        return (not self.custom and names and names[-1] in ATOMIC_STRUCTS
                and not (self.kind == "Service" and names == ("spec", "selector")))


# -- field sets ------------------------------------------------------------------------------

def _walk(schema, v, path, names, out):
    """Add the leaves and the list items of v below path to out."""
    if isinstance(v, dict) and v and not schema.atomic(names):
        for k, c in v.items():
            _walk(schema, c, path + ("f:" + k,), names + (k,), out)
        return
    if isinstance(v, list) and v:
        lk = schema.list_kind(names)
        if lk is not None:
            for item in v:
                key = _set_key(item) if lk[0] == "set" else _item_key(item, lk[1])
                if key is None:
                    break
                out.add(path + (key,))
                if lk[0] == "map":
                    _walk(schema, item, path + (key,), names, out)
            else:
                return
    out.add(path)


def _strip(d, subresource, status_sub):
    """The part of an object dict that field managers own (see _IGNORED_META)."""
    d = {k: v for k, v in d.items() if k not in ("kind", "apiVersion")}
    if subresource == "status":
        return {"status": d["status"]} if "status" in d else {}
    if status_sub:
        d.pop("status", None)
    md = d.get("metadata")
    if isinstance(md, dict):
        md = {k: v for k, v in md.items() if k not in _IGNORED_META}
        if md:
            d["metadata"] = md
        else:
            d.pop("metadata")
    return d


def field_set(schema, d):
    """The paths an applied configuration sets: its leaves and its list items."""
    out = set()
    _walk(schema, d, (), (), out)
    out.discard(())
    return out


def to_fields_v1(paths):
    tree = {}
    for p in sorted(paths, key=len):
        node = tree
        for pe in p:
            node = node.setdefault(pe, {})
    # a member with members below it is written '.': {}
    def mark(node, path):
        for pe, child in node.items():
            if child and path + (pe,) in paths:
                child["."] = {}
            mark(child, path + (pe,))
    mark(tree, ())
    return _sorted(tree)


def _sorted(node):
    return {k: _sorted(node[k]) for k in sorted(node)}


def from_fields_v1(tree, path=(), out=None):
    out = set() if out is None else out
    for pe, child in (tree or {}).items():
        if pe == ".":
            out.add(path)
        elif not child:
            out.add(path + (pe,))
        else:
            from_fields_v1(child, path + (pe,), out)
    return out


def path_string(path):
    """'.spec.containers[name="c"].image', as structured-merge-diff prints a path."""
    s = ""
    for pe in path:
        if pe.startswith("f:"):
            s += "." + pe[2:]
        elif pe.startswith("k:"):
            s += "[" + ",".join("%s=%s" % (k, json.dumps(v))
                                for k, v in json.loads(pe[2:]).items()) + "]"
        elif pe.startswith("v:"):
            s += "[=" + pe[2:] + "]"
        else:
            s += "[" + pe[2:] + "]"
    return s


# -- values at paths -------------------------------------------------------------------------

_MISSING = object()


def _child(schema, v, pe, names):
    """-> (child value or _MISSING, names below)."""
    if pe.startswith("f:"):
        k = pe[2:]
        if isinstance(v, dict) and k in v:
            return v[k], names + (k,)
        return _MISSING, names + (k,)
    if isinstance(v, list):
        lk = schema.list_kind(names)
        for item in v:
            key = (_set_key(item) if lk and lk[0] == "set"
                   else _item_key(item, lk[1]) if lk else None)
            if key == pe:
                return item, names
    return _MISSING, names


def get_path(schema, d, path):
    v, names = d, ()
    for pe in path:
        v, names = _child(schema, v, pe, names)
        if v is _MISSING:
            return _MISSING
    return v


def remove_path(schema, d, path):
    """Remove the field or list item at path from d (in place), if there."""
    v, names = d, ()
    for pe in path[:-1]:
        v, names = _child(schema, v, pe, names)
        if v is _MISSING:
            return
    pe = path[-1]
    if pe.startswith("f:"):
        if isinstance(v, dict):
            v.pop(pe[2:], None)
    elif isinstance(v, list):
        for i, item in enumerate(v):
            if _child(schema, [item], pe, names)[0] is not _MISSING:
                del v[i]
                return


# -- merging ---------------------------------------------------------------------------------

def merge(schema, live, applied, names=()):
    """applied merged into live: maps field by field, keyed lists item by item (new items
    appended), sets by value, everything else replaced. null in applied sets nothing."""
    if isinstance(applied, dict) and isinstance(live, dict) and not schema.atomic(names):
        out = dict(live)
        for k, v in applied.items():
            if v is None:
                continue
            out[k] = merge(schema, live.get(k), v, names + (k,)) if k in live else copy.deepcopy(v)
        return out
    if isinstance(applied, list) and isinstance(live, list) and names:
        lk = schema.list_kind(names)
        if lk is not None:
            out = list(live)
            for item in applied:
                key = _set_key(item) if lk[0] == "set" else _item_key(item, lk[1])
                for i, cur in enumerate(out):
                    ck = _set_key(cur) if lk[0] == "set" else _item_key(cur, lk[1])
                    if key is not None and ck == key:
                        out[i] = (merge(schema, cur, item, names) if lk[0] == "map"
                                  else copy.deepcopy(item))
                        break
                else:
                    out.append(copy.deepcopy(item))
            return out
    return copy.deepcopy(applied)


# -- managedFields ---------------------------------------------------------------------------

def now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _entries(md):
    """-> list of [entry dict without fieldsV1, path set], from metadata.managedFields."""
    out = []
    for e in md.get("managedFields") or []:
        if not isinstance(e, dict):
            continue
        meta = {k: v for k, v in e.items() if k != "fieldsV1"}
        out.append([meta, from_fields_v1(e.get("fieldsV1"))])
    return out


def _ident(meta):
    return (meta.get("manager", ""), meta.get("operation"), meta.get("subresource", ""))


def _store_entries(md, entries):
    kept = []
    for meta, paths in entries:
        if not paths:
            continue
        e = dict(meta)
        e["fieldsType"] = "FieldsV1"
        e["fieldsV1"] = to_fields_v1(paths)
        kept.append(_ordered(e))
    if kept:
        md["managedFields"] = kept
    else:
        md.pop("managedFields", None)


_ENTRY_ORDER = ("manager", "operation", "apiVersion", "time", "fieldsType", "fieldsV1",
                "subresource")


def _ordered(e):
    return {k: e[k] for k in _ENTRY_ORDER if k in e}


def _entry(entries, manager, operation, api_version, subresource):
    ident = (manager, operation, subresource or "")
    for ent in entries:
        if _ident(ent[0]) == ident:
            ent[0]["apiVersion"] = api_version
            ent[0]["time"] = now()
            return ent
    meta = {"manager": manager, "operation": operation, "apiVersion": api_version,
            "time": now()}
    if subresource:
        meta["subresource"] = subresource
    ent = [meta, set()]
    entries.append(ent)
    return ent


def _print_manager(meta):
    s = json.dumps(meta.get("manager", ""))
    if meta.get("subresource"):
        s += " with subresource %s" % json.dumps(meta["subresource"])
    if meta.get("operation") == "Update":
        s += " using %s" % meta.get("apiVersion", "")
        if meta.get("time"):
            s += " at %s" % meta["time"]
    return s


def conflict_error(conflicts):
    """409 as fieldmanager's NewConflictError answers: conflicts is [(manager meta, path)]."""
    causes = [{"type": "FieldManagerConflict", "message": "conflict with %s" % _print_manager(m),
               "field": path_string(p)} for m, p in conflicts]
    if len(conflicts) == 1:
        m, p = conflicts[0]
        msg = "Apply failed with 1 conflict: conflict with %s: %s" % (_print_manager(m),
                                                                     path_string(p))
    else:
        by = {}
        for m, p in conflicts:
            by.setdefault(_print_manager(m), []).append(path_string(p))
        lines = []
        for who in sorted(by):
            lines.append("conflicts with %s:" % who)
            lines.extend("- %s" % p for p in by[who])
        msg = "Apply failed with %d conflicts: %s" % (len(conflicts), "\n".join(lines))
    return ApiError(409, "Conflict", msg, {"causes": causes})


def apply(rt, live, body, manager, force=False, subresource=None):
    """Server-side apply of body (a dict) by manager to live (a dict, {} when the object does
    not exist yet). -> the new object dict with managedFields rewritten; raises 409 on
    conflicts unless force."""
    schema = Schema(rt)
    live = copy.deepcopy(live)
    md = live.setdefault("metadata", {})
    entries = _entries(md)
    config = _strip(body, subresource, rt.status_subresource)
    applied = field_set(schema, config)
    mine = _entry(entries, manager, "Apply", rt.api_version, subresource)
    previous = set(mine[1])

    # Leaves are compared; a path with members below it (a map, a list item) is not.
    parents = {q[:i] for q in applied for i in range(1, len(q))}
    conflicts = []
    owned_live = _strip(live, subresource, rt.status_subresource)
    for p in sorted(applied):
        want = get_path(schema, config, p)
        have = get_path(schema, owned_live, p)
        if have is _MISSING or p in parents or have == want:
            continue
        for ent in entries:
            if ent is not mine and p in ent[1]:
                conflicts.append((ent, p))
    if conflicts and not force:
        raise conflict_error([(ent[0], p) for ent, p in conflicts])
    for ent, p in conflicts:
        ent[1].discard(p)

    new = merge(schema, live, {k: v for k, v in body.items() if k not in ("kind",
                                                                          "apiVersion")})
    if subresource == "status":
        new = dict(live, status=new.get("status")) if "status" in new else live
    mine[1] = applied
    others = set()
    for ent in entries:
        if ent is not mine:
            others |= ent[1]
    # Fields this manager set before and no longer sets go, unless another manager owns
    # them or something below them (then they stay, owned by the others only). A list item
    # that goes takes its fields with it: they are not removed one by one.
    drop = {p for p in previous - applied
            if not any(o[:len(p)] == p for o in others | applied)}
    for p in drop:
        if not any(p[:i] in drop for i in range(1, len(p))):
            remove_path(schema, new, p)
    nmd = new.setdefault("metadata", {})
    _store_entries(nmd, entries)
    if _same_but_times(live, new):
        # A repeated apply changes nothing, not even a timestamp (kube-apiserver's
        # IgnoreManagedFieldsTimestampsTransformer): no new resourceVersion, no event.
        nmd["managedFields"] = live["metadata"]["managedFields"]
    return new


def _same_but_times(old, new):
    """Whether new differs from old at most in the time of managedFields entries."""
    om, nm = old.get("metadata") or {}, new.get("metadata") or {}
    if ({k: v for k, v in old.items() if k != "metadata"}
            != {k: v for k, v in new.items() if k != "metadata"}):
        return False
    if ({k: v for k, v in om.items() if k != "managedFields"}
            != {k: v for k, v in nm.items() if k != "managedFields"}):
        return False
    untimed = lambda m: [{k: v for k, v in e.items() if k != "time"}
                         for e in m.get("managedFields") or []]
    return "managedFields" in om and untimed(om) == untimed(nm)


def _changed(schema, old, new, path=(), names=(), out=None):
    """Paths added or modified from old to new (leaves, plus maps and list items that are
    new), and separately the paths removed."""
    added, removed = out if out is not None else (set(), set())
    if isinstance(new, dict) and schema.atomic(names):
        if old != new:
            added.add(path)
        return added, removed
    if isinstance(old, dict) and isinstance(new, dict):
        for k, v in new.items():
            _changed(schema, old.get(k, _MISSING), v, path + ("f:" + k,), names + (k,),
                     (added, removed))
        for k in old:
            if k not in new:
                removed.add(path + ("f:" + k,))
        return added, removed
    if isinstance(old, list) and isinstance(new, list) and names:
        lk = schema.list_kind(names)
        if lk is not None:
            def keyed(lst):
                d = {}
                for item in lst:
                    key = _set_key(item) if lk[0] == "set" else _item_key(item, lk[1])
                    if key is None:
                        return None
                    d[key] = item
                return d
            ko, kn = keyed(old), keyed(new)
            if ko is not None and kn is not None:
                for key, item in kn.items():
                    p = path + (key,)
                    if key not in ko:
                        added.add(p)
                        if lk[0] == "map":
                            _changed(schema, {}, item, p, names, (added, removed))
                    elif lk[0] == "map":
                        _changed(schema, ko[key], item, p, names, (added, removed))
                    elif ko[key] != item:
                        added.add(p)
                for key in ko:
                    if key not in kn:
                        removed.add(path + (key,))
                return added, removed
    if old is _MISSING:
        if isinstance(new, dict):
            if names[-1] in STRING_MAPS:  # a new map is a member itself (structs are not)
                added.add(path)
            for k, v in new.items():
                _changed(schema, _MISSING, v, path + ("f:" + k,), names + (k,), (added, removed))
            return added, removed
        if isinstance(new, list) and new and schema.list_kind(names) is not None:
            if names[0] == "metadata":  # as kube-apiserver marks new ownerReferences
                added.add(path)
            return _changed(schema, [], new, path, names, (added, removed))
        added.add(path)
    elif old != new:
        added.add(path)
    return added, removed


def update(rt, old, new, manager, subresource=None):
    """A write that is not an apply (create, update, patch) by manager: it takes the fields it
    added or changed from everyone, and fields it removed leave every manager. Sets new's
    managedFields (in place) from old's; a body that brings managedFields of its own (other
    than the stored ones) replaces them, as kube-apiserver lets a client reset them."""
    nmd = new.setdefault("metadata", {})
    omd = (old or {}).get("metadata") or {}
    given = nmd.get("managedFields")
    if given is not None and given != omd.get("managedFields"):
        if given == [] or given == [{}]:
            nmd.pop("managedFields", None)
        return new
    schema = Schema(rt)
    entries = _entries(omd)
    a = _strip(old or {}, subresource, rt.status_subresource)
    b = _strip(new, subresource, rt.status_subresource)
    added, removed = _changed(schema, a, b)
    added.discard(())
    if not added and not removed:
        return new
    gone = lambda p: any(p[:len(r)] == r for r in removed)
    for ent in entries:
        ent[1] = {p for p in ent[1] if p not in added and not gone(p)}
    if added and manager is not None:
        mine = _entry(entries, manager, "Update", rt.api_version, subresource)
        mine[1] |= added
    _store_entries(nmd, entries)
    return new


def manager_from_user_agent(ua):
    """kube-apiserver's default field manager: the User-Agent up to its first '/'
    ('kubectl/v1.31.0 (linux/amd64)' -> 'kubectl'), at most 128 characters."""
    if not ua:
        return "unknown"
    return ua.split("/", 1)[0][:128] or "unknown"
