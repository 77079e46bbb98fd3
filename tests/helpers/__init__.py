"""Test helpers shared across test folders (imported as `tests.helpers.*`; conftest files hold fixtures only)."""
