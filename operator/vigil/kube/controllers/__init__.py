"""The leader's work: controllers, passes and what they act through; they stand on the stores and the kits."""
