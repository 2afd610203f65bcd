"""Helpers the tests share: wire requests, clients, batches, brokers in processes."""
