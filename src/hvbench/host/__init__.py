"""The host: inventory, CPU monitor, the run's network, processes, and the ledger of what a run
made."""
