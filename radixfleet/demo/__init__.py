"""`radixfleet demo`, an app over the local fleet: `run` starts a two-region fleet, replays a
workload through it and reports; `manifests` renders and validates the catalog beside it;
`report` writes summary.json, report.html and the table. `make demo-cluster` (testbed/demo.py)
replays the same workload on the test cluster and reports through the same `report`."""
