"""File storage: the storage, its file locks, its file I/O and the file names of its keys."""
