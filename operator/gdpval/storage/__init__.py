"""One interface over a local folder and S3, plus the run layout both share."""

from gdpval.storage.base import NotFound, Storage, StorageError
from gdpval.storage.factory import open_storage

__all__ = ["NotFound", "Storage", "StorageError", "open_storage"]
