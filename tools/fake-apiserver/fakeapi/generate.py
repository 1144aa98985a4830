"""Realistic objects for load and demos.

Pods look like a Deployment's pods on a real cluster, managedFields included (about 9 KB of
JSON each). 100k of them must be generated in seconds, so each Deployment's pod is serialized
once as a template with @@PLACEHOLDERS@@ and every pod is a bytes join of the template's
pieces with its own name, uid, rv, node, IPs and timestamps: no json.dumps per pod.
"""

import json
import random
import re
import threading
import time
import uuid

from .objects import TOUCH_ANNOTATION, Obj
from .resources import dumps
from .store import random_suffix

APPS = ["frontend", "checkout", "cart", "catalog", "search", "payments", "auth", "orders",
        "shipping", "inventory", "recommendations", "reviews", "notifications", "billing",
        "accounts", "gateway", "pricing", "media", "analytics", "ledger"]
NODES = 50
_HOST_IPS = [b"10.0.0.%d" % (i + 2) for i in range(NODES)]
_SUFFIX_CHARS = "bcdfghjklmnpqrstvwxz2456789"

_PH = re.compile(rb"@@([A-Z0-9_]+)@@")


def rfc3339(t):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


# List fields whose items are merged by key in server-side apply, and the key fields (the
# +listMapKey markers of the Kubernetes API); other lists are atomic and show up as {}.
_LIST_KEYS = {"ports": ("containerPort", "protocol"), "volumeMounts": ("mountPath",),
              "conditions": ("type",), "podIPs": ("ip",), "hostIPs": ("ip",),
              "containers": ("name",), "env": ("name",), "volumes": ("name",),
              "ownerReferences": ("uid",)}


def fields_v1(value, field=None):
    """managedFields' fieldsV1 for a value, as structured-merge-diff writes it: maps ->
    "f:key", keyed lists -> 'k:{"key":value}' with "." and every field, others -> {}."""
    if isinstance(value, dict):
        return {"f:" + k: fields_v1(v, k) for k, v in value.items()}
    keys = _LIST_KEYS.get(field)
    if isinstance(value, list) and keys and value and all(isinstance(x, dict) for x in value):
        out = {}
        for x in value:
            k = "k:" + json.dumps({kk: x.get(kk, "TCP") for kk in keys}, separators=(",", ":"))
            sub = {".": {}}
            sub.update(sorted(fields_v1(x).items()))
            out[k] = sub
        return out
    return {}


class Template:
    """A serialized object with @@NAME@@ placeholders; render(values) joins bytes into an
    Obj tail (the JSON without its first '{')."""

    def __init__(self, d):
        # Objects are stored without their opening '{' (Obj.tail): drop it here so rendering
        # makes exactly one allocation per object.
        raw = dumps(d)[1:]
        parts = _PH.split(raw)
        self.static = parts[0::2]
        self.names = [p.decode() for p in parts[1::2]]

    def render(self, values):
        out = [self.static[0]]
        for name, s in zip(self.names, self.static[1:]):
            out.append(values[name])
            out.append(s)
        return b"".join(out)


class Deployment:
    """One generated Deployment: its template, ReplicaSet identity and the pods it owns."""

    def __init__(self, rng, ns, name, replicas, base_time, service=False):
        self.rng = rng
        self.ns = ns
        self.name = name
        self.replicas = replicas
        self.hash = random_suffix(rng, 10)
        self.rs_name = "%s-%s" % (name, self.hash)
        self._names = set()  # pod names drawn so far: never twice
        self.uid, self.rs_uid, self.svc_uid = (str(uuid.UUID(int=rng.getrandbits(128), version=4))
                                               for _ in range(3))
        self.base_time = base_time
        self.image = "registry.example.com/%s/%s:1.%d.%d" % (ns, name, rng.randrange(30),
                                                             rng.randrange(10))
        self.image_id = "%s@sha256:%064x" % (self.image.rsplit(":", 1)[0], rng.getrandbits(256))
        self.port = 8080
        self.labels = {"app": name, "pod-template-hash": self.hash,
                       "app.kubernetes.io/name": name,
                       "tier": rng.choice(["web", "backend", "worker"])}
        self._stamps = {}
        self._fields = {"metadata.name": "", "metadata.namespace": ns, "spec.nodeName": "",
                        "spec.restartPolicy": "Always", "spec.schedulerName": "default-scheduler",
                        "spec.serviceAccountName": name, "spec.hostNetwork": "false",
                        "status.phase": "Running", "status.podIP": "",
                        "status.nominatedNodeName": ""}
        self.template = Template(self._pod(ready=True))
        self.template_unready = Template(self._pod(ready=False))
        self.pods = []          # pod names, in creation order
        self.service = service  # has a Service + EndpointSlice (sample cluster)
        self.slice_name = "%s-%s" % (name, random_suffix(rng, 5))

    # -- the pod ---------------------------------------------------------------------------

    def _container(self):
        def env(name, value):
            return {"name": name, "value": value}

        def env_from(name, kind, ref):
            return {"name": name, "valueFrom": {kind: ref}}

        def probe(path, **extra):
            return dict({"httpGet": {"path": path, "port": "http", "scheme": "HTTP"},
                         "failureThreshold": 3, "periodSeconds": 10, "successThreshold": 1,
                         "timeoutSeconds": 1}, **extra)

        field = {"apiVersion": "v1", "fieldPath": "metadata.name"}
        return {
            "name": self.name, "image": self.image,
            "ports": [{"name": "http", "containerPort": self.port, "protocol": "TCP"},
                      {"name": "metrics", "containerPort": 9090, "protocol": "TCP"}],
            "env": [env("APP_NAME", self.name), env("APP_ENV", "production"),
                    env("LOG_LEVEL", "info"), env("METRICS_PORT", "9090"),
                    env("HTTP_PORT", str(self.port)),
                    env("DATABASE_URL", "postgres://%s-db.%s.svc.cluster.local:5432/%s"
                        % (self.name, self.ns, self.name)),
                    env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://otel-collector.monitoring.svc:4317"),
                    env_from("POD_NAME", "fieldRef", field),
                    env_from("POD_NAMESPACE", "fieldRef",
                             dict(field, fieldPath="metadata.namespace")),
                    env_from("API_TOKEN", "secretKeyRef",
                             {"name": self.name + "-secrets", "key": "api-token"})],
            "resources": {"limits": {"cpu": "1", "memory": "512Mi"},
                          "requests": {"cpu": "100m", "memory": "128Mi"}},
            "volumeMounts": [{"name": "config", "mountPath": "/etc/" + self.name, "readOnly": True},
                             {"name": "kube-api-access", "readOnly": True,
                              "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
            "livenessProbe": probe("/healthz", initialDelaySeconds=10),
            "readinessProbe": probe("/ready"),
            "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent",
            "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                "runAsNonRoot": True, "capabilities": {"drop": ["ALL"]}}}

    def _spec(self):
        def toleration(key):
            return {"key": key, "operator": "Exists", "effect": "NoExecute",
                    "tolerationSeconds": 300}

        token_sources = [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt",
                           "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {
                "apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]
        return {
            "volumes": [{"name": "config",
                         "configMap": {"name": self.name + "-config", "defaultMode": 420}},
                        {"name": "kube-api-access",
                         "projected": {"sources": token_sources, "defaultMode": 420}}],
            "containers": [self._container()],
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst", "serviceAccountName": self.name,
            "serviceAccount": self.name, "nodeName": "@@NODE@@",
            "securityContext": {"fsGroup": 2000, "seccompProfile": {"type": "RuntimeDefault"}},
            "schedulerName": "default-scheduler",
            "tolerations": [toleration("node.kubernetes.io/not-ready"),
                            toleration("node.kubernetes.io/unreachable")],
            "priority": 0, "enableServiceLinks": True, "preemptionPolicy": "PreemptLowerPriority"}

    def _status(self, ready):
        def cond(type_, status, stamp):
            c = {"type": type_, "status": status, "lastProbeTime": None,
                 "lastTransitionTime": stamp}
            if status == "False":
                c["reason"] = "ContainersNotReady"
                c["message"] = "containers with unready status: [%s]" % self.name
            return c

        r = "True" if ready else "False"
        return {
            "phase": "Running",
            "conditions": [cond("PodReadyToStartContainers", "True", "@@STIME@@"),
                           cond("Initialized", "True", "@@CTIME@@"),
                           cond("Ready", r, "@@STIME@@"),
                           cond("ContainersReady", r, "@@STIME@@"),
                           cond("PodScheduled", "True", "@@CTIME@@")],
            "hostIP": "@@HOSTIP@@", "hostIPs": [{"ip": "@@HOSTIP@@"}],
            "podIP": "@@PODIP@@", "podIPs": [{"ip": "@@PODIP@@"}], "startTime": "@@CTIME@@",
            "containerStatuses": [{
                "name": self.name, "state": {"running": {"startedAt": "@@STIME@@"}},
                "lastState": {}, "ready": ready, "restartCount": 0, "image": self.image,
                "imageID": self.image_id, "containerID": "containerd://@@CID@@",
                "started": True}],
            "qosClass": "Burstable"}

    def _pod(self, ready):
        """The pod as a dict with @@PLACEHOLDERS@@ for what differs between pods."""
        spec, status = self._spec(), self._status(ready)
        owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": self.rs_name,
                 "uid": self.rs_uid, "controller": True, "blockOwnerDeletion": True}
        annotations = {"kubectl.kubernetes.io/restartedAt": rfc3339(self.base_time - 86400 * 3),
                       "prometheus.io/scrape": "true", "prometheus.io/port": "9090",
                       TOUCH_ANNOTATION: "0"}

        def managed(manager, stamp, fields, subresource=None):
            m = {"manager": manager, "operation": "Update", "apiVersion": "v1", "time": stamp,
                 "fieldsType": "FieldsV1", "fieldsV1": fields}
            if subresource:
                m["subresource"] = subresource
            return m

        # Who wrote what, as on a real cluster: the ReplicaSet controller the metadata and
        # spec, the scheduler the PodScheduled condition (and nodeName), the kubelet status.
        controller = fields_v1({"metadata": {"generateName": "", "labels": self.labels,
                                             "annotations": annotations,
                                             "ownerReferences": [owner]},
                                "spec": {k: v for k, v in spec.items() if k != "nodeName"}})
        scheduler = fields_v1({"status": {"conditions": [status["conditions"][-1]]}})
        kubelet = fields_v1({"status": dict(status, conditions=status["conditions"][:-1])})
        meta = {"name": "@@NAME@@", "generateName": self.rs_name + "-", "namespace": self.ns,
                "uid": "@@UID@@", "resourceVersion": "@@RV@@", "creationTimestamp": "@@CTIME@@",
                "labels": self.labels, "annotations": annotations, "ownerReferences": [owner],
                "managedFields": [managed("kube-controller-manager", "@@CTIME@@", controller),
                                  managed("kube-scheduler", "@@CTIME@@", scheduler, "status"),
                                  managed("kubelet", "@@STIME@@", kubelet, "status")]}
        return {"metadata": meta, "spec": spec, "status": status}

    def new_pod(self, rt, index, rv, ready=True, name=None):
        """A pod Obj at resourceVersion rv. index spreads pods over nodes and IPs."""
        rng = self.rng
        if name is None:
            # A ReplicaSet's pod names are unique: draw again on a collision (1 in 14 M per pair).
            name = "%s-%s" % (self.rs_name, "".join(rng.choices(_SUFFIX_CHARS, k=5)))
            while name in self._names:
                name = "%s-%s" % (self.rs_name, "".join(rng.choices(_SUFFIX_CHARS, k=5)))
            self._names.add(name)
        node = "node-%02d" % (index % NODES)
        pod_ip = "10.%d.%d.%d" % (64 + index // 65024 % 64, index // 254 % 256, index % 254 + 1)
        h = "%032x" % rng.getrandbits(128)
        uid = "%s-%s-4%s-%s-%s" % (h[:8], h[8:12], h[13:16], h[16:20], h[20:])
        offset = index % 3600
        values = {
            "NAME": name.encode(), "UID": uid.encode(), "RV": str(rv).encode(),
            "NODE": node.encode(), "HOSTIP": _HOST_IPS[index % NODES], "PODIP": pod_ip.encode(),
            "CTIME": self._stamp(offset), "STIME": self._stamp(offset + 7),
            "CID": b"%064x" % rng.getrandbits(256)}
        tmpl = self.template if ready else self.template_unready
        fields = dict(self._fields, **{"metadata.name": name, "spec.nodeName": node,
                                       "status.podIP": pod_ip})
        return Obj(self.ns + "/" + name, self.ns, name, uid, rv, self.labels, fields,
                   tmpl.render(values))

    def _stamp(self, offset):
        s = self._stamps.get(offset)
        if s is None:
            s = self._stamps[offset] = rfc3339(self.base_time + offset).encode()
        return s

    # -- the other objects of a Deployment -------------------------------------------------

    def _meta(self, name, uid, labels, owner_kind=None, owner_name=None, owner_uid=None):
        md = {"name": name, "namespace": self.ns, "uid": uid,
              "creationTimestamp": rfc3339(self.base_time), "labels": labels}
        if owner_kind:
            md["ownerReferences"] = [{"apiVersion": "apps/v1" if owner_kind != "Service" else "v1",
                                      "kind": owner_kind, "name": owner_name, "uid": owner_uid,
                                      "controller": True, "blockOwnerDeletion": True}]
        return md

    def deployment(self):
        md = self._meta(self.name, self.uid, {"app": self.name})
        md["annotations"] = {"deployment.kubernetes.io/revision": "1"}
        n = self.replicas
        return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": md,
                "spec": {"replicas": n, "selector": {"matchLabels": {"app": self.name}},
                         "template": {"metadata": {"labels": {"app": self.name}},
                                      "spec": {"containers": [self._container()]}},
                         "strategy": {"type": "RollingUpdate", "rollingUpdate": {
                             "maxUnavailable": "25%", "maxSurge": "25%"}},
                         "revisionHistoryLimit": 10, "progressDeadlineSeconds": 600},
                "status": {"observedGeneration": 1, "replicas": n, "updatedReplicas": n,
                           "readyReplicas": n, "availableReplicas": n}}

    def replicaset(self):
        labels = {"app": self.name, "pod-template-hash": self.hash}
        n = self.replicas
        return {"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "metadata": self._meta(self.rs_name, self.rs_uid, labels, "Deployment", self.name,
                                       self.uid),
                "spec": {"replicas": n, "selector": {"matchLabels": labels}},
                "status": {"replicas": n, "readyReplicas": n, "availableReplicas": n,
                           "observedGeneration": 1}}

    def service_obj(self, index):
        ip = "10.96.%d.%d" % (index // 250, index % 250 + 10)
        return {"apiVersion": "v1", "kind": "Service",
                "metadata": self._meta(self.name, self.svc_uid, {"app": self.name}),
                "spec": {"type": "ClusterIP", "selector": {"app": self.name},
                         "clusterIP": ip, "clusterIPs": [ip],
                         "ports": [{"name": "http", "port": 80, "targetPort": "http",
                                    "protocol": "TCP"}],
                         "sessionAffinity": "None", "ipFamilies": ["IPv4"],
                         "ipFamilyPolicy": "SingleStack", "internalTrafficPolicy": "Cluster"},
                "status": {"loadBalancer": {}}}

    def endpointslice(self, pods):
        """The EndpointSlice of this Deployment's Service for the given pod dicts."""
        eps = []
        for p in pods:
            ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                        for c in p.get("status", {}).get("conditions", []))
            node = p["spec"]["nodeName"]
            eps.append({"addresses": [p["status"]["podIP"]],
                        "conditions": {"ready": ready, "serving": ready, "terminating": False},
                        "targetRef": {"kind": "Pod", "namespace": self.ns,
                                      "name": p["metadata"]["name"], "uid": p["metadata"]["uid"]},
                        "nodeName": node, "zone": "zone-" + "abc"[sum(node.encode()) % 3]})
        labels = {"kubernetes.io/service-name": self.name,
                  "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
                  "app": self.name}
        md = self._meta(self.slice_name, None, labels, "Service", self.name, self.svc_uid)
        del md["uid"]  # assigned by the store on first write
        md["generateName"] = self.name + "-"
        return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": md,
                "addressType": "IPv4", "endpoints": eps,
                "ports": [{"name": "http", "port": self.port, "protocol": "TCP"}]}


class Cluster:
    """The generated objects and the churn generator that keeps changing them."""

    def __init__(self, store, seed=1):
        self.store = store
        self.reg = store.registry
        self.rng = random.Random(seed)
        self.deployments = []
        self.base_time = time.time() - 86400 * 2
        self._pod_counter = 0
        self._churn_rate = 0.0
        self._churn_thread = None
        self._churn_wakeup = threading.Event()
        self.churn_ops = 0

    def rt(self, name):
        return self.reg.lookup(name)

    def ensure_namespaces(self, names):
        ns_rt = self.rt("namespaces")
        items = []
        for n in names:
            if n not in self.store.objects[ns_rt]:
                items.append((ns_rt, {"metadata": {"name": n, "labels": {
                                          "kubernetes.io/metadata.name": n}},
                                      "spec": {"finalizers": ["kubernetes"]},
                                      "status": {"phase": "Active"}}))
        self.store.put_objects(items)

    def add_pods(self, count, namespaces=10, per_deployment=100):
        """--pods N: N pods in Deployments of per_deployment pods across namespaces."""
        names = ["ns-%d" % i for i in range(max(1, namespaces))]
        self.ensure_namespaces(names)
        pods_rt = self.rt("pods")
        deps = []
        left, i = count, 0
        while left > 0:
            n = min(per_deployment, left)
            ns = names[i % len(names)]
            app = APPS[i % len(APPS)] + ("" if i < len(APPS) else "-%d" % (i // len(APPS)))
            deps.append(Deployment(self.rng, ns, app, n, self.base_time))
            left -= n
            i += 1
        self.deployments.extend(deps)
        plan = [(d, j) for d in deps for j in range(d.replicas)]
        start = self._pod_counter

        def build(i, rv):
            d, _ = plan[i]
            obj = d.new_pod(pods_rt, start + i, rv)
            d.pods.append(obj.name)
            return obj

        self.store.insert_built(pods_rt, len(plan), build)
        self._pod_counter += len(plan)

    def sample_cluster(self):
        """A small demo cluster: nodes, 3 namespaces, Deployments with ReplicaSets, pods,
        Services and EndpointSlices; one pod per serving Deployment starts not ready."""
        node_rt = self.rt("nodes")
        self.store.put_objects([(node_rt, {"metadata": {"name": "node-%02d" % i, "labels": {
            "kubernetes.io/hostname": "node-%02d" % i, "kubernetes.io/os": "linux",
            "topology.kubernetes.io/zone": "zone-%s" % "abc"[i % 3]}},
            "spec": {"podCIDR": "10.244.%d.0/24" % i},
            "status": {"conditions": [{"type": "Ready", "status": "True"}],
                       "addresses": [{"type": "InternalIP", "address": "10.0.0.%d" % (i + 2)}]}})
            for i in range(3)])
        layout = [("shop", "frontend", 3, True), ("shop", "cart", 2, True),
                  ("shop", "catalog", 2, True), ("payments", "api", 2, True),
                  ("payments", "worker", 1, False), ("monitoring", "prometheus", 1, True)]
        self.ensure_namespaces(sorted({ns for ns, *_ in layout}))
        pods_rt = self.rt("pods")
        for idx, (ns, name, replicas, svc) in enumerate(layout):
            d = Deployment(self.rng, ns, name, replicas, self.base_time, service=svc)
            self.deployments.append(d)
            self.store.put_objects([(self.rt("deployments"), d.deployment()),
                                    (self.rt("replicasets"), d.replicaset())])
            for j in range(replicas):
                self._new_pod(d, ready=not (svc and j == 1))
            if svc:
                self.store.put_objects([(self.rt("services"), d.service_obj(idx))])
                self._sync_slice(d)

    def _new_pod(self, d, ready=True):
        pods_rt = self.rt("pods")
        index = self._pod_counter
        self._pod_counter += 1

        def build(_i, rv):
            obj = d.new_pod(pods_rt, index, rv, ready=ready)
            d.pods.append(obj.name)
            return obj
        self.store.insert_built(pods_rt, 1, build)

    def _pod_dicts(self, d):
        pods_rt = self.rt("pods")
        objs = self.store.objects[pods_rt]
        with self.store.lock:
            return [objs[d.ns + "/" + n].to_dict() for n in d.pods if d.ns + "/" + n in objs]

    def _sync_slice(self, d):
        if not d.service:
            return
        es_rt = self.rt("endpointslices")
        slice_d = d.endpointslice(self._pod_dicts(d))
        with self.store.lock:
            cur = self.store.objects[es_rt].get(d.ns + "/" + d.slice_name)
            if cur is None:
                self.store.put_objects([(es_rt, slice_d)])
            else:
                self.store.update(es_rt, d.ns, d.slice_name, slice_d)

    # -- churn -----------------------------------------------------------------------------

    @property
    def churn_rate(self):
        return self._churn_rate

    def set_churn(self, rate):
        """Start, retune or (rate 0) pause the churn generator: about `rate` writes/s."""
        self._churn_rate = max(0.0, float(rate))
        if self._churn_rate > 0 and self._churn_thread is None:
            self._churn_thread = threading.Thread(target=self._churn_loop, name="churn",
                                                  daemon=True)
            self._churn_thread.start()
        self._churn_wakeup.set()

    def _churn_loop(self):
        next_t = time.monotonic()
        while True:
            if self._churn_rate <= 0:
                self._churn_wakeup.wait()
                self._churn_wakeup.clear()
                next_t = time.monotonic()
                continue
            now = time.monotonic()
            if next_t > now:
                self._churn_wakeup.wait(next_t - now)
                self._churn_wakeup.clear()
                continue
            try:
                writes = self.churn_once()
            except Exception as e:  # a churn step racing a client's delete: skip it
                import sys
                print("churn: %s" % e, file=sys.stderr)
                writes = 1
            self.churn_ops += 1
            next_t += max(1, writes) / self._churn_rate
            if next_t < time.monotonic() - 1:
                next_t = time.monotonic()  # don't try to catch up after a stall

    def churn_once(self):
        """One change like a live cluster makes; returns the number of writes it did."""
        deps = [d for d in self.deployments if d.pods]
        if not deps:
            return 1
        rng = self.rng
        d = rng.choice(deps)
        pods_rt = self.rt("pods")
        name = rng.choice(d.pods)
        roll = rng.random()
        if roll < 0.4:
            def flip(p):
                conds = p["status"].get("conditions", [])
                now_ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conds)
                for c in conds:
                    if c["type"] in ("Ready", "ContainersReady"):
                        c["status"] = "False" if now_ready else "True"
                        c["lastTransitionTime"] = rfc3339(time.time())
                for cs in p["status"].get("containerStatuses", [])[:1]:
                    cs["ready"] = not now_ready
                return p
            self.store.modify(pods_rt, d.ns, name, flip, subresource="status")
            self._sync_slice(d)
            return 2 if d.service else 1
        if roll < 0.7:
            def relabel(p):
                labels = p["metadata"].setdefault("labels", {})
                labels["track"] = "canary" if labels.get("track") != "canary" else "stable"
                return p
            self.store.modify(pods_rt, d.ns, name, relabel)
            return 1
        # Replace a pod, as a ReplicaSet does after an eviction.
        self.store.delete(pods_rt, d.ns, name)
        d.pods.remove(name)
        self._new_pod(d)
        self._sync_slice(d)
        return 3 if d.service else 2


def huge_pod(nbytes, name="oversized"):
    """A valid pod whose JSON is about nbytes long (a giant annotation)."""
    base = {"kind": "Pod", "apiVersion": "v1",
            "metadata": {"name": name, "namespace": "default", "uid": str(uuid.uuid4()),
                         "resourceVersion": "1", "annotations": {"huge": ""}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    pad = max(0, nbytes - len(json.dumps(base)))
    base["metadata"]["annotations"]["huge"] = "x" * pad
    return base
