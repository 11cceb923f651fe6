"""Tests of the autoscaler (policies/autoscale)."""
