"""kai: a GitOps-first Kubernetes scheduler for GPU and AI workloads, KAI Scheduler compatible."""

__version__ = "0.1.0"
