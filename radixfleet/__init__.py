"""radixfleet's kernel: typed config, adapters, the CLI, the local fleet and the fleet twin."""

__version__ = "0.1.0"
