"""Check Kubernetes manifests the way a cluster would: CRD schemas, core schemas, names, flags.

`validate_paths` is what `radixfleet validate` runs; each check lives in its own module and
returns `Finding`s, one per problem.
"""

from radixfleet.validate.manifests import Finding, iter_findings, validate_documents, validate_paths

__all__ = ["Finding", "iter_findings", "validate_documents", "validate_paths"]
