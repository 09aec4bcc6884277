"""CLI commands by topic; each module exposes ``register(app)``."""
