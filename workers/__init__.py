"""The evaluation engine and the fleet that runs it, in two layers.

``workers.core`` evaluates one run (the engine is a plain function: no Celery, no
Redis); ``workers.fleet`` runs the core on Celery workers with Redis as broker and
store. The fleet imports the core, never the other way (tests/test_architecture.py).
"""
