"""Rendering Kubernetes objects to files: commented YAML, kustomizations, atomic writes."""
