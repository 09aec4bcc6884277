"""`assay eval`: a labelled suite any model can be measured against (docs/eval.md).

Follow a run from ``assay/commands/eval.py``: ``suite.py`` loads the cases,
``session.py`` runs the arms (``runner.py`` schedules the attempts within the
caps, ``oracle.py`` and ``baseline.py`` make the scripted oracle and the
no-tools prompt), ``scoring.py`` turns attempts into figures and
``report.py`` / ``chart.py`` show them. ``seam.py`` is the one module that
imports the engine.
"""
