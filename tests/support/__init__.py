"""Real test infrastructure shared by the test suite (not part of the shipped package)."""
