"""Imported admission policies: read (one module per format), matched and run as probes.

See docs/probes.md, "Imported policies".
"""
