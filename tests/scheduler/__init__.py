"""Tests of the scheduler code, in the folder that mirrors it."""
