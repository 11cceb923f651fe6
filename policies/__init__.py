"""Fleet controllers: autoscale, quota and failover, each split into observe, decide and act."""
