"""The evaluation engine and the fleet that runs it.

Nothing here imports Celery or litellm at module import time except
``workers.celery_app`` / ``workers.tasks``; the engine stays a plain function.
"""
