"""Hosts: where a run's processes live, in one home.

- `config`: the `hosts` and `services` config sections (`HostsConfig`, `PlacementConfig`);
- `meshes`: which hosts (`hosts.kind`: local, hosts at addresses, a Slurm or Kubernetes job)
  and their Monarch host meshes;
- `placement`: which procs (and GPUs) each service gets on those meshes;
- `slurm`: Monarch's Slurm job, as this run submits, waits for and releases it;
- `attach`: attaching running host processes, and what a host answers about itself;
- `serve`: the host process itself (`python -m forge_agent.hosts.serve --address tcp://HOST:PORT`);
- `netns`, `slurm_cluster`: real hosts on one machine (network namespaces, a Slurm cluster in
  them), for the tests and benches that cross a network.
"""
