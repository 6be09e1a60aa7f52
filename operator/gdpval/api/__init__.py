"""The GdpvalRun API: its typed spec and status, one module per CRD version (`v1alpha1`), and the CRD
generated from them (`crd`; `python -m gdpval.api` writes `crds/`).

Below everything that reads a run's resource: the controller decides over these models, the CLI and the
report print them, and none of them reaches into the controller for them.
"""
