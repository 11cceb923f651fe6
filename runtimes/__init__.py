"""SGLang ClusterServingRuntimes, built in Python and rendered to the YAML beside this file."""
