"""The policy engine: CEL probes and imported admission policies judged with no model tokens.

``cel`` is CEL as Kubernetes runs it (compile and run, the environment, the function
libraries, the syntax front end); ``probes`` compiles, bounds and accepts CEL probes;
``policies`` turns ValidatingAdmissionPolicy, Kyverno and Gatekeeper policies into probes
and runs them against a cluster's stored objects.
"""
