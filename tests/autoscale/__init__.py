"""Tests of the autoscaler (radixfleet/controllers/autoscale)."""
