"""The async shell: lock managers on PyMongo's native async API.

Hand-written; ``docmultilock/_sync`` is generated from it by ``tools/unasync.py``.
"""
