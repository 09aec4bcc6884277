"""Tests of the assay code, in the folder that mirrors it."""
