"""The fleet: running the engines on Celery workers, with Redis as broker and store.

The Celery app and its task, dispatch and batches, the verdict store, recovery of lost
runs, checkpoints and timers of deferred WAITs, the rate limiter, the notification feed
and the broker's names and key layout. It imports ``workers.engine`` and
``workers.policy_engine``, never the layers above.
"""
