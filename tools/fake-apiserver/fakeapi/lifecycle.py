"""Object lifecycle as a controller meets it on a real cluster: graceful deletion with
finalizers, the garbage collector (ownerReferences, propagationPolicy) and the rules around
metadata.generation on delete.

Contract (every function here runs with store.lock held, called by store.py):
- delete(): a DELETE. An object without finalizers goes at once (one DELETED event); one with
  finalizers gets metadata.deletionTimestamp (now), deletionGracePeriodSeconds 0 and, when it
  has a generation, generation + 1 (registry/generic/registry/store.go markAsDeleting): one
  MODIFIED event. A DELETE of an object already terminating changes nothing.
- An update or patch that leaves a terminating object without finalizers removes it: one
  DELETED event carrying the written content (store._write_locked asks finalized()).
- removed(): after any removal, the garbage collector's work, done at once in the same
  request: dependents (objects whose ownerReferences[].uid is the removed uid) whose owners
  are all gone are deleted (Background; each follows its own finalizers), those with another
  live owner lose the dangling reference; an owner in foreground deletion whose last
  dependent went loses its foregroundDeletion finalizer (and goes if none is left).
- propagationPolicy: Background (default), Orphan (the dependents' references to the owner are
  removed before it goes), Foreground (the owner gets the foregroundDeletion finalizer and a
  deletionTimestamp, its dependents are deleted in foreground, and it goes once no dependent
  with blockOwnerDeletion: true is left).
- The owner index (uid -> dependents) is built on the first need and kept up to date by
  store._commit_locked from then on (owner_uids() reads the object's bytes, no JSON parse).
"""

import re

from .objects import Obj, bad_request

FOREGROUND = "foregroundDeletion"
POLICIES = ("Background", "Foreground", "Orphan")

_OWNERS = b'"ownerReferences":['
_UID = re.compile(rb'"uid":"([^"]*)"')


def owner_uids(obj):
    """The uids an object's ownerReferences name (may over-report; callers verify)."""
    tail = obj.tail
    i = tail.find(_OWNERS)
    if i < 0:
        return ()
    j = tail.find(b"]", i)
    return [u.decode() for u in _UID.findall(tail, i, j)]


class OwnerIndex:
    """owner uid -> {(rt, key)} of the objects that may name it in ownerReferences."""

    def __init__(self, store):
        self.deps = {}
        for rt, objs in store.objects.items():
            for o in objs.values():
                self._add(rt, o)

    def _add(self, rt, o):
        for u in owner_uids(o):
            self.deps.setdefault(u, set()).add((rt, o.key))

    def _drop(self, rt, o):
        for u in owner_uids(o):
            s = self.deps.get(u)
            if s is not None:
                s.discard((rt, o.key))
                if not s:
                    del self.deps[u]

    def update(self, rt, type_, obj, prev):
        if prev is not None:
            self._drop(rt, prev)
        if type_ != "DELETED":
            self._add(rt, obj)


def policy_of(options, query):
    """propagationPolicy from the DeleteOptions body or the query (400 when unknown)."""
    p = None
    if isinstance(options, dict):
        p = options.get("propagationPolicy")
        if p is None and options.get("orphanDependents") is not None:
            p = "Orphan" if options["orphanDependents"] else "Background"
    p = p or query.get("propagationPolicy")
    if p in (None, ""):
        return None
    if p not in POLICIES:
        raise bad_request('Unsupported value: "%s": supported values: "Foreground", '
                          '"Background", "Orphan"' % p)
    return p


def finalized(d):
    """True when a written dict is terminating with no finalizer left (it must go)."""
    md = d.get("metadata") or {}
    return bool(md.get("deletionTimestamp")) and not md.get("finalizers")


def dependents(store, uid):
    """[(rt, Obj, dict)] of the live objects whose ownerReferences name uid."""
    if store.owners is None:
        store.owners = OwnerIndex(store)
    out = []
    for rt, key in sorted(store.owners.deps.get(uid, ()), key=lambda p: (p[0].name, p[1])):
        o = store.objects[rt].get(key)
        if o is None:
            continue
        d = o.to_dict()
        refs = d["metadata"].get("ownerReferences") or []
        if any(isinstance(r, dict) and r.get("uid") == uid for r in refs):
            out.append((rt, o, d))
    return out


def _owner(store, dep_rt, dep_ns, ref):
    """The live owner an ownerReference names (same uid), or (None, None)."""
    rt = store.registry.by_kind.get((ref.get("apiVersion"), ref.get("kind")))
    if rt is None or not ref.get("name"):
        return None, None
    key = (dep_ns + "/" + ref["name"]) if rt.namespaced and dep_ns else ref["name"]
    o = store.objects[rt].get(key)
    if o is None or o.uid != ref.get("uid"):
        return None, None
    return rt, o


def _drop_ref(store, rt, o, d, uid):
    d["metadata"]["ownerReferences"] = [r for r in d["metadata"].get("ownerReferences") or []
                                        if not (isinstance(r, dict) and r.get("uid") == uid)]
    if not d["metadata"]["ownerReferences"]:
        del d["metadata"]["ownerReferences"]
    store._write_locked(rt, o, d)


def delete(store, rt, cur, policy=None, dry_run=False):
    """A DELETE of cur (preconditions checked) -> the object answered."""
    d = cur.to_dict()
    md = d["metadata"]
    if md.get("deletionTimestamp"):
        return cur  # terminating already: a second DELETE changes nothing
    fins = list(md.get("finalizers") or [])
    deps = dependents(store, cur.uid) if policy in ("Orphan", "Foreground") else []
    if dry_run:
        if not fins and not (policy == "Foreground" and deps):
            return cur
        return Obj.from_dict(rt, _terminating(d, fins, store))
    if policy == "Orphan":
        for drt, dep, dd in deps:
            _drop_ref(store, drt, dep, dd, cur.uid)
        deps = []
    if policy == "Foreground" and deps and FOREGROUND not in fins:
        fins.append(FOREGROUND)
    if not fins:
        return store._remove_locked(rt, cur)
    obj = store._write_locked(rt, cur, _terminating(d, fins, store))
    if policy == "Foreground":
        for drt, dep, _ in deps:
            live = store.objects[drt].get(dep.key)
            if live is not None and live.uid == dep.uid:
                delete(store, drt, live, "Foreground")
        obj = store.objects[rt].get(cur.key) or obj
        obj = _release_foreground(store, rt, obj) or obj
    return obj


def _terminating(d, fins, store):
    md = d["metadata"]
    if isinstance(md.get("generation"), int) and md["generation"] > 0:
        md["generation"] += 1
    md["deletionTimestamp"] = store.now()
    md["deletionGracePeriodSeconds"] = 0
    md["finalizers"] = fins
    return d


def _release_foreground(store, rt, o):
    """An owner in foreground deletion with no dependent left loses foregroundDeletion."""
    d = o.to_dict()
    md = d["metadata"]
    if not md.get("deletionTimestamp") or FOREGROUND not in (md.get("finalizers") or []):
        return None
    for _, _, dd in dependents(store, o.uid):
        if any(isinstance(r, dict) and r.get("uid") == o.uid and r.get("blockOwnerDeletion")
               for r in dd["metadata"].get("ownerReferences") or []):
            return None  # a blocking dependent is still there
    md["finalizers"] = [f for f in md["finalizers"] if f != FOREGROUND]
    return store._write_locked(rt, o, d)


def removed(store, rt, obj):
    """After obj (of rt) went for good: the garbage collector's part."""
    for drt, dep, dd in dependents(store, obj.uid):
        refs = dd["metadata"].get("ownerReferences") or []
        solid = [r for r in refs if isinstance(r, dict) and r.get("uid") != obj.uid
                 and _owner(store, drt, dep.ns, r)[1] is not None]
        if solid:
            _drop_ref(store, drt, dep, dd, obj.uid)
        elif not dd["metadata"].get("deletionTimestamp"):
            delete(store, drt, dep, "Background")
    # Owners waiting in foreground deletion for this dependent.
    d = obj.to_dict()
    for ref in d["metadata"].get("ownerReferences") or []:
        if isinstance(ref, dict):
            ort, owner = _owner(store, rt, obj.ns, ref)
            if owner is not None:
                _release_foreground(store, ort, owner)
