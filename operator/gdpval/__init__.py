"""gdpval-operator: run GDPval locally or on Kubernetes."""

__version__ = "0.1.0"
