"""Tests of the notifier code, in the folder that mirrors it."""
