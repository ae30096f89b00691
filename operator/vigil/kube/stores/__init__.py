"""Vigil's objects on the API server, one module a kind, with their one writer each; under the controllers, on the kits."""
