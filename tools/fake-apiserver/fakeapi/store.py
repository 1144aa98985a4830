"""The state of the fake cluster: objects per resource, one global resourceVersion counter and
a bounded history of writes (the "watch cache" and the "etcd history" at once).

Rules the rest of the server relies on:
- Every write bumps `head` by exactly one and appends exactly one Event, so the event with
  resourceVersion r sits at index r - log_first of `log`: finding "events after N" is an index.
- `floor` is the newest resourceVersion whose successors are all kept: a watch or an exact
  read at N works iff N >= floor. It is head - history, or higher after compact().
- Everything here runs under `lock`; `cond` (same lock) is notified after each write so watch
  streams wake up. Obj records are immutable, so callers may keep references after unlocking
  and serialize outside the lock (a 1 GB list must not block writers).
"""

import collections
import json
import contextlib
import gc
import random
import re
import threading
import time
import uuid

from . import events, lifecycle, services, ssa
from .objects import (ApiError, Event, Obj, Preview, already_exists, bad_request, conflict, expired, invalid,
                      normalize, not_found)

_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?"
                                r"(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_GEN_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # k8s utilrand alphabet (no vowels, no 0/1/3)

SNAPSHOT_CACHE = 4  # snapshots (resource, rv) kept for paginated lists served at an old rv


def _is_service(rt):
    return rt.kind == "Service" and rt.group == "" and not rt.custom


@contextlib.contextmanager
def no_gc():
    """Bulk writes allocate hundreds of thousands of tracked objects; the cyclic GC would
    traverse the whole (large, acyclic) store again and again meanwhile."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def now_rfc3339():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def random_suffix(rng, n=5):
    return "".join(rng.choice(_GEN_CHARS) for _ in range(n))


class Store:
    def __init__(self, registry, history=10000, watch_slack=250000):
        self.registry = registry
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self.head = 0
        self.history = max(0, history)
        self.compacted = 0
        self.objects = {rt: {} for rt in registry.types}
        self._sorted = {}
        self.last_change = {rt: 0 for rt in registry.types}
        self.log = []
        self.log_first = 1
        self._snapshots = collections.OrderedDict()
        self.watches = collections.Counter()
        self.cursors = {}  # open watch -> last rv it read (keeps history it still needs)
        self.watch_slack = watch_slack
        self.held = None  # (head when held, rt, events) of hold_touches()
        self._rng = random.Random()
        self.owners = None  # lifecycle.OwnerIndex, built on the first garbage collection
        # fn(store, rt, type, obj, prev) after each commit, lock held (events.Mirror)
        self.commit_hooks = [events.Mirror(registry)]

    @staticmethod
    def now():
        return now_rfc3339()

    def add_type(self, rt):
        """Serves a new resource type from now on (a CustomResourceDefinition was created).
        The dicts are replaced, not changed, so readers iterating them without the lock are
        unaffected. Returns False when the type (group, version, plural) was served already."""
        with self.lock:
            if self.registry.get(rt.group, rt.version, rt.plural) is not None:
                return False
            self.objects = {**self.objects, rt: {}}
            self.last_change = {**self.last_change, rt: 0}
            self.registry.add(rt)
            return True

    # -- history ---------------------------------------------------------------------------

    @property
    def floor(self):
        return max(self.compacted, self.head - self.history, 0)

    def _commit_locked(self, rt, type_, obj, prev):
        """Record a write whose rv (== self.head) is already in obj."""
        objs = self.objects[rt]
        if type_ == "DELETED":
            del objs[obj.key]
        else:
            objs[obj.key] = obj
        if type_ != "MODIFIED":
            self._sorted.pop(rt, None)
        self.last_change[rt] = obj.rv
        self.log.append(Event(obj.rv, rt, type_, obj, prev))
        if self.owners is not None:
            self.owners.update(rt, type_, obj, prev)
        for hook in self.commit_hooks:
            hook(self, rt, type_, obj, prev)
        self._trim_locked()

    def _trim_locked(self):
        # Trim in batches (deleting from the front of a list is O(n)); events at or below
        # floor are unreachable for new requests anyway, so keeping a few extra is harmless.
        floor = self.floor
        drop = floor - self.log_first + 1
        if drop <= max(1024, self.history // 4):
            return
        if self.cursors:
            # Open watches may lag behind the history bound (a client reading slower than a
            # burst of writes): keep what they still need, up to watch_slack events, like the
            # watch cache's per-watcher buffers. New watches still get 410 below `floor`.
            keep_after = max(min(min(self.cursors.values()), floor), self.head - self.watch_slack)
            drop = min(drop, keep_after - self.log_first + 1)
            if drop <= 1024:
                return
        drop = min(drop, len(self.log))
        del self.log[:drop]
        self.log_first += drop
        for k in [k for k in self._snapshots if k[1] < floor]:
            del self._snapshots[k]

    def events_kept_after(self):
        """Active watch streams can read events after this rv (may be older than floor)."""
        return self.log_first - 1

    def set_cursor(self, watch, rv):
        """Record how far an open watch has read (caller holds the lock); None removes it."""
        if rv is None:
            self.cursors.pop(watch, None)
        else:
            self.cursors[watch] = rv

    def _done_locked(self):
        self._trim_locked()
        self.cond.notify_all()

    def events_after_locked(self, rv, limit=None):
        """Events with resourceVersion > rv, at most limit (caller checked they are kept)."""
        i = rv + 1 - self.log_first
        return self.log[i:i + limit] if limit else self.log[i:]

    def compact(self):
        """Forget all history: any watch or exact read at an older rv gets 410 from now on."""
        with self.lock:
            self.compacted = self.head
            self._snapshots.clear()
            self._done_locked()
            return self.head

    def save(self):
        """A backup of the whole state (what an etcd snapshot holds): every object and the
        resourceVersion counter. Obj records are immutable, so copying the dicts is enough."""
        with self.lock:
            return {"head": self.head, "objects": {rt: dict(o) for rt, o in self.objects.items()},
                    "last_change": dict(self.last_change)}

    def restore(self, saved):
        """Go back to a save() (an etcd restore): its objects, its (older) resourceVersion
        counter, and no history at all, so a watch or an exact read at any older rv gets 410
        and one at a newer rv (what clients saw before the restore) "too large"."""
        with self.lock:
            self.head = saved["head"]
            # Types served since the save stay served, empty.
            self.objects = {rt: dict(saved["objects"].get(rt, {})) for rt in self.registry.types}
            self.last_change = {rt: saved["last_change"].get(rt, 0) for rt in self.registry.types}
            self.log = []
            self.log_first = self.head + 1
            self.compacted = self.head
            self._sorted = {}
            self._snapshots.clear()
            self.held = None
            self.owners = None
            self.cond.notify_all()
            return self.head

    # -- reads -----------------------------------------------------------------------------

    def sorted_keys_locked(self, rt):
        keys = self._sorted.get(rt)
        if keys is None:
            keys = self._sorted[rt] = sorted(self.objects[rt])
        return keys

    def snapshot_locked(self, rt, rv):
        """(objects dict, sorted keys) as they were at resourceVersion rv. Raises 410 when the
        history needed to rebuild that state is gone. The result must not be mutated."""
        if self.last_change[rt] <= rv:
            return self.objects[rt], self.sorted_keys_locked(rt)
        if rv < self.floor:
            raise expired("The resourceVersion for the provided list is too old.")
        hit = self._snapshots.get((rt, rv))
        if hit is not None:
            self._snapshots.move_to_end((rt, rv))
            return hit
        objs = dict(self.objects[rt])
        for ev in reversed(self.events_after_locked(rv)):
            if ev.rt is not rt:
                continue
            if ev.type == "ADDED":
                del objs[ev.obj.key]
            else:
                objs[ev.obj.key] = ev.prev
        snap = (objs, sorted(objs))
        self._snapshots[(rt, rv)] = snap
        while len(self._snapshots) > SNAPSHOT_CACHE:
            self._snapshots.popitem(last=False)
        return snap

    def get(self, rt, ns, name):
        with self.lock:
            obj = self.objects[rt].get(ns + "/" + name if ns else name)
        if obj is None:
            raise not_found(rt, name)
        return obj

    # -- writes ----------------------------------------------------------------------------

    def _check_body(self, rt, ns, d, name=None):
        if not isinstance(d, dict):
            raise bad_request("the body of the request must be a JSON object")
        if d.get("apiVersion") not in (None, "", rt.api_version):
            raise bad_request("the API version in the data (%s) does not match the expected API "
                              "version (%s)" % (d["apiVersion"], rt.api_version))
        if d.get("kind") not in (None, "", rt.kind):
            raise bad_request("the kind in the data (%s) does not match the expected kind (%s)"
                              % (d["kind"], rt.kind))
        md = d.get("metadata")
        if md is None:
            md = d["metadata"] = {}
        if not isinstance(md, dict):
            raise bad_request("metadata must be an object")
        if rt.namespaced:
            if md.get("namespace") and ns and md["namespace"] != ns:
                raise bad_request("the namespace of the provided object does not match the "
                                  "namespace sent on the request")
            if ns:
                md["namespace"] = ns
            elif not md.get("namespace"):
                md["namespace"] = "default"
        else:
            md.pop("namespace", None)
        if name is not None and md.get("name") not in (None, name):
            raise bad_request("the name of the object (%s) does not match the name on the URL (%s)"
                              % (md.get("name"), name))
        return md

    def _check_name(self, rt, name):
        if not name:
            raise invalid(rt.kind, "", [("metadata.name", "Required value: name or generateName "
                                         "is required")], rt.group)
        if len(name) > 253 or not _DNS1123_SUBDOMAIN.match(name):
            raise invalid(rt.kind, name, [("metadata.name", 'Invalid value: "%s": a lowercase RFC '
                                           "1123 subdomain must consist of lower case alphanumeric "
                                           "characters, '-' or '.', and must start and end with an "
                                           "alphanumeric character" % name)], rt.group)

    # dry_run (dryRun=All): every check and the answer of the real write, nothing stored, no
    # event, no new resourceVersion (KEP-576: "as close as possible to a non dry-run response").

    # manager: the field manager of a create/update/patch (fakeapi/ssa.py), which then owns
    # the fields it set; None leaves managedFields as the body has them (server-side apply,
    # which computes them itself, and the control endpoints).

    def create(self, rt, ns, d, dry_run=False, manager=None):
        md = self._check_body(rt, ns, d)
        with self.lock:
            if not md.get("name") and md.get("generateName"):
                md["name"] = md["generateName"] + random_suffix(self._rng)
            self._check_name(rt, md.get("name"))
            key = md["namespace"] + "/" + md["name"] if rt.namespaced else md["name"]
            if key in self.objects[rt]:
                raise already_exists(rt, md["name"])
            md["uid"] = str(uuid.uuid4())
            md["creationTimestamp"] = now_rfc3339()
            if "spec" in d or rt.custom:  # not ConfigMaps; every custom resource
                md["generation"] = 1
            else:
                md.pop("generation", None)
            md.pop("deletionTimestamp", None)
            md.pop("deletionGracePeriodSeconds", None)
            md.pop("selfLink", None)
            if rt.custom and rt.status_subresource:
                d.pop("status", None)  # written through /status only, as for a CRD's objects
            if rt.kind == "Pod" and "status" not in d:
                d["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
            if manager is not None:
                ssa.update(rt, None, d, manager)
            if _is_service(rt):
                services.default(self.objects[rt], d)
            if dry_run:
                md.pop("resourceVersion", None)
                return Preview(d)
            self.head += 1
            md["resourceVersion"] = str(self.head)
            obj = Obj.from_dict(rt, d)
            self._commit_locked(rt, "ADDED", obj, None)
            self._done_locked()
            return obj

    def update(self, rt, ns, name, d, subresource=None, dry_run=False, manager=None):
        """PUT. Optimistic concurrency on metadata.resourceVersion (stale -> 409 Conflict);
        no resourceVersion -> unconditional. A no-op update returns the object unchanged with no
        new resourceVersion and no event, as the real API server does."""
        md = self._check_body(rt, ns, d, name)
        with self.lock:
            cur = self.objects[rt].get(ns + "/" + name if ns else name)
            if cur is None:
                raise not_found(rt, name)
            return self._update_locked(rt, cur, d, subresource, dry_run, manager)

    def _update_locked(self, rt, cur, d, subresource, dry_run=False, manager=None):
        md = d["metadata"]
        want_rv = md.get("resourceVersion")
        if want_rv not in (None, "") and str(want_rv) != str(cur.rv):
            raise conflict(rt, cur.name)
        if md.get("uid") not in (None, "") and md["uid"] != cur.uid:
            raise conflict(rt, cur.name, "Precondition failed: UID in precondition: %s, UID in "
                           "object meta: %s" % (cur.uid, md["uid"]))
        old = cur.to_dict()
        if subresource == "status":
            new = dict(old)
            if "status" in d:
                new["status"] = d["status"]
            else:
                new.pop("status", None)
            if manager is None:  # a server-side apply brings the managedFields it computed
                nmd = new["metadata"] = dict(old["metadata"])
                nmd.pop("managedFields", None)
                if md.get("managedFields"):
                    nmd["managedFields"] = md["managedFields"]
        else:
            new = {k: v for k, v in d.items() if k not in ("kind", "apiVersion")}
            if rt.status_subresource:
                # The main resource ignores status changes (they go through /status).
                if "status" in old:
                    new["status"] = old["status"]
                else:
                    new.pop("status", None)
            nmd = new["metadata"] = dict(md)
            omd = old["metadata"]
            for k in ("name", "namespace", "uid", "creationTimestamp", "generation",
                      "deletionTimestamp", "deletionGracePeriodSeconds"):
                if k in omd:
                    nmd[k] = omd[k]
                else:
                    nmd.pop(k, None)
            if omd.get("deletionTimestamp"):
                added = [f for f in nmd.get("finalizers") or []
                         if f not in (omd.get("finalizers") or [])]
                if added:
                    raise invalid(rt.kind, cur.name, [("metadata.finalizers", "Forbidden: no "
                                  "new finalizers can be added if the object is being deleted, "
                                  "found new finalizers %s" % json.dumps(added))],
                                  rt.group or None)
            # generation moves on changes to anything but metadata (and status, when status
            # is a subresource of its own)
            skip = ("metadata", "status") if rt.status_subresource else ("metadata",)
            spec_changed = ({k: v for k, v in new.items() if k not in skip}
                            != {k: v for k, v in old.items() if k not in skip})
            if spec_changed and "generation" in omd:
                nmd["generation"] = omd["generation"] + 1
            if _is_service(rt):
                services.default(self.objects[rt], new, old)
        if manager is not None:
            ssa.update(rt, old, new, manager, subresource)
        return self._write_locked(rt, cur, new, dry_run, old)

    def _write_locked(self, rt, cur, new, dry_run=False, old=None):
        """Store new (a dict) as the next version of cur: MODIFIED, or DELETED when it is
        terminating without finalizers (then the garbage collector runs). A no-op returns cur."""
        if old is None:
            old = cur.to_dict()
        new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        if normalize(new) == normalize(old):
            return cur
        if dry_run:  # the current resourceVersion: nothing was written
            return Obj.from_dict(rt, new)
        self.head += 1
        new["metadata"]["resourceVersion"] = str(self.head)
        obj = Obj.from_dict(rt, new)
        gone = lifecycle.finalized(new)
        self._commit_locked(rt, "DELETED" if gone else "MODIFIED", obj, cur)
        if gone:
            lifecycle.removed(self, rt, obj)
        self._done_locked()
        return obj

    def _remove_locked(self, rt, cur):
        """cur goes for good (DELETED at a new rv), then the garbage collector runs."""
        self.head += 1
        obj = cur.with_rv(self.head)
        self._commit_locked(rt, "DELETED", obj, cur)
        lifecycle.removed(self, rt, obj)
        self._done_locked()
        return obj

    def modify(self, rt, ns, name, fn, subresource=None, dry_run=False, manager=None):
        """Read-modify-write under the lock: fn(dict) edits the object in place (PATCH, and
        the churn generator). fn sees the stored resourceVersion (a JSON patch may `test` it);
        a different one it leaves in the dict is a precondition (409 Conflict)."""
        with self.lock:
            cur = self.objects[rt].get(ns + "/" + name if ns else name)
            if cur is None:
                raise not_found(rt, name)
            d = fn(cur.to_dict())
            if not isinstance(d, dict) or not isinstance(d.get("metadata"), dict):
                raise bad_request("the patched object is not a valid object")
            md = d["metadata"]
            if md.get("name", name) != name or (rt.namespaced and md.get("namespace", ns) != ns):
                raise bad_request("a patch cannot change the name or namespace of the object")
            md["name"] = name
            if rt.namespaced:
                md["namespace"] = ns
            return self._update_locked(rt, cur, d, subresource, dry_run, manager)

    def delete(self, rt, ns, name, preconditions=None, dry_run=False, policy=None):
        with self.lock:
            key = ns + "/" + name if ns else name
            cur = self.objects[rt].get(key)
            if cur is None:
                raise not_found(rt, name)
            pre = preconditions or {}
            want_rv = pre.get("resourceVersion")
            if want_rv not in (None, "") and str(want_rv) != str(cur.rv):
                raise conflict(rt, name, "Precondition failed: ResourceVersion in precondition: "
                               "%s, ResourceVersion in object meta: %s"
                               % (pre["resourceVersion"], cur.rv))
            if pre.get("uid") not in (None, "") and pre["uid"] != cur.uid:
                raise conflict(rt, name, "Precondition failed: UID in precondition: %s, UID in "
                               "object meta: %s" % (pre["uid"], cur.uid))
            return lifecycle.delete(self, rt, cur, policy, dry_run)

    # -- fast paths for the control endpoints and the generators ----------------------------

    def put_objects(self, items):
        """Bulk create-or-replace of (rt, dict) pairs, one event each, no validation beyond
        the essentials. Returns (created, updated)."""
        created = updated = 0
        stamp = now_rfc3339()
        with self.lock, no_gc():
            for rt, d in items:
                md = d.setdefault("metadata", {})
                name = md.get("name")
                if not name:
                    raise bad_request("every object needs metadata.name")
                if rt.namespaced:
                    md["namespace"] = md.get("namespace") or "default"
                    key = md["namespace"] + "/" + name
                else:
                    md.pop("namespace", None)
                    key = name
                cur = self.objects[rt].get(key)
                self.head += 1
                md["resourceVersion"] = str(self.head)
                if cur is not None:
                    md["uid"] = cur.uid
                else:
                    md.setdefault("uid", str(uuid.uuid4()))
                md.setdefault("creationTimestamp", stamp)
                obj = Obj.from_dict(rt, d)
                self._commit_locked(rt, "MODIFIED" if cur else "ADDED", obj, cur)
                if cur is None:
                    created += 1
                else:
                    updated += 1
            self._done_locked()
        return created, updated

    def insert_built(self, rt, count, build):
        """Generator fast path: build(i, rv) -> Obj for i in range(count), each at its own rv."""
        with self.lock, no_gc():
            for i in range(count):
                self.head += 1
                obj = build(i, self.head)
                prev = self.objects[rt].get(obj.key)
                self._commit_locked(rt, "MODIFIED" if prev else "ADDED", obj, prev)
            self._done_locked()

    def touch(self, rt, count, ns=None, pred=None, batch=2000, offset=0):
        """count MODIFIED events over existing objects (round robin in key order, starting at
        offset): only the resourceVersion and the touched-at annotation change (Obj.touched
        splices them, no copy of the object), so this runs at a few hundred thousand events/s.
        The lock and the GIL are released between batches so open watch streams deliver while
        a big touch is still running. Returns (first rv, last rv, n)."""
        with self.lock:
            objs = self.objects[rt]
            keys = [k for k in self.sorted_keys_locked(rt)
                    if (not ns or objs[k].ns == ns) and (pred is None or pred(objs[k]))]
        if not keys or count <= 0:
            return None, None, 0
        done, first, last, nkeys, touched = 0, None, None, len(keys), 0
        while done < count:
            n = min(batch, count - done)
            with self.lock, no_gc():
                if first is None:
                    first = self.head + 1
                stamp = "%.6f" % time.time()
                head, log, get = self.head, self.log, objs.get
                for i in range(offset + done, offset + done + n):
                    cur = get(keys[i % nkeys])
                    if cur is None:
                        continue  # deleted meanwhile
                    head += 1
                    touched += 1
                    obj = cur.touched(head, stamp)
                    objs[obj.key] = obj
                    log.append(Event(head, rt, "MODIFIED", obj, cur))
                self.head = last = head
                self.last_change[rt] = head
                self._done_locked()
            done += n
            time.sleep(0)  # hand the GIL to the watch threads
        return first, last, touched

    def hold_touches(self, rt, count, ns=None, pred=None):
        """Prepare count touches like touch() but do not publish them: the costly part (the
        new versions and their events) happens now, release_held() makes them visible all at
        once, so open watches get a burst at replay speed instead of the ~90k events/s a live
        touch() allows with the GIL shared. Any other write in between voids the batch."""
        with self.lock, no_gc():
            if self.held is not None:
                raise ApiError(409, "Conflict", "a held batch is waiting for /_fake/release")
            objs = self.objects[rt]
            keys = [k for k in self.sorted_keys_locked(rt)
                    if (not ns or objs[k].ns == ns) and (pred is None or pred(objs[k]))]
            if not keys or count <= 0:
                return 0
            stamp = "%.6f" % time.time()
            latest, events, head = {}, [], self.head
            for i in range(count):
                key = keys[i % len(keys)]
                cur = latest.get(key) or objs[key]
                head += 1
                obj = latest[key] = cur.touched(head, stamp)
                events.append(Event(head, rt, "MODIFIED", obj, cur))
            self.held = (self.head, rt, events)
            return len(events)

    def release_held(self):
        """Publish the batch of hold_touches(): -> (first rv, last rv, n)."""
        with self.lock:
            if self.held is None:
                raise ApiError(409, "Conflict", "nothing is held (POST /_fake/modify with hold)")
            base, rt, events = self.held
            self.held = None
            if base != self.head:
                raise ApiError(409, "Conflict", "writes happened since the batch was held "
                               "(rv %d -> %d); hold it again" % (base, self.head))
            objs = self.objects[rt]
            for ev in events:
                objs[ev.obj.key] = ev.obj
            self.log.extend(events)
            self.head = self.last_change[rt] = events[-1].rv
            self._done_locked()
            return events[0].rv, events[-1].rv, len(events)

    def watch_started(self, rt):
        with self.lock:
            self.watches[rt.name] += 1

    def watch_ended(self, rt):
        with self.lock:
            self.watches[rt.name] -= 1
            if self.watches[rt.name] <= 0:
                del self.watches[rt.name]

