"""The version of tracedb: recorded in every traces row and shown by
``tracedb --version``. Here, not in the package root, so that the modules
below the root need not import it."""

__version__ = "0.1.0"
