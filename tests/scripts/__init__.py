"""Tests of the scripts code, in the folder that mirrors it."""
