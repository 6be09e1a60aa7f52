"""Real test infrastructure: a MinIO server and the local Kubernetes cluster (see hack/)."""
