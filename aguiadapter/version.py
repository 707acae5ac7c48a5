"""The package version (a module of its own: the modules that print it must
not import the package root, which lazily imports them)."""

__version__ = "0.1.0"
