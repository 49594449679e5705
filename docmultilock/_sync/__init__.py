"""The sync shell: lock managers on PyMongo's sync API.

Generated from ``docmultilock/_async`` by ``tools/unasync.py``: do not edit.
"""
