"""Stand-ins that ship with assay for demos, tests and benchmarks.

``scripted_model`` is an OpenAI-compatible server that replays a script (it is
not an LLM); ``fake_apiserver`` serves a snapshot folder over the Kubernetes
REST API. Neither is ever used unless asked for by name.
"""
