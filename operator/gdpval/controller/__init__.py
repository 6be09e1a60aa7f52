"""The Kubernetes operator for GdpvalRun (filled in below)."""
