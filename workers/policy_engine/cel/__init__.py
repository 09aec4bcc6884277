"""CEL as Kubernetes runs it: the one door to the CEL runtime that probes and policies use.

``programs`` compiles and runs an expression in Kubernetes' environment (``environment``
declares it); ``lib`` holds the Kubernetes and Kyverno function libraries written in
Python; ``syntax`` is the front end: the runtime's own parse as a tree, read and written back.
"""
