"""Many small ConfigMaps quickly (--configmaps N): about 1 KB of JSON each, for scale tests.

Like the generated pods (generate.py), each object is a bytes join of one pre-serialized
template with its own name, uid, resourceVersion and a few data values: no json.dumps per
object, so a million of them take seconds. What one costs the server (an Obj, its key, name
and uid strings, its field-selector dict and its JSON) is about 1.7 KB of RSS.
"""

import time

from .generate import Template, rfc3339
from .objects import Obj

_APPS = ["frontend", "checkout", "cart", "catalog", "search", "payments", "auth", "orders"]


def _template(ns, app, base_time):
    """A ConfigMap with @@PLACEHOLDERS@@; about 1 KB rendered, a third of it managedFields."""
    data = {"app.properties": "@@PROPS@@",
            "log.level": "info",
            "application.yaml": ("server:\n  shutdown: graceful\n  compression: true\n"
                                 "spring:\n  datasource:\n    url: jdbc:postgresql://%s-db.%s"
                                 ".svc:5432/%s\n    hikari:\n      maximum-pool-size: 16\n"
                                 "management:\n  endpoints:\n    web:\n      exposure:\n"
                                 "        include: health,info,prometheus\n" % (app, ns, app)),
            "feature.flags": "@@FLAGS@@",
            "endpoint": "https://%s.%s.svc.cluster.local:8443/api/v1" % (app, ns)}
    fields = {"f:data": {"f:" + k: {} for k in data},
              "f:metadata": {"f:labels": {"f:app": {}, "f:app.kubernetes.io/part-of": {}}}}
    return Template({
        "metadata": {"name": "@@NAME@@", "namespace": ns, "uid": "@@UID@@",
                     "resourceVersion": "@@RV@@", "creationTimestamp": rfc3339(base_time),
                     "labels": {"app": app, "app.kubernetes.io/part-of": "bench"},
                     "managedFields": [{"manager": "kubectl-client-side-apply",
                                        "operation": "Update", "apiVersion": "v1",
                                        "time": rfc3339(base_time), "fieldsType": "FieldsV1",
                                        "fieldsV1": fields}]},
        "data": data})


def add_configmaps(store, count, namespaces=10, seed=1):
    """count ConfigMaps named cm-<i> over namespaces ns-0..ns-<namespaces-1>, one event each."""
    from .generate import Cluster
    names = ["ns-%d" % i for i in range(max(1, namespaces))]
    Cluster(store, seed).ensure_namespaces(names)
    rt = store.registry.lookup("configmaps")
    base = time.time() - 86400
    tmpls = {}
    for ns in names:
        for app in _APPS:
            tmpls[ns, app] = _template(ns, app, base)
    labels = {}

    def build(i, rv):
        ns = names[i % len(names)]
        app = _APPS[i // len(names) % len(_APPS)]
        name = "cm-%07d" % i
        h = "%032x" % ((seed << 64 | i + 1) * 0x9E3779B97F4A7C15F39CC0605CEDC835 & (1 << 128) - 1)
        uid = "%s-%s-4%s-%s-%s" % (h[:8], h[8:12], h[13:16], h[16:20], h[20:])
        props = ("server.port=%d;pool.size=%d;timeout.ms=%d;cache.ttl=%d;retries=%d;"
                 "instance=%s" % (8000 + i % 1000, 4 + i % 60, 500 + i % 9500, i % 3600, i % 7,
                                  name)).encode()
        flags = ("new-checkout=%s,dark-mode=%s,beta-search=%s,rollout=%d%%" % (
            "on" if i % 2 else "off", "on" if i % 3 else "off", "on" if i % 5 else "off",
            i % 100)).encode()
        tail = tmpls[ns, app].render({"NAME": name.encode(), "UID": uid.encode(),
                                      "RV": str(rv).encode(), "PROPS": props, "FLAGS": flags})
        lab = labels.get(app)
        if lab is None:
            lab = labels[app] = {"app": app, "app.kubernetes.io/part-of": "bench"}
        return Obj(ns + "/" + name, ns, name, uid, rv, lab,
                   {"metadata.name": name, "metadata.namespace": ns}, tail)

    store.insert_built(rt, count, build)
