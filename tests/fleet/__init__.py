"""Tests of the fleet code, in the folder that mirrors it."""
