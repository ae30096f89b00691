"""Faults, injected and counted (issue #40): a recorded history, its checker, and seeded fault layers."""
