"""InferenceService manifests rendered from the model catalog (catalog.yaml beside this file)."""
