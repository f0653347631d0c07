"""Helpers shared by every test directory: polling, the real kubectl/helm binaries, and the real
Kubernetes control plane. ``tests/conftest.py`` puts ``tests/`` on ``sys.path`` so that any test
imports them as ``from helpers.polling import eventually``."""
