"""Weights from the trainer to the generators: the store, the cross-host relay, layouts."""
