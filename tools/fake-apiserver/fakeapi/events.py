"""Events: core v1 `events` and `events.k8s.io/v1` `events` are one set of objects, as on
kube-apiserver (one storage, two API versions converted into each other).

Here each version is stored on its own and every write of one (create, update, patch, delete)
is mirrored at once, in the same locked section, into the other, converted (involvedObject <->
regarding, message <-> note, reportingComponent <-> reportingController, source <->
deprecatedSource, count <-> deprecatedCount, firstTimestamp / lastTimestamp <->
deprecatedFirstTimestamp / deprecatedLastTimestamp; the rest as is) with the same uid. The
mirror write takes its own resourceVersion (every write here is one event in the history), so
the two views of one Event carry different resourceVersions: a client writes through the view
it read. kubectl describe (core v1 events, fieldSelector involvedObject.*) sees Events that a
recorder wrote with events.k8s.io/v1, and the reverse.
"""

from .objects import Obj

CORE = ("", "v1", "events")
NEW = ("events.k8s.io", "v1", "events")

# core v1 field -> events.k8s.io/v1 field
_RENAMES = {"involvedObject": "regarding", "message": "note",
            "reportingComponent": "reportingController", "source": "deprecatedSource",
            "count": "deprecatedCount", "firstTimestamp": "deprecatedFirstTimestamp",
            "lastTimestamp": "deprecatedLastTimestamp"}
_BACK = {v: k for k, v in _RENAMES.items()}


def convert(d, to_core):
    names = _BACK if to_core else _RENAMES
    return {names.get(k, k): v for k, v in d.items()}


class Mirror:
    """A commit hook of the store (store.commit_hooks) keeping the two views in step."""

    def __init__(self, registry):
        self.core = registry.get(*CORE)
        self.new = registry.get(*NEW)
        self.busy = False

    def __call__(self, store, rt, type_, obj, prev):
        if self.busy or self.core is None or self.new is None:
            return
        if rt is self.core:
            other, to_core = self.new, False
        elif rt is self.new:
            other, to_core = self.core, True
        else:
            return
        self.busy = True
        try:
            cur = store.objects[other].get(obj.key)
            if type_ == "DELETED":
                if cur is not None:
                    store.head += 1
                    store._commit_locked(other, "DELETED", cur.with_rv(store.head), cur)
                return
            d = convert(obj.to_dict(), to_core)
            store.head += 1
            d["metadata"]["resourceVersion"] = str(store.head)
            store._commit_locked(other, "MODIFIED" if cur is not None else "ADDED",
                                 Obj.from_dict(other, d), cur)
        finally:
            self.busy = False
