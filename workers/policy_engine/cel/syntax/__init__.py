"""One CEL front end: the runtime's parser, a syntax tree, and every analysis over it.

``parse`` (syntax/parser.py) gives an expression's :class:`Tree`; ``unparse``
(syntax/unparser.py) writes a tree back as CEL for the runtime to compile; syntax/reads.py
says what an expression reads (inputs, fields, probe variables, functions); syntax/locate.py
maps the runtime's error positions back to what the author wrote; syntax/edits.py changes
an author's text at places the tree names. Cost (probes/cost.py), sensitivity
(probes/sensitivity.py), variables and library rewrites (cel/programs.py,
cel/lib/rewrite.py) and policy import (policies/expressions.py) all work on it:
no analysis reads the source text itself.
"""
