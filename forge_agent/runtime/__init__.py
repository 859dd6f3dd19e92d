"""Where and how the run's processes live: placement on host meshes, hosts, launchers, supervision,
the services, memory."""
