"""The notifier: delivers verdict changes to webhooks, Slack and Alertmanager (`assay notify`).

A fleet-side service like the scheduler: it reads the verdict store
(``workers.fleet.store``) and its change stream through ``workers.fleet.notify_feed``, and
never imports the CLI. See docs/alerting.md.
"""
