"""A run's manifest context (`manifests.RunContext`) as the controller's unit tests build it."""

from __future__ import annotations

from gdpval.api.v1alpha1 import GdpvalRunSpec
from gdpval.controller.pure import manifests as m


def ctx(name="demo", **spec) -> m.RunContext:
    base = {
        "model": {"name": "gpt-x", "baseURL": "http://10.250.0.1:8000/v1", "apiKeySecretRef": {"name": "openai", "key": "api-key"}},
        "output": {"url": "s3://bucket/pre", "endpoint": "http://10.250.0.1:9000", "credentialsSecret": {"name": "s3creds"}},
    }
    base.update(spec)
    return m.RunContext(name, "ns", "uid-1", GdpvalRunSpec.model_validate(base), "agent:1", "sandbox:1")
