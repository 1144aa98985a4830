"""Service defaulting and allocation, as kube-apiserver's Service registry does it.

Contract: default(objects, d, old) fills in a core v1 Service dict in place, under the store's
lock (objects: the stored Services, Obj by key, read to keep cluster IPs and node ports
unique). On create (old None): spec.type ClusterIP, sessionAffinity None, ipFamilies [IPv4],
ipFamilyPolicy SingleStack, internalTrafficPolicy Cluster, a clusterIP/clusterIPs from
SERVICE_CIDR (headless "None" kept; none for ExternalName), ports' protocol TCP and
targetPort = port, a nodePort from NODE_PORTS for NodePort and LoadBalancer Services. On
update, the allocated values the client left out are carried over (patchAllocatedValues) and a
different clusterIP is 422 "field is immutable".

Limits: IPv4 only; no dual stack; externalTrafficPolicy, allocateLoadBalancerNodePorts and
healthCheckNodePort are not defaulted; an address is never released for reuse.
"""

import ipaddress
import re

from .objects import invalid

SERVICE_CIDR = ipaddress.ip_network("10.96.0.0/12")
NODE_PORTS = range(30000, 32768)
_KUBERNETES_IP = SERVICE_CIDR.network_address + 1  # the "kubernetes" Service's, never handed out


# Read from the stored bytes, not parsed (a write scans every Service). A match inside some
# other string can only reserve an address or port that is free: harmless.
_IP_RE = re.compile(rb'"clusterIPs?":(?:"([^"]*)"|\[([^\]]*)\])')
_PORT_RE = re.compile(rb'"nodePort":(\d+)')


def _used(objects):
    ips, ports = set(), set()
    for o in objects.values():
        raw = o.tail
        for one, many in _IP_RE.findall(raw):
            for ip in ([one] if one else many.split(b",")):
                ips.add(ip.strip().strip(b'"').decode())
        ports.update(int(p) for p in _PORT_RE.findall(raw))
    return ips, ports


def _next_ip(ips):
    for ip in SERVICE_CIDR.hosts():
        if ip != _KUBERNETES_IP and str(ip) not in ips:
            return str(ip)
    raise invalid("Service", "", [("spec.clusterIPs", "Internal error: range is full")])


def _next_port(ports):
    for p in NODE_PORTS:
        if p not in ports:
            return p
    raise invalid("Service", "", [("spec.ports", "Internal error: range is full")])


def default(objects, d, old=None):
    spec = d.get("spec")
    if not isinstance(spec, dict):
        spec = d["spec"] = {}
    name = (d.get("metadata") or {}).get("name", "")
    ospec = (old or {}).get("spec") or {}
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    external = spec["type"] == "ExternalName"
    if old is not None:
        for k in ("clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"):
            if k not in spec and k in ospec:
                spec[k] = ospec[k]
        if ospec.get("clusterIP") and spec.get("clusterIP") != ospec["clusterIP"] \
                and not external and ospec.get("type") != "ExternalName":
            raise invalid("Service", name, [("spec.clusterIP", 'Invalid value: "%s": field is '
                                             "immutable" % spec.get("clusterIP", ""))])
    ips, node_ports = _used(objects)
    if not external:
        spec.setdefault("internalTrafficPolicy", "Cluster")
        ip = spec.get("clusterIP") or (spec.get("clusterIPs") or [None])[0]
        if not ip:
            ip = _next_ip(ips)
        spec["clusterIP"] = ip
        spec["clusterIPs"] = spec.get("clusterIPs") or [ip]
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
    old_ports = {(p.get("port"), p.get("protocol", "TCP")): p for p in ospec.get("ports") or []
                 if isinstance(p, dict)}
    for p in spec.get("ports") or []:
        if not isinstance(p, dict):
            continue
        p.setdefault("protocol", "TCP")
        if "targetPort" not in p and "port" in p:
            p["targetPort"] = p["port"]
        if spec["type"] in ("NodePort", "LoadBalancer") and not p.get("nodePort"):
            was = old_ports.get((p.get("port"), p["protocol"])) or {}
            p["nodePort"] = was.get("nodePort") or _next_port(node_ports)
            node_ports.add(p["nodePort"])
    return d
