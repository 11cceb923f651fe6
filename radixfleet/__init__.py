"""radixfleet: the kernel every subsystem imports (typed config, adapters, CLI, local fleet, twin)."""

__version__ = "0.1.0"
