"""The fake Kubernetes API server behind tools/fake-apiserver/server.py.

Modules: resources (served types, discovery), objects (immutable stored objects, Status
errors), store (state, resourceVersions, history), selectors, patch, faults, tables
(kubectl's server-side printing), generate (realistic data, churn), handler (HTTP), main.
"""
