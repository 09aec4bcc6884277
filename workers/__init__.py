"""The evaluation engine, the policy engine and the fleet that runs them, in two layers.

``workers.engine`` evaluates one run (the engine is a plain function: no Celery, no
Redis); ``workers.policy_engine`` judges clusters with CEL probes and imported admission
policies (no model tokens); ``workers.fleet`` runs both on Celery workers with Redis as
broker and store. The fleet imports the engines, never the other way
(tests/test_architecture.py).
"""
