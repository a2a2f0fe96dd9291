"""Azure Cosmos DB storage: the storage and the item ids of its keys."""
