"""A module whose import raises, as a library that no longer imports beside another's version
would in the forkserver (tests/test_worker.py preloads it)."""

raise ValueError("this module refuses to import")
