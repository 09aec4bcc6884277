"""Tests of the deploy code, in the folder that mirrors it."""
