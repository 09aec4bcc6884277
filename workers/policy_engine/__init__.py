"""The policy engine: CEL probes and imported admission policies judged with no model tokens.

``probes`` compiles and runs CEL probes (the CEL environment, its libraries and its syntax
front end live there); ``policies`` turns ValidatingAdmissionPolicy, Kyverno and Gatekeeper
policies into probes and runs them against a cluster's stored objects.
"""
