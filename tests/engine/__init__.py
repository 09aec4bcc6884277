"""Tests of the engine code, in the folder that mirrors it."""
