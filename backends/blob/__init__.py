"""Azure Blob Storage: the storage and the blob names of its keys."""
