"""assay: the user's front door (CLI, Python client, HTTP API)."""
