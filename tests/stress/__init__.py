"""Long variants of the failover and soak tests, run by `make stress` (VIGIL_STRESS=1) and never by `make test`."""
