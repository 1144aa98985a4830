"""The fake Kubernetes API server behind tools/fake-apiserver/server.py.

Modules: resources (served types, discovery, OpenAPI stubs), aggregated (aggregated
discovery), crds (CustomResourceDefinitions that serve their resources), objects (immutable stored
objects, Status errors), store (state, resourceVersions, history), selection (label and
field selectors), patch, faults, tables (kubectl's server-side printing), generate
(realistic data, churn), handler (HTTP), main (command line).
"""
