"""Tests of the CEL runtime layer, in the folder that mirrors workers/policy_engine/cel."""
