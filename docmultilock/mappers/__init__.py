"""Locks on the records of object-document mappers: one module per mapper, each an optional extra."""

__all__: list[str] = []
