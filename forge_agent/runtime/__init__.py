"""Leaves the run's hosts stand on: attaching Monarch worker hosts (`hosts`), network-namespace
hosts (`netns`), a real Slurm cluster in namespaces (`slurm_cluster`), memory (`memory`)."""
