"""The test API server: a Go main over k8s.io/apiextensions-apiserver and its pytest plugin."""
