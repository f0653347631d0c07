"""kai: a GitOps-first Kubernetes scheduler for GPU and AI workloads, compatible with KAI Scheduler."""

__version__ = "0.1.0"
