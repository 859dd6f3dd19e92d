"""What a run shows: metrics, curves, traces and their page, the console, step profiles."""
