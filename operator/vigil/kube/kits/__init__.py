"""Kubernetes machinery that knows none of Vigil's kinds: the floor every other part of `vigil.kube` stands on."""
