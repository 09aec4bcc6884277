"""The evaluation engine and the fleet that runs it.

Nothing here imports Celery or litellm at module import time except
``workers.fleet.celery_app`` / ``workers.fleet.tasks``; the engine stays a plain function.
"""
