"""Tests of the policy_engine code, in the folder that mirrors it."""
