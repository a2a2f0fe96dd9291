"""Redis storage: the storage, where its keys live in Redis, and its server-side scripts."""
