"""Tests of the schemas code, in the folder that mirrors it."""
